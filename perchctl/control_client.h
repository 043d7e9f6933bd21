// ControlClient: perchctl's connection to perchd's control API, and what a
// failed connection or call means as a message and an exit status.
//
// Exit statuses (README, "Controlling the cache"): 0 success; 1 the operation
// failed; 2 bad usage; 3 no perchd answers at the address; 4 not found;
// 5 permission denied on the control socket.
//
// Thread-safety: stub() may be used from several threads (gRPC stubs are);
// the rest from one.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "proto/perch.grpc.pb.h"

namespace perch::ctl {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoDaemon = 3;
inline constexpr int kExitNotFound = 4;
inline constexpr int kExitPermission = 5;

class ControlClient {
 public:
  // `address`: a socket path, "unix:PATH" or "tcp:HOST:PORT".
  explicit ControlClient(std::string address);

  // 0 once a daemon answers; otherwise prints why not and returns the exit
  // status: kExitPermission when the socket refuses this user (EACCES),
  // kExitNoDaemon when nothing answers within a few seconds.
  int Connect();

  // Prints "perchctl: <what>: <message>" and returns the exit status for `s`.
  int Fail(const grpc::Status& s, const std::string& what) const;

  // A context with a deadline `timeout` from now.
  std::unique_ptr<grpc::ClientContext> Context(
      std::chrono::seconds timeout = std::chrono::seconds(30)) const;

  v1::Perch::Stub& stub() { return *stub_; }

 private:
  std::string address_;
  std::string socket_path_;  // "" for tcp
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Perch::Stub> stub_;
};

}  // namespace perch::ctl

// ControlServer: perchd's gRPC control API (proto/perch.proto) over
// core::NodeControl, and MetricsServer: the same counters as Prometheus text.
//
// Both only translate: requests into NodeControl calls, core results into
// messages, core::Status into grpc::Status (ToGrpcStatus, the one mapping out
// for the control plane). Handlers use gRPC's callback API and never wait on
// the data path: stats are snapshots of atomics, health and warm answer from
// completions.
//
// Thread-safety: Start/Shutdown from one thread (main); handlers run on
// gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "daemon/core/node_control.h"
#include "perch/version.h"

namespace perch::control {

grpc::Status ToGrpcStatus(const core::Status& status);

// Bounds on what one request may carry. The API has no authentication (who
// can connect may ask), so nothing a request says may make perchd allocate
// or loop without limit; a request past them is INVALID_ARGUMENT (gRPC itself
// answers RESOURCE_EXHAUSTED to a message larger than max_message_bytes).
struct ControlLimits {
  // A hint list of an ImageNet-1k epoch (1.28 M paths) is about 100 MB.
  int max_message_bytes = 256 << 20;
  size_t max_hint_paths = 4u << 20;
  size_t max_warm_paths = 65536;
  size_t max_path_bytes = 4096;  // PATH_MAX
  size_t max_job_bytes = 256;    // a hint's job name
};

struct ControlOptions {
  // "unix:/path/to/sock" or "tcp:HOST:PORT" with a loopback HOST (port 0
  // picks one); anything else is refused (CheckControlAddress).
  std::string address;
  // The group (name or number) that owns the unix socket, so that its
  // members may use perchctl; "" keeps the daemon's own group.
  std::string socket_group;
  std::string version = kVersion;
  std::string metrics_address;  // reported by Health
  std::string http_address;     // reported by Health
  ControlLimits limits;
};

class ControlServer {
 public:
  explicit ControlServer(core::NodeControl& node);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Listens on options.address. A unix socket's directory is created, a stale
  // socket replaced, and the socket made mode 0660 (group socket_group when
  // set); another daemon already answering there is an error
  // (kInvalidArgument), as are a bad or non-loopback address and an unknown
  // group.
  core::Status Start(const ControlOptions& options);
  // The address actually listened on ("tcp:127.0.0.1:43123" after port 0).
  const std::string& address() const { return address_; }
  // Ends every call (a running warm stream is cancelled) and stops listening.
  void Shutdown();

  class Service;

 private:
  core::NodeControl& node_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string socket_path_;  // removed at Shutdown
};

// A minimal HTTP server answering GET /metrics (loopback unless allowed
// otherwise). Requests are bounded: 8 KiB of headers, no body, 5 s.
class MetricsServer {
 public:
  explicit MetricsServer(core::NodeControl& node);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on "IP:PORT" (port 0 picks one; IPv6 as "[::1]:PORT") and serves
  // from a thread of its own. A non-loopback IP is refused (kInvalidArgument)
  // unless `allow_remote`.
  // With `listening` >= 0 (taken): that socket, already listening on
  // `address` (the previous perchd's, handed over), is served instead.
  core::Status Start(const std::string& address, bool allow_remote = false, int listening = -1);
  // "127.0.0.1:9464", after Start.
  const std::string& address() const { return address_; }
  // A duplicate (close-on-exec) of the listening socket for the next
  // perchd (see HttpEndpoint::DupListener); -1 when not listening.
  int DupListener() const;
  void Stop();

  struct Impl;

 private:
  core::NodeControl& node_;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace perch::control

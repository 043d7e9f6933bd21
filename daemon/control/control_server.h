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

namespace perch::control {

grpc::Status ToGrpcStatus(const core::Status& status);

struct ControlOptions {
  // "unix:/path/to/sock" or "tcp:127.0.0.1:PORT" (port 0 picks one).
  std::string address;
  std::string version = "0.1.0";
  std::string metrics_address;  // reported by Health
};

class ControlServer {
 public:
  explicit ControlServer(core::NodeControl& node);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Listens on options.address. A unix socket's directory is created, a stale
  // socket replaced, and the socket made mode 0660; another daemon already
  // answering there is an error (kInvalidArgument), as is a bad address.
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

// Renders `s` in the Prometheus text exposition format (version 0.0.4).
std::string RenderPrometheus(const core::StatsSnapshot& s);

// A minimal HTTP server answering GET /metrics on a loopback address.
class MetricsServer {
 public:
  explicit MetricsServer(core::NodeControl& node);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on "HOST:PORT" (port 0 picks one) and serves from a thread of its own.
  core::Status Start(const std::string& address);
  // "127.0.0.1:9464", after Start.
  const std::string& address() const { return address_; }
  void Stop();

  struct Impl;

 private:
  core::NodeControl& node_;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace perch::control

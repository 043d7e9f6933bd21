#include "daemon/control/control_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/control/process_stats.h"
#include "daemon/control/stats_proto.h"
#include "daemon/core/mutex.h"
#include "proto/control_address.h"
#include "proto/perch.grpc.pb.h"

namespace perch::control {

using core::StatusCode;

grpc::Status ToGrpcStatus(const core::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kCorrupt:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case StatusCode::kNoSpace:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kStale:
      code = grpc::StatusCode::ABORTED;  // a retry opens the new version
      break;
    case StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::DATA_LOSS) {
    spdlog::error("control: {}", s.ToString());
  } else {
    spdlog::debug("control: {}", s.ToString());
  }
  return grpc::Status(code, s.message());
}

namespace {

// INVALID_ARGUMENT naming the bound when a request's `paths` has more than
// `max_paths` entries or one longer than limits.max_path_bytes; else OK.
grpc::Status CheckPaths(const google::protobuf::RepeatedPtrField<std::string>& paths,
                        size_t max_paths, const ControlLimits& limits, const char* what) {
  if (static_cast<size_t>(paths.size()) > max_paths) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(what) + " of " + std::to_string(paths.size()) +
                            " paths is more than the " + std::to_string(max_paths) +
                            " one request may carry");
  }
  for (const std::string& p : paths) {
    if (p.size() > limits.max_path_bytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(what) + ": a path of " + std::to_string(p.size()) +
                              " bytes is longer than " + std::to_string(limits.max_path_bytes));
    }
  }
  return grpc::Status::OK;
}

// Streams one job's progress (a warm, a verify). gRPC allows one write in
// flight, so the newest progress waits in `latest_` and intermediate ones
// are skipped.
//
// Lifetime: the job's progress callback may outlive this reactor (it runs on
// other threads), so it reaches the reactor through `Link`, which OnDone
// clears before the reactor is deleted.
template <typename Job, typename Progress, typename Message>
class JobWriter : public grpc::ServerWriteReactor<Message> {
 public:
  struct Link {
    core::Mutex mu;
    JobWriter* writer PERCH_GUARDED_BY(mu) = nullptr;
  };
  using UpdateFn = std::function<void(const Progress&)>;
  using StartFn = std::function<core::Result<std::shared_ptr<Job>>(UpdateFn)>;

  // Finishes at once with `bad` unless it is OK; else starts the job with
  // `start` (its updates stream; none when detached).
  JobWriter(bool detach, const grpc::Status& bad, const StartFn& start)
      : link_(std::make_shared<Link>()), detach_(detach) {
    if (!bad.ok()) {
      this->Finish(bad);
      finish_called_ = true;
      return;
    }
    core::MutexLock l(link_->mu);
    link_->writer = this;
    auto update = [link = link_](const Progress& p) { Forward(*link, p); };
    auto job = start(detach_ ? UpdateFn() : update);
    if (!job.ok()) {
      link_->writer = nullptr;
      this->Finish(ToGrpcStatus(job.status()));
      finish_called_ = true;
      return;
    }
    job_ = *std::move(job);
    OnProgress(job_->Progress());  // the first message names the job
  }

  void OnWriteDone(bool ok) override {
    core::MutexLock l(link_->mu);
    writing_ = false;
    if (!ok) {
      // The client went away: a job nobody waits for ends (unless detached).
      if (!detach_) job_->Cancel();
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (detach_ || sent_final_) {
      FinishOnce(grpc::Status::OK);
      return;
    }
    WriteLatest();
  }

  void OnCancel() override {
    core::MutexLock l(link_->mu);
    if (job_ && !detach_) job_->Cancel();
    if (!writing_) FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    {
      core::MutexLock l(link_->mu);
      link_->writer = nullptr;
    }
    delete this;
  }

 private:
  // The job's progress callback: to the writer, if there still is one.
  // Unchecked: link.mu is the writer's link_->mu, which the analysis cannot
  // see through link.writer.
  static void Forward(Link& link, const Progress& p) PERCH_NO_THREAD_SAFETY_ANALYSIS {
    core::MutexLock l(link.mu);
    if (link.writer != nullptr) link.writer->OnProgress(p);
  }

  void OnProgress(const Progress& p) PERCH_REQUIRES(link_->mu) {
    if (finish_called_) return;
    latest_ = p;
    dirty_ = true;
    WriteLatest();
  }

  void WriteLatest() PERCH_REQUIRES(link_->mu) {
    if (writing_ || !dirty_ || finish_called_) return;
    message_.Clear();
    ToProto(latest_, &message_);
    dirty_ = false;
    writing_ = true;
    sent_final_ = latest_.finished;
    this->StartWrite(&message_);
  }

  void FinishOnce(const grpc::Status& s) PERCH_REQUIRES(link_->mu) {
    if (finish_called_) return;
    finish_called_ = true;
    this->Finish(s);
  }

  std::shared_ptr<Link> link_;
  const bool detach_;
  std::shared_ptr<Job> job_;
  Progress latest_ PERCH_GUARDED_BY(link_->mu);
  bool dirty_ PERCH_GUARDED_BY(link_->mu) = false;
  bool writing_ PERCH_GUARDED_BY(link_->mu) = false;
  bool sent_final_ PERCH_GUARDED_BY(link_->mu) = false;
  bool finish_called_ PERCH_GUARDED_BY(link_->mu) = false;
  Message message_ PERCH_GUARDED_BY(link_->mu);
};

using WarmWriter = JobWriter<core::WarmJob, core::WarmProgress, v1::WarmProgress>;
using VerifyWriter = JobWriter<core::ScrubJob, core::ScrubProgress, v1::VerifyProgress>;

WarmWriter* NewWarmWriter(core::NodeControl& node, const v1::WarmRequest& request,
                          const ControlLimits& limits) {
  grpc::Status bad = CheckPaths(request.paths(), limits.max_warm_paths, limits, "a warm");
  std::vector<core::ObjectPath> paths;
  for (const std::string& p : request.paths()) {
    if (!bad.ok()) break;
    auto resolved = node.Resolve(p);
    if (!resolved.ok()) {
      bad = ToGrpcStatus(resolved.status());
      break;
    }
    paths.push_back(*resolved);
  }
  if (bad.ok() && paths.empty())
    bad = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no paths to warm");
  return new WarmWriter(request.detach(), bad, [&](WarmWriter::UpdateFn update) {
    return node.Warm(paths, request.recursive(), std::move(update));
  });
}

}  // namespace

class ControlServer::Service final : public v1::Perch::CallbackService {
 public:
  Service(core::NodeControl& node, ControlOptions options)
      : node_(node), options_(std::move(options)) {}
  void set_address(std::string a) { options_.address = std::move(a); }

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx, const v1::GetStatsRequest*,
                                     v1::Stats* reply) override {
    auto* r = ctx->DefaultReactor();
    try {
      // A name core counts and Stats lacks is a bug the unit tests catch; the rest is served.
      core::Status st = StatsNow(node_.Stats(), reply);
      if (!st.ok()) spdlog::error("control: stats: {}", st.ToString());
      r->Finish(grpc::Status::OK);
    } catch (const std::exception& e) {
      r->Finish(grpc::Status(grpc::StatusCode::INTERNAL, e.what()));
    }
    return r;
  }

  grpc::ServerWriteReactor<v1::WarmProgress>* Warm(grpc::CallbackServerContext*,
                                                   const v1::WarmRequest* request) override {
    return NewWarmWriter(node_, *request, options_.limits);
  }

  grpc::ServerWriteReactor<v1::VerifyProgress>* Verify(grpc::CallbackServerContext*,
                                                       const v1::VerifyRequest* request) override {
    // No path: everything cached (the catalog's root holds every mount's tag).
    auto path = request->path().empty() ? core::Result<core::ObjectPath>(core::ObjectPath())
                                        : Resolve(request->path());
    grpc::Status bad = path.ok() ? grpc::Status::OK : ToGrpcStatus(path.status());
    return new VerifyWriter(request->detach(), bad, [&](VerifyWriter::UpdateFn update) {
      return core::Result<std::shared_ptr<core::ScrubJob>>(node_.Verify(*path, std::move(update)));
    });
  }

  grpc::ServerUnaryReactor* Pin(grpc::CallbackServerContext* ctx, const v1::PinRequest* request,
                                v1::PinReply* reply) override {
    return PinOrUnpin(ctx, request, reply, true);
  }
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* ctx, const v1::PinRequest* request,
                                  v1::PinReply* reply) override {
    return PinOrUnpin(ctx, request, reply, false);
  }

  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* ctx, const v1::EvictRequest* request,
                                  v1::EvictReply* reply) override {
    auto* r = ctx->DefaultReactor();
    auto path = Resolve(request->path());
    if (!path.ok()) {
      r->Finish(ToGrpcStatus(path.status()));
      return r;
    }
    // Removing block files is disk work: it runs on the node's job executor.
    node_.Evict(*path, [this, r, reply, p = *path](core::Result<core::EvictResult> result) {
      if (!result.ok()) {
        r->Finish(ToGrpcStatus(result.status()));
        return;
      }
      reply->set_path(ProtoText(node_.FederationPath(p)));
      reply->set_objects(result->objects);
      reply->set_blocks(result->blocks);
      reply->set_bytes(result->bytes);
      reply->set_pinned_objects(result->pinned_objects);
      reply->set_busy_blocks(result->busy_blocks);
      r->Finish(grpc::Status::OK);
    });
    return r;
  }

  grpc::ServerUnaryReactor* ListCached(grpc::CallbackServerContext* ctx,
                                       const v1::ListCachedRequest* request,
                                       v1::ListCachedReply* reply) override {
    auto* r = ctx->DefaultReactor();
    // No path: every mount (the catalog's root holds each mount's tag).
    auto path = request->path().empty() ? core::Result<core::ObjectPath>(core::ObjectPath())
                                        : Resolve(request->path());
    if (!path.ok()) {
      r->Finish(ToGrpcStatus(path.status()));
      return r;
    }
    // The page token is the last object path of the previous page, in hex
    // (a path need not be UTF-8).
    std::string after;
    if (request->page_token().size() > 2 * options_.limits.max_path_bytes ||
        !PathOfPageToken(request->page_token(), &after)) {
      r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a page token"));
      return r;
    }
    size_t page = request->page_size() == 0 ? 1000 : std::min<size_t>(request->page_size(), 10000);
    auto objects = node_.ListCached(*path, after, page + 1);
    bool more = objects.size() > page;
    if (more) objects.resize(page);
    for (const auto& o : objects) {
      auto* c = reply->add_objects();
      c->set_path(ProtoText(node_.FederationPath(o.path)));
      c->set_federation(node_.FederationOf(o.path));
      c->set_size(o.size);
      c->set_cached_bytes(o.cached_bytes);
      c->set_blocks(o.blocks);
      c->set_pinned(o.pinned);
    }
    if (more && !objects.empty()) reply->set_next_page_token(PageToken(objects.back().path.str()));
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Hint(grpc::CallbackServerContext* ctx, const v1::HintRequest* request,
                                 v1::HintReply* reply) override {
    auto* r = ctx->DefaultReactor();
    if (request->job().empty() || request->job().size() > options_.limits.max_job_bytes) {
      r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "a hint needs a job name of 1 to " +
                                 std::to_string(options_.limits.max_job_bytes) + " bytes"));
      return r;
    }
    const ControlLimits& limits = options_.limits;
    if (grpc::Status bad = CheckPaths(request->paths(), limits.max_hint_paths, limits, "a hint");
        !bad.ok()) {
      r->Finish(bad);
      return r;
    }
    auto result = node_.Hint(request->job(), {request->paths().begin(), request->paths().end()});
    if (!result.ok()) {
      r->Finish(ToGrpcStatus(result.status()));
      return r;
    }
    reply->set_accepted(result->first);
    reply->set_rejected(result->second);
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx,
                                   const v1::HealthRequest* request,
                                   v1::HealthReply* reply) override {
    auto* r = ctx->DefaultReactor();
    auto timeout =
        std::chrono::milliseconds(request->timeout_ms() == 0 ? 5000 : request->timeout_ms());
    node_.Health(timeout, [this, r, reply](core::HealthReport h) {
      reply->set_healthy(h.healthy);
      if (!h.mounts.empty()) {
        reply->set_mountpoint(h.mounts.front().mountpoint);
        reply->set_federation_url(h.mounts.front().federation_url);
      }
      bool mounted = !h.mounts.empty(), offline = false;
      for (const auto& m : h.mounts) {
        auto* out = reply->add_mounts();
        out->set_mountpoint(m.mountpoint);
        out->set_federation_url(m.federation_url);
        out->set_mounted(m.mounted);
        out->set_offline(m.offline);
        out->set_healthy(m.healthy);
        mounted = mounted && m.mounted;
        offline = offline || m.offline;
      }
      reply->set_mounted(mounted);
      reply->set_offline(offline);
      for (const auto& n : h.namespaces) {
        auto* ns = reply->add_namespaces();
        ns->set_path(n.path);
        ns->set_federation(n.federation);
        ns->set_reachable(n.reachable);
        ns->set_latency_ms(static_cast<uint64_t>(n.latency.count()));
        ns->set_error(n.error);
      }
      reply->set_cache_dir(h.cache_dir);
      reply->set_cache_capacity_bytes(h.cache_capacity_bytes);
      reply->set_cache_used_bytes(h.cache_used_bytes);
      reply->set_disk_total_bytes(h.disk_total_bytes);
      reply->set_disk_free_bytes(h.disk_free_bytes);
      reply->set_disk_error(h.disk_error);
      reply->set_store_error(h.store_error);
      reply->set_listener_error(h.listener_error);
      reply->set_version(options_.version);
      reply->set_control_address(options_.address);
      reply->set_metrics_address(options_.metrics_address);
      reply->set_http_address(options_.http_address);
      reply->set_pid(::getpid());
      r->Finish(grpc::Status::OK);
    });
    return r;
  }

 private:
  // NodeControl::Resolve, for a path no longer than the limit.
  core::Result<core::ObjectPath> Resolve(const std::string& path) const {
    if (path.size() > options_.limits.max_path_bytes) {
      return core::InvalidArgumentError("a path of " + std::to_string(path.size()) +
                                        " bytes is longer than " +
                                        std::to_string(options_.limits.max_path_bytes));
    }
    return node_.Resolve(path);
  }

  grpc::ServerUnaryReactor* PinOrUnpin(grpc::CallbackServerContext* ctx,
                                       const v1::PinRequest* request, v1::PinReply* reply,
                                       bool pin) {
    auto* r = ctx->DefaultReactor();
    auto path = Resolve(request->path());
    if (!path.ok()) {
      r->Finish(ToGrpcStatus(path.status()));
      return r;
    }
    core::Status s = pin ? node_.Pin(*path) : node_.Unpin(*path);
    if (s.code() == StatusCode::kNotFound) {
      s = core::NotFoundError(node_.FederationPath(*path) + " is not pinned",
                              core::FailureSite::kLocal);
    }
    if (!s.ok()) {
      r->Finish(ToGrpcStatus(s));
      return r;
    }
    reply->set_path(ProtoText(node_.FederationPath(*path)));
    for (const auto& p : node_.Pins()) reply->add_pins(ProtoText(node_.FederationPath(p)));
    r->Finish(grpc::Status::OK);
    return r;
  }

  core::NodeControl& node_;
  ControlOptions options_;
};

ControlServer::ControlServer(core::NodeControl& node) : node_(node) {}

ControlServer::~ControlServer() { Shutdown(); }

namespace {

// True if something accepts connections on unix socket `path`.
bool SocketAnswers(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool answers = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return answers;
}

}  // namespace

core::Status ControlServer::Start(const ControlOptions& options) {
  if (std::string why = CheckControlAddress(options.address); !why.empty()) {
    return core::InvalidArgumentError(why);
  }
  gid_t group = static_cast<gid_t>(-1);  // chown(2): leave the group as it is
  if (!options.socket_group.empty() && !LookupGroup(options.socket_group, &group)) {
    return core::InvalidArgumentError("control_group '" + options.socket_group +
                                      "': no such group");
  }
  std::string listen;
  if (options.address.starts_with("unix:")) {
    socket_path_ = options.address.substr(5);
    if (socket_path_.empty() || socket_path_.size() >= sizeof(sockaddr_un::sun_path)) {
      return core::InvalidArgumentError("--control unix:PATH needs a path shorter than 108 bytes");
    }
    std::error_code ec;
    const auto parent = std::filesystem::path(socket_path_).parent_path();
    // perchd runs with umask 077; the socket's group must reach it (0660).
    if (std::filesystem::create_directories(parent, ec)) {
      std::filesystem::permissions(parent, std::filesystem::perms(0755), ec);
    }
    if (ec) {
      return core::InternalError("cannot create the directory of control socket " + socket_path_ +
                                 ": " + ec.message());
    }
    if (std::filesystem::exists(socket_path_, ec)) {
      if (SocketAnswers(socket_path_)) {
        std::string taken = socket_path_;
        socket_path_.clear();  // not ours: never remove it
        return core::UnavailableError("another perchd already listens on " + taken +
                                          " (choose another with --control unix:PATH)",
                                      core::FailureSite::kLocal);
      }
      std::filesystem::remove(socket_path_, ec);  // stale, from a daemon that died
    }
    listen = "unix:" + socket_path_;
  } else if (options.address.starts_with("tcp:")) {
    listen = options.address.substr(4);
    if (listen.find(':') == std::string::npos) {
      return core::InvalidArgumentError(
          "--control tcp:HOST:PORT needs a port, e.g. tcp:127.0.0.1:7901");
    }
  } else {
    return core::InvalidArgumentError("bad --control address '" + options.address +
                                      "': use unix:/path/to/sock or tcp:127.0.0.1:PORT");
  }

  service_ = std::make_unique<Service>(node_, options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(options.limits.max_message_bytes);
  server_ = builder.BuildAndStart();
  if (!server_) {
    socket_path_.clear();
    return core::UnavailableError("cannot listen for control on " + options.address,
                                  core::FailureSite::kLocal);
  }
  if (!socket_path_.empty()) {
    // Who may connect is who may use the API: the owner (root for the system
    // daemon) and the socket's group.
    if (::chmod(socket_path_.c_str(), 0660) != 0) {
      spdlog::warn("control: chmod 0660 {}: {}", socket_path_, std::strerror(errno));
    }
    if (group != static_cast<gid_t>(-1) &&
        ::chown(socket_path_.c_str(), static_cast<uid_t>(-1), group) != 0) {
      std::string why = "cannot give control socket " + socket_path_ + " to group " +
                        options.socket_group + ": " + std::strerror(errno);
      Shutdown();
      return core::InternalError(why);
    }
    address_ = "unix:" + socket_path_;
  } else {
    address_ = "tcp:" + listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  }
  service_->set_address(address_);
  spdlog::info("control API on {}", address_);
  return core::Status::Ok();
}

void ControlServer::Shutdown() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
  if (!socket_path_.empty()) {
    std::error_code ec;
    std::filesystem::remove(socket_path_, ec);
    socket_path_.clear();
  }
}

}  // namespace perch::control

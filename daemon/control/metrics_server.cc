// MetricsServer: GET /metrics over plain HTTP/1.1 with Boost.Beast, on one
// thread of its own. Every connection has a 5 s deadline, so a stuck scraper
// cannot hold the thread, and a request is at most 8 KiB of headers and no
// body, so a client cannot make it allocate. At most kConnections are open
// at once, kPerUser of them of one local user (the peer socket's owner,
// daemon/peers): past that a connection is closed at once, so no user can
// make perchd hold its descriptors (which its reads need) nor lock the
// scraper out.
#include <fcntl.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <optional>
#include <utility>

#include "daemon/control/control_server.h"
#include "daemon/control/process_stats.h"
#include "daemon/control/prometheus.h"
#include "daemon/peers/connection_slots.h"
#include "daemon/peers/peer_credentials.h"
#include "proto/control_address.h"

namespace perch::control {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kConnections = 32;
constexpr size_t kPerUser = 8;

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `release` gives the connection's slot back when the session ends.
  Session(tcp::socket socket, core::NodeControl& node, std::function<void()> release)
      : stream_(std::move(socket)), node_(node), release_(std::move(release)) {}
  ~Session() { release_(); }

  void Run() {
    stream_.expires_after(std::chrono::seconds(5));
    bhttp::async_read(
        stream_, buffer_, request_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) return;
    response_.version(request_.version());
    response_.keep_alive(false);
    response_.set(bhttp::field::server, "perchd");
    if (request_.method() != bhttp::verb::get && request_.method() != bhttp::verb::head) {
      response_.result(bhttp::status::method_not_allowed);
      response_.set(bhttp::field::content_type, "text/plain");
      response_.body() = "only GET\n";
    } else if (request_.target() != "/metrics") {
      response_.result(bhttp::status::not_found);
      response_.set(bhttp::field::content_type, "text/plain");
      response_.body() = "perchd serves /metrics\n";
    } else {
      response_.result(bhttp::status::ok);
      response_.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      try {
        v1::Stats stats;
        core::Status st = StatsNow(node_.Stats(), &stats);
        if (!st.ok()) spdlog::error("metrics: {}", st.ToString());  // a bug; the rest is served
        response_.body() = RenderPrometheus(stats);
      } catch (const std::exception& e) {
        response_.result(bhttp::status::internal_server_error);
        response_.body() = std::string(e.what()) + "\n";
      }
    }
    response_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(5));
    bhttp::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  beast::tcp_stream stream_;
  core::NodeControl& node_;
  std::function<void()> release_;
  beast::flat_buffer buffer_{16 * 1024};  // Beast parses at most 8 KiB of request headers
  bhttp::request<bhttp::empty_body> request_;
  bhttp::response<bhttp::string_body> response_;
};

}  // namespace

struct MetricsServer::Impl {
  // Touched on the io thread only (and by sessions destroyed with io, after
  // it): declared before io so that it outlives them.
  peers::ConnectionSlots slots{kConnections, kPerUser};
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  core::NodeControl* node = nullptr;

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec != asio::error::operation_aborted) Accept();
        return;
      }
      const std::optional<peers::Peer> peer = peers::LoopbackPeer(socket.native_handle());
      const peers::ConnectionSlots::Owner owner =
          peer ? peers::ConnectionSlots::Owner(peer->uid) : std::nullopt;
      if (slots.Acquire(owner) == peers::ConnectionSlots::Admission::kAdmitted) {
        std::make_shared<Session>(std::move(socket), *node, [this, owner] {
          slots.Release(owner);
        })->Run();
      } else {
        spdlog::debug("metrics: connection refused: {} held by its user, {} in all",
                      slots.held_by(owner), slots.held());
        beast::error_code ignored;
        socket.close(ignored);
      }
      Accept();
    });
  }
};

MetricsServer::MetricsServer(core::NodeControl& node) : node_(node) {}

MetricsServer::~MetricsServer() { Stop(); }

core::Status MetricsServer::Start(const std::string& address, bool allow_remote, int listening) {
  // Whatever happens, a socket handed in is this function's.
  struct Taken {
    int fd;
    ~Taken() {
      if (fd >= 0) ::close(fd);
    }
  } taken{listening};
  if (std::string why = CheckMetricsAddress(address, allow_remote);
      !why.empty() || address.empty()) {
    return core::InvalidArgumentError(why.empty() ? "no metrics address" : why);
  }
  std::string host;
  unsigned port = 0;
  SplitHostPort(address, &host, &port);  // checked above
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  auto ip = asio::ip::make_address(host, ec);
  if (ec)
    return core::InvalidArgumentError("bad metrics address '" + address + "': " + ec.message());
  impl_ = std::make_unique<Impl>();
  impl_->node = &node_;
  tcp::endpoint ep(ip, static_cast<uint16_t>(port));
  if (taken.fd >= 0) {
    int accepting = 0;
    socklen_t al = sizeof(accepting);
    if (::getsockopt(taken.fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &al) != 0 || !accepting) {
      impl_.reset();
      return core::InvalidArgumentError("the metrics socket handed over for " + address +
                                        " is not listening");
    }
    impl_->acceptor.assign(ep.protocol(), std::exchange(taken.fd, -1), ec);
  } else {
    impl_->acceptor.open(ep.protocol(), ec);
    if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) impl_->acceptor.bind(ep, ec);
    if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    impl_.reset();
    return core::InvalidArgumentError("cannot listen for metrics on " + address + ": " +
                                      ec.message());
  }
  auto local = impl_->acceptor.local_endpoint();
  std::string ip_text = local.address().to_string();
  address_ = (local.address().is_v6() ? "[" + ip_text + "]" : ip_text) + ":" +
             std::to_string(local.port());
  impl_->Accept();
  impl_->thread = std::thread([impl = impl_.get()] {
    pthread_setname_np(pthread_self(), "perch-metrics");
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      spdlog::error("metrics server stopped: {}", e.what());
    }
  });
  spdlog::info("Prometheus metrics on http://{}/metrics", address_);
  return core::Status::Ok();
}

int MetricsServer::DupListener() const {
  return impl_ ? ::fcntl(impl_->acceptor.native_handle(), F_DUPFD_CLOEXEC, 0) : -1;
}

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace perch::control

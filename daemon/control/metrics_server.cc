// MetricsServer: GET /metrics over plain HTTP/1.1 with Boost.Beast, on one
// thread of its own. Every connection has a 5 s deadline, so a stuck scraper
// cannot hold the thread, and a request is at most 8 KiB of headers and no
// body, so a client cannot make it allocate.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "daemon/control/control_server.h"
#include "daemon/control/process_stats.h"
#include "daemon/control/prometheus.h"
#include "proto/control_address.h"

namespace perch::control {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, core::NodeControl& node) : stream_(std::move(socket)), node_(node) {}

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
  beast::flat_buffer buffer_{16 * 1024};  // Beast parses at most 8 KiB of request headers
  bhttp::request<bhttp::empty_body> request_;
  bhttp::response<bhttp::string_body> response_;
};

}  // namespace

struct MetricsServer::Impl {
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
      std::make_shared<Session>(std::move(socket), *node)->Run();
      Accept();
    });
  }
};

MetricsServer::MetricsServer(core::NodeControl& node) : node_(node) {}

MetricsServer::~MetricsServer() { Stop(); }

core::Status MetricsServer::Start(const std::string& address, bool allow_remote) {
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
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
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

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace perch::control

#include "devfed/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <list>
#include <thread>

#include "daemon/core/mutex.h"
#include "devfed/go_http.h"

namespace perch::devfed {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  Handler handler;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> tls;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  uint16_t port = 0;
  core::Mutex mu;
  std::list<std::thread> conns PERCH_GUARDED_BY(mu);
  std::list<std::shared_ptr<tcp::socket>> sockets PERCH_GUARDED_BY(mu);

  template <typename Stream>
  void Serve(Stream& stream) {
    beast::flat_buffer buf;
    boost::system::error_code ec;
    while (!stopping) {
      HttpRequest req;
      bhttp::read(stream, buf, req, ec);
      if (ec) return;
      HttpReply r;
      try {
        r = handler(req);
      } catch (const std::exception& e) {
        r = HttpReply{
            500, {{"Content-Type", "text/plain"}}, std::string("internal error: ") + e.what()};
      }
      bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), req.version()};
      if (bhttp::obsolete_reason(res.result()) == "<unknown-status>") {
        res.reason("status code " +
                   std::to_string(r.status));  // net/http's text for a code it has no name for
      }
      // net/http writes header names sorted (values of one name in order).
      std::stable_sort(r.headers.begin(), r.headers.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& [k, v] : r.headers) res.insert(k, v);
      res.set(bhttp::field::date, gohttp::HttpDate());
      if (req.method() == bhttp::verb::head) {
        // net/http: a HEAD answer carries Content-Length only for a body the
        // handler wrote (and then drops the body).
        if (!r.body.empty()) res.content_length(r.body.size());
      } else {
        res.body() = std::move(r.body);
        res.prepare_payload();
      }
      bool keep = req.keep_alive() && !r.close;
      res.keep_alive(keep);
      bhttp::response_serializer<bhttp::string_body> sr{res};
      if (req.method() == bhttp::verb::head) {
        bhttp::write_header(stream, sr, ec);
      } else {
        bhttp::write(stream, sr, ec);
      }
      if (ec || !keep) return;
    }
  }

  void ServeConnection(const std::shared_ptr<tcp::socket>& sock) {
    boost::system::error_code ec;
    if (tls) {
      beast::ssl_stream<tcp::socket&> stream(*sock, *tls);
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (!ec) Serve(stream);
      stream.shutdown(ec);
    } else {
      Serve(*sock);
    }
    sock->shutdown(tcp::socket::shutdown_both, ec);
  }
};

HttpServer::HttpServer(Handler handler, int port, const std::string& cert, const std::string& key)
    : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  if (!cert.empty()) {
    impl_->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    impl_->tls->use_certificate_chain_file(cert);
    impl_->tls->use_private_key_file(key, asio::ssl::context::pem);
  }
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port));
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  impl_->port = impl_->acceptor.local_endpoint().port();
  Impl* impl = impl_.get();
  impl_->accept_thread = std::thread([impl] {
    while (!impl->stopping) {
      auto sock = std::make_shared<tcp::socket>(impl->io);
      boost::system::error_code ec;
      impl->acceptor.accept(*sock, ec);
      if (ec || impl->stopping) break;
      core::MutexLock l(impl->mu);
      impl->sockets.push_back(sock);
      impl->conns.emplace_back([impl, sock] { impl->ServeConnection(sock); });
    }
  });
}

std::string HttpServer::Url() const {
  return std::string(impl_->tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(impl_->port);
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  if (impl_->stopping.exchange(true)) return;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  {
    tcp::socket s(impl_->io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), impl_->port), ec);
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  std::list<std::thread> conns;
  {
    core::MutexLock l(impl_->mu);
    for (auto& s : impl_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
    conns.swap(impl_->conns);
  }
  for (auto& t : conns) t.join();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace perch::devfed

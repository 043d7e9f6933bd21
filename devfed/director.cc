#include "devfed/director.h"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "daemon/core/types.h"
#include "daemon/http/url.h"

namespace perch::devfed {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string NewUuid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t a = rng(), b = rng();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

struct Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

Reply JsonError(int status, const std::string& msg) {
  std::string id = NewUuid();
  Reply r;
  r.status = status;
  r.body = nlohmann::json{{"status", "error"}, {"msg", msg + " Request ID: " + id}}.dump();
  r.headers = {{"Content-Type", "application/json"}, {"X-Pelican-JobId", id}};
  return r;
}

}  // namespace

struct Director::Impl {
  std::vector<Namespace> namespaces;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> tls;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::list<std::thread> conns;                         // Protected by mu
  std::list<std::shared_ptr<tcp::socket>> sockets;      // Protected by mu
  uint16_t port = 0;

  std::string Url() const { return std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port); }

  Reply Handle(const bhttp::request<bhttp::string_body>& req);

  template <typename Stream>
  void Serve(Stream& stream) {
    beast::flat_buffer buf;
    boost::system::error_code ec;
    while (!stopping) {
      bhttp::request<bhttp::string_body> req;
      bhttp::read(stream, buf, req, ec);
      if (ec) return;
      Reply r;
      try {
        r = Handle(req);
      } catch (const std::exception& e) {
        r = JsonError(500, std::string("internal error: ") + e.what());
      }
      bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), req.version()};
      res.set(bhttp::field::server, "pelican/7.27.0");
      for (auto& [k, v] : r.headers) res.insert(k, v);
      if (req.method() != bhttp::verb::head) res.body() = std::move(r.body);
      res.prepare_payload();
      res.keep_alive(req.keep_alive());
      bhttp::write(stream, res, ec);
      if (ec || !req.keep_alive()) return;
    }
  }

  void ServeConnection(std::shared_ptr<tcp::socket> sock) {
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

Reply Director::Impl::Handle(const bhttp::request<bhttp::string_body>& req) {
  std::string target(req.target());
  std::string query;
  if (size_t q = target.find('?'); q != std::string::npos) {
    query = target.substr(q + 1);
    target = target.substr(0, q);
  }
  auto has_param = [&](const std::string& name) {
    std::string s = "&" + query + "&";
    return s.find("&" + name + "&") != std::string::npos || s.find("&" + name + "=") != std::string::npos;
  };
  if (target == "/.well-known/pelican-configuration") {
    Reply r;
    r.headers = {{"Content-Type", "application/json"}};
    r.body = nlohmann::json{{"director_endpoint", Url()},
                            {"namespace_registration_endpoint", Url()},
                            {"jwks_uri", Url() + "/.well-known/issuer.jwks"},
                            {"discovery_endpoint", Url()}}
                 .dump(2);
    return r;
  }
  if (req.method() == bhttp::verb::options) {
    Reply r;
    r.headers = {{"Allow", "HEAD,GET,PUT,PROPFIND,COPY,OPTIONS,POST"}};
    return r;
  }
  // Which servers: caches for plain GET/HEAD and the /object API, origins for
  // PROPFIND, ?directread and the /origin API.
  bool to_origin = false;
  static const std::string kObjectApi = "/api/v1.0/director/object";
  static const std::string kOriginApi = "/api/v1.0/director/origin";
  if (target.rfind(kObjectApi, 0) == 0) {
    target = target.substr(kObjectApi.size());
  } else if (target.rfind(kOriginApi, 0) == 0) {
    target = target.substr(kOriginApi.size());
    to_origin = true;
  }
  std::string method(req.method_string());
  if (method == "PROPFIND") {
    to_origin = true;
  } else if (method != "GET" && method != "HEAD") {
    return JsonError(405, "method " + method + " is not supported by this federation (read-only).");
  }
  if (has_param("directread") && has_param("prefercached")) {
    return JsonError(400, "directread and prefercached cannot be used together.");
  }
  if (has_param("directread")) to_origin = true;

  auto decoded = http::PercentDecode(target);
  if (!decoded.ok()) return JsonError(400, decoded.status().message());
  auto path = core::ObjectPath::Parse(*decoded);
  if (!path.ok()) return JsonError(400, path.status().message());

  const Namespace* ns = nullptr;
  for (const Namespace& n : namespaces) {
    if (path->HasPrefix(*core::ObjectPath::Parse(n.prefix)) && (!ns || n.prefix.size() > ns->prefix.size())) ns = &n;
  }
  if (ns == nullptr) return JsonError(404, "No sources found for the requested path.");
  std::string rel = path->str().substr(ns->prefix == "/" ? 0 : ns->prefix.size());
  if (method != "PROPFIND") {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(ns->dir) / std::filesystem::u8path(rel.empty() ? "." : rel.substr(1)), ec)) {
      return JsonError(404, "No sources reported possession of the object.");
    }
  }
  std::vector<std::string> servers = (!to_origin && !ns->cache_urls.empty()) ? ns->cache_urls
                                                                           : std::vector<std::string>{ns->origin_url};
  if (servers.size() > 6) servers.resize(6);
  std::string encoded = http::PercentEncodePath(*path);
  int depth = static_cast<int>(core::ObjectPath::Parse(rel.empty() ? "/" : rel)->Segments().size());
  std::string link;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (i) link += ", ";
    link += "<" + servers[i] + encoded + ">; rel=\"duplicate\"; pri=" + std::to_string(i + 1) +
            "; depth=" + std::to_string(depth);
  }
  std::string location = servers[0] + encoded;
  std::string params = query;
  std::string auth(req[bhttp::field::authorization]);
  if (auth.rfind("Bearer ", 0) == 0) {
    params += (params.empty() ? "" : "&") + ("authz=" + http::PercentEncodeSegment(auth.substr(7)));
  }
  if (!params.empty()) location += "?" + params;
  Reply r;
  r.status = 307;
  r.headers = {{"Location", location},
               {"Link", link},
               {"X-Pelican-Namespace", "namespace=" + ns->prefix + ", require-token=" +
                                           (ns->protected_ ? "true" : "false") +
                                           ", collections-url=" + ns->origin_url},
               {"X-Pelican-JobId", NewUuid()}};
  if (ns->protected_) r.headers.push_back({"X-Pelican-Authorization", "issuer=" + Url() + "/issuer" + ns->prefix});
  return r;
}

Director::Director(std::vector<Namespace> namespaces, int port, std::string cert, std::string key)
    : impl_(std::make_unique<Impl>()) {
  impl_->namespaces = std::move(namespaces);
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
      std::lock_guard<std::mutex> l(impl->mu);
      impl->sockets.push_back(sock);
      impl->conns.emplace_back([impl, sock] { impl->ServeConnection(sock); });
    }
  });
}

std::string Director::Url() const { return impl_->Url(); }

void Director::Stop() {
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
    std::lock_guard<std::mutex> l(impl_->mu);
    for (auto& s : impl_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
    conns.swap(impl_->conns);
  }
  for (auto& t : conns) t.join();
}

Director::~Director() { Stop(); }

}  // namespace perch::devfed

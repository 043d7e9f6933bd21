#include "tests/fakes/fault_server.h"

#include <isa-l/igzip_lib.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <list>
#include <optional>

namespace perch::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct FaultServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  std::map<std::string, std::string> objects;  // Protected by mu
  std::vector<std::string> links{"ok"};        // Protected by mu
  std::map<std::string, int> hits;             // Protected by mu
  std::map<std::string, int> digest_asks;      // Protected by mu
  std::atomic<int> digests_in_flight{0}, max_digests_in_flight{0};
  int override_status = 0;                                            // Protected by mu
  int override_times = 0;                                             // Protected by mu
  std::vector<std::pair<std::string, std::string>> override_headers;  // Protected by mu
  std::map<std::string, std::vector<ListingEntry>> listings;          // Protected by mu
  std::optional<std::vector<std::string>> issuers;                    // Protected by mu
  std::vector<std::string> authorizations;                            // Protected by mu
  std::vector<std::string> user_agents;                               // Protected by mu
  std::vector<Request> requests;                                      // Protected by mu
  std::string direct_reads;                                           // Protected by mu
  std::list<std::thread> conns;                                       // Protected by mu
  std::list<std::shared_ptr<tcp::socket>> sockets;                    // Protected by mu
  uint16_t port = 0;
  FaultServer* owner = nullptr;

  void Serve(std::shared_ptr<tcp::socket> sock);
  // The 207 answer for PROPFIND of `rel` (below /ns) at `depth`; "" if unknown.
  std::string Multistatus(const std::string& rel, int depth);
  bool Handle(tcp::socket& sock, const bhttp::request<bhttp::string_body>& req);
};

FaultServer::FaultServer() : impl_(std::make_unique<Impl>()) {
  impl_->owner = this;
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] {
    while (!impl_->stopping) {
      auto sock = std::make_shared<tcp::socket>(impl_->io);
      boost::system::error_code ec;
      impl_->acceptor.accept(*sock, ec);
      if (ec || impl_->stopping) break;
      std::lock_guard<std::mutex> l(impl_->mu);
      impl_->sockets.push_back(sock);
      impl_->conns.emplace_back([this, sock] { impl_->Serve(sock); });
    }
  });
}

FaultServer::~FaultServer() {
  impl_->stopping = true;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  // Unblock accept() by connecting once.
  {
    tcp::socket s(impl_->io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), impl_->port), ec);
  }
  impl_->accept_thread.join();
  std::list<std::thread> conns;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    for (auto& s : impl_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
    conns.swap(impl_->conns);
  }
  for (auto& t : conns) t.join();
}

std::string FaultServer::BaseUrl() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port);
}

void FaultServer::AddObject(const std::string& name, std::string bytes) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->objects[name] = std::move(bytes);
}

void FaultServer::SetLinks(std::vector<std::string> behaviours) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->links = std::move(behaviours);
}

void FaultServer::SetDirectReads(std::string behaviour) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->direct_reads = std::move(behaviour);
}

void FaultServer::SetDirectorOverride(int status,
                                      std::vector<std::pair<std::string, std::string>> headers,
                                      int times) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->override_status = status;
  impl_->override_headers = std::move(headers);
  impl_->override_times = times;
}

void FaultServer::SetListing(const std::string& dir, std::vector<ListingEntry> entries) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->listings[dir] = std::move(entries);
}

namespace {

std::string EncodeHref(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

std::string DavResponse(const std::string& href, const std::string& size, bool is_dir) {
  return "<D:response><D:href>" + EncodeHref(href) + "</D:href><D:propstat><D:prop>" +
         (is_dir ? "<D:resourcetype><D:collection/></D:resourcetype>" : "<D:resourcetype/>") +
         "<D:getcontentlength>" + size + "</D:getcontentlength>" +
         "<D:getlastmodified>Mon, 23 Nov 2026 10:00:00 GMT</D:getlastmodified>"
         "</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>";
}

}  // namespace

std::string FaultServer::Impl::Multistatus(const std::string& rel, int depth) {
  const std::string base = "/srv/dav/ns" + std::string(rel.empty() ? "" : "/") + rel;
  std::string body;
  std::lock_guard<std::mutex> l(mu);
  if (auto dir = listings.find(rel); dir != listings.end()) {
    body = DavResponse(base + "/", "4096", true);
    if (depth > 0) {
      for (const ListingEntry& e : dir->second)
        body += DavResponse(base + "/" + e.name, e.size, e.is_dir);
    }
  } else {
    size_t slash = rel.rfind('/');
    std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
    std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    auto it = listings.find(parent);
    if (it == listings.end()) return "";
    for (const ListingEntry& e : it->second) {
      if (e.name == name) body = DavResponse(base, e.size, e.is_dir);
    }
    if (body.empty()) return "";
  }
  return "<?xml version=\"1.0\" encoding=\"utf-8\"?><D:multistatus xmlns:D=\"DAV:\">" + body +
         "</D:multistatus>";
}

void FaultServer::SetProtected(std::vector<std::string> issuers) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->issuers = std::move(issuers);
}

std::vector<std::string> FaultServer::Authorizations() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->authorizations;
}

std::vector<FaultServer::Request> FaultServer::Requests() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->requests;
}

std::vector<std::string> FaultServer::UserAgents() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->user_agents;
}

int FaultServer::DigestAsks(const std::string& behaviour) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->digest_asks.find(behaviour);
  return it == impl_->digest_asks.end() ? 0 : it->second;
}

int FaultServer::MaxDigestsInFlight() const { return impl_->max_digests_in_flight.load(); }

int FaultServer::Hits(const std::string& behaviour) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->hits.find(behaviour);
  return it == impl_->hits.end() ? 0 : it->second;
}

void FaultServer::Impl::Serve(std::shared_ptr<tcp::socket> sock) {
  beast::flat_buffer buf;
  boost::system::error_code ec;
  while (!stopping) {
    bhttp::request<bhttp::string_body> req;
    bhttp::read(*sock, buf, req, ec);
    if (ec) break;
    if (!Handle(*sock, req)) break;
  }
  sock->shutdown(tcp::socket::shutdown_both, ec);
}

bool FaultServer::Impl::Handle(tcp::socket& sock, const bhttp::request<bhttp::string_body>& req) {
  std::string target(req.target());
  boost::system::error_code ec;
  auto reply = [&](int status, std::string body,
                   std::vector<std::pair<std::string, std::string>> headers = {}) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), req.version()};
    res.set(bhttp::field::server, "pelican/7.27.0");
    for (auto& [k, v] : headers) res.insert(k, v);
    res.body() = std::move(body);
    res.prepare_payload();
    res.keep_alive(req.keep_alive());
    bhttp::write(sock, res, ec);
    return !ec && req.keep_alive();
  };
  if (target == "/.well-known/pelican-configuration") {
    return reply(200, "{\"director_endpoint\": \"http://127.0.0.1:" + std::to_string(port) + "\"}",
                 {{"Content-Type", "application/json"}});
  }
  if (target.rfind("/ns/", 0) == 0 || target == "/ns" || target.rfind("/ns?", 0) == 0) {
    owner->director_hits_++;
    // Pelican's director reads the query apart from the path; Link URLs carry none.
    const size_t query = target.find('?');
    bool directread = false;
    if (query != std::string::npos) {
      std::string params = target.substr(query + 1) + "&";
      for (size_t at = 0, amp; (amp = params.find('&', at)) != std::string::npos; at = amp + 1) {
        std::string param = params.substr(at, amp - at);
        if (param.substr(0, param.find('=')) == "directread") directread = true;
      }
    }
    target = target.substr(0, query);
    if (directread) owner->direct_read_hits_++;
    std::unique_lock<std::mutex> l(mu);
    std::string ns_header = "namespace=/ns, require-token=";
    ns_header += issuers ? "true" : "false";
    if (!listings.empty())
      ns_header += ", collections-url=http://127.0.0.1:" + std::to_string(port) + "/srv/dav";
    std::vector<std::pair<std::string, std::string>> auth_headers;
    for (const std::string& iss : issuers.value_or(std::vector<std::string>{}))
      auth_headers.emplace_back("X-Pelican-Authorization", "issuer=" + iss);
    if (override_status != 0 && override_times != 0) {
      if (override_times > 0) --override_times;
      int status = override_status;
      auto headers = override_headers;
      l.unlock();
      return reply(status, status >= 400 ? "{\"status\":\"error\",\"msg\":\"injected\"}" : "",
                   headers);
    }
    // As Pelican's director: depth is the number of path components of the
    // object path below the namespace prefix (getLinkDepth).
    int depth = 0;
    for (size_t i = 3; i < target.size(); ++i) {
      if (target[i] == '/' && i + 1 < target.size() && target[i + 1] != '/') ++depth;
    }
    std::vector<std::string> named = links;
    if (directread) {
      if (direct_reads.empty()) {
        l.unlock();
        return reply(405,
                     "{\"msg\":\"Discovered sources for the namespace, but none support the "
                     "request: no origins found that support the 'get' request type with queries "
                     "'DirectReads'\",\"status\":\"error\"}",
                     {{"Content-Type", "application/json; charset=utf-8"}});
      }
      named = {direct_reads};
    }
    std::string link;
    int pri = 1;
    for (const std::string& b : named) {
      std::string base = b == "refuse" ? "http://127.0.0.1:1"
                                       : "http://127.0.0.1:" + std::to_string(port) + "/srv/" + b;
      link += (link.empty() ? "" : ", ") +
              ("<" + base + target + ">; rel=\"duplicate\"; pri=" + std::to_string(pri++) +
               "; depth=" + std::to_string(depth));
    }
    l.unlock();
    auth_headers.insert(auth_headers.begin(), {{"Location", "http://127.0.0.1:1" + target},
                                               {"Link", link},
                                               {"X-Pelican-Namespace", ns_header}});
    return reply(307, "", auth_headers);
  }
  if (target.rfind("/srv/", 0) != 0) return reply(404, "no route");
  {
    std::lock_guard<std::mutex> l(mu);
    authorizations.emplace_back(req[bhttp::field::authorization]);
    requests.push_back(Request{std::string(req.method_string()), target,
                               std::string(req[bhttp::field::authorization])});
    user_agents.emplace_back(req[bhttp::field::user_agent]);
  }
  if (req.method_string() == "PROPFIND") {
    size_t ns = target.find("/ns", 5);
    std::string rel = ns == std::string::npos ? "" : target.substr(ns + 3);
    while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    std::string decoded;
    for (size_t i = 0; i < rel.size(); ++i) {
      if (rel[i] == '%' && i + 2 < rel.size() &&
          std::isxdigit(static_cast<unsigned char>(rel[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(rel[i + 2]))) {
        decoded += static_cast<char>(std::stoi(rel.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += rel[i];
      }
    }
    std::string depth(req["Depth"]);
    std::string body = Multistatus(decoded, depth == "0" ? 0 : 1);
    if (body.empty()) return reply(404, "not found");
    return reply(207, body, {{"Content-Type", "application/xml; charset=utf-8"}});
  }
  size_t slash = target.find('/', 5);
  std::string behaviour = target.substr(5, slash - 5);
  std::string name = target.substr(target.find("/ns/", slash) + 4);
  std::string object;
  const bool want_digest = !req["Want-Digest"].empty();
  {
    std::lock_guard<std::mutex> l(mu);
    hits[behaviour]++;
    if (want_digest) digest_asks[behaviour]++;
    auto it = objects.find(name);
    if (it == objects.end()) return reply(404, "not found");
    object = it->second;
  }
  // Requests carrying Want-Digest being computed at once (XRootD's checksum
  // jobs): from their arrival until their digest is known, before the answer
  // goes out (a client may send its next request as soon as it has one).
  struct InFlight {
    Impl* impl;
    bool on;
    InFlight(Impl* i, bool digest) : impl(i), on(digest) {
      if (!on) return;
      int now = ++impl->digests_in_flight;
      int seen = impl->max_digests_in_flight.load();
      while (now > seen && !impl->max_digests_in_flight.compare_exchange_weak(seen, now)) {
      }
    }
    ~InFlight() {
      if (on) --impl->digests_in_flight;
    }
  };
  {
    InFlight computing(this, want_digest);
    if (behaviour == "slowdigest" && want_digest) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // computes the digest
    }
  }
  if (behaviour == "500") return reply(500, "injected failure");
  if (behaviour == "404") return reply(404, "injected not found");
  if (behaviour == "403") return reply(403, "injected denial");
  if (behaviour == "nodigest" && want_digest) return reply(405, "");
  // A hostile cache: one byte of the object wrong in every answer, and a
  // digest that is none, junk, or that of its own wrong bytes.
  const bool lies = behaviour.rfind("lies", 0) == 0;
  if (lies && !object.empty()) object[object.size() / 3] ^= 0x04;  // not corrupt's byte
  if (behaviour == "lies-405" && want_digest) return reply(405, "");
  if (behaviour == "digest404" && want_digest) return reply(404, "injected not found");
  uint64_t first = 0, last = object.empty() ? 0 : object.size() - 1;
  std::string range(req[bhttp::field::range]);
  if (range.rfind("bytes=", 0) == 0) {
    first = std::stoull(range.substr(6));
    size_t dash = range.find('-');
    if (dash + 1 < range.size())
      last = std::min<uint64_t>(std::stoull(range.substr(dash + 1)), last);
  }
  std::string body = object.substr(first, last - first + 1);
  std::string cr = "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
                   std::to_string(object.size());
  if (behaviour == "norange") return reply(200, object);
  if (behaviour == "badrange") {
    cr = "bytes " + std::to_string(first + 1) + "-" + std::to_string(last) + "/" +
         std::to_string(object.size());
  }
  if (behaviour == "wrongsize") {
    cr = "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
         std::to_string(object.size() + 1);
  }
  if (behaviour == "silent") {
    // Accepted, never answered (a SIGSTOPped cache: the kernel still accepts).
    for (int i = 0; i < 200 && !stopping; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return false;
  }
  if (behaviour == "stall" || behaviour == "short") {
    std::string head = "HTTP/1.1 206 Partial Content\r\nContent-Range: " + cr +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    asio::write(sock, asio::buffer(head), ec);
    if (behaviour == "short") {
      asio::write(sock, asio::buffer(body.data(), body.size() / 2), ec);
      return false;  // close mid-body
    }
    for (int i = 0; i < 100 && !stopping; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return false;
  }
  if (behaviour == "trickle" && !body.empty()) {
    // A clean 206 of one byte: as much as it likes to send at a time.
    body.resize(1);
    cr = "bytes " + std::to_string(first) + "-" + std::to_string(first) + "/" +
         std::to_string(object.size());
  }
  std::vector<std::pair<std::string, std::string>> headers{{"Content-Range", cr},
                                                           {"ETag", "\"17\""}};
  if (want_digest && behaviour == "lies-junk") {
    headers.emplace_back(
        "Digest", "adler32=zzzzzzzz, sha-512=AAAA, foo=bar, md5=" + std::string(60 << 10, 'A'));
  } else if (want_digest && behaviour != "lies-none") {
    char hex[9];
    std::snprintf(
        hex, sizeof hex, "%08x",
        isal_adler32(1, reinterpret_cast<const unsigned char*>(object.data()), object.size()));
    headers.emplace_back("Digest", std::string("adler32=") + hex);
  }
  if (behaviour == "corrupt" && !body.empty()) body[body.size() / 2] ^= 0x01;
  return reply(206, body, headers);
}

}  // namespace perch::testing

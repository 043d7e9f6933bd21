#include "devfed/director.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "daemon/core/mutex.h"
#include "devfed/go_http.h"
#include "devfed/http_server.h"

namespace perch::devfed {

using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

namespace {

constexpr char kServer[] = "pelican/7.27.0";
constexpr size_t kServerResLimit = 6;  // director.go: serverResLimit
constexpr char kMonitoringNs[] = "/pelican/monitoring";
const std::string kApiV1 = "/api/v1.0/director";
const std::string kObjectApi = kApiV1 + "/object";
const std::string kOriginApi = kApiV1 + "/origin";

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

bool IsUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::string TrimPrefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

void AddCors(Headers& h) {
  h.emplace_back("Access-Control-Allow-Origin", "*");
  h.emplace_back("Access-Control-Allow-Methods", "GET, PUT, OPTIONS, PROPFIND");
  h.emplace_back("Access-Control-Allow-Headers", "Content-Type, Authorization, Depth");
  h.emplace_back("Access-Control-Expose-Headers",
                 "Content-Type, Authorization, X-Pelican-User, X-Pelican-Timeout, "
                 "X-Pelican-Token-Generation, X-Pelican-Authorization, X-Pelican-Namespace");
}

// gin's ctx.JSON.
HttpReply JsonReply(HttpReply r, int status, const Json& body) {
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  r.body = gohttp::JsonMarshal(body);
  return r;
}

// server_structs.SimpleApiResp{Status: RespFailed, Msg: msg}.
HttpReply ErrorReply(HttpReply r, int status, const std::string& msg) {
  return JsonReply(std::move(r), status, Json{{"status", "error"}, {"msg", msg}});
}

// gin's serveError: "404 page not found" / "405 method not allowed".
HttpReply GinDefault(HttpReply r, int status) {
  r.status = status;
  r.headers.emplace_back("Content-Type", "text/plain");
  r.body = status == 405 ? "405 method not allowed" : "404 page not found";
  return r;
}

// director.go: getObjectPathFromRequest.
std::string ObjectPath(const std::string& url_path) {
  std::string p = gohttp::CleanPath("/" + url_path);
  for (const std::string& api : {kObjectApi, kOriginApi}) {
    if (p.rfind(api, 0) == 0) return p.substr(api.size());
  }
  return p;
}

// director.go: validateClientToken. A bearer token that is a JWT (parsed
// without checking its signature) and expires within 10 s, or within half
// its lifetime when that is shorter, is expired; anything else passes (an
// opaque token such as devfed's macaroons is the origin's business).
bool TokenExpired(const std::string& token) {
  size_t dot1 = token.find('.'), dot2 = token.find('.', dot1 + 1);
  if (dot1 == std::string::npos || dot2 == std::string::npos) return false;
  std::string b64 = token.substr(dot1 + 1, dot2 - dot1 - 1);
  if (b64.empty() || b64.size() > (64 << 10)) return false;
  for (char& c : b64) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (b64.size() % 4) b64 += '=';
  std::string raw(b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(raw.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()),
                          static_cast<int>(b64.size()));
  if (n < 0) return false;
  auto claims = nlohmann::json::parse(
      raw.substr(0, static_cast<size_t>(n) - std::count(b64.end() - 2, b64.end(), '=')), nullptr,
      false);
  if (!claims.is_object() || !claims.contains("exp") || !claims["exp"].is_number()) return false;
  double exp = claims["exp"].get<double>(), grace = 10;
  if (claims.contains("iat") && claims["iat"].is_number()) {
    double lifetime = exp - claims["iat"].get<double>();
    if (lifetime <= 0) return true;
    grace = std::min(grace, lifetime / 2);
  }
  return static_cast<double>(std::time(nullptr)) + grace > exp;
}

// What a request looks like to the handlers: Go's URL.Path, parsed query, headers.
struct Call {
  const HttpRequest& req;
  std::string method;
  std::string path;  // decoded
  gohttp::Values query;

  bool Has(const std::string& key) const { return query.count(key) > 0; }
  bool HasHeader(boost::beast::http::field f) const { return req.find(f) != req.end(); }
  std::string Header(const std::string& name) const { return std::string(req[name]); }
};

}  // namespace

struct Director::Impl {
  std::vector<Namespace> namespaces;  // Constant after construction
  std::unique_ptr<HttpServer> server;
  core::Mutex mu;
  std::set<std::string> dead_caches PERCH_GUARDED_BY(mu);

  HttpReply Handle(const HttpRequest& req);
  HttpReply Middleware(const Call& c, int fallthrough);
  HttpReply Redirect(const Call& c, const std::string& path, bool to_origin, HttpReply r);
  Json NamespaceAds() const;

  std::string Url() const { return server->Url(); }

  // server_structs.LongestNSMatch: prefixes compared with a trailing '/'.
  const Namespace* Match(const std::string& path) const {
    const Namespace* best = nullptr;
    std::string p = path + "/";
    for (const Namespace& ns : namespaces) {
      if (p.rfind(ns.prefix + "/", 0) == 0 && (!best || ns.prefix.size() > best->prefix.size()))
        best = &ns;
    }
    return best;
  }

  // The namespace's token issuers: devfed's (never served) and, as a Pelican
  // origin adds its own Server.IssuerUrl, the origin's; two, so that clients
  // meet several X-Pelican-Authorization lines.
  std::vector<std::string> Issuers(const Namespace& ns) const {
    if (!ns.protected_) return {};
    return {Url() + "/issuer" + ns.prefix, ns.origin_url};
  }
};

HttpReply Director::Impl::Handle(const HttpRequest& req) {
  std::string target(req.target());
  size_t q = target.find('?');
  auto path = gohttp::PathUnescape(target.substr(0, q));
  if (!path || path->empty() || (*path)[0] != '/') {
    // net/http refuses a request URI it cannot parse before any handler runs.
    return HttpReply{400, {{"Content-Type", "text/plain; charset=utf-8"}}, "400 Bad Request", true};
  }
  Call c{req, std::string(req.method_string()), *path,
         gohttp::ParseQuery(q == std::string::npos ? "" : target.substr(q + 1))};
  bool get = c.method == "GET";

  // Routes of the root group and the director API group: each adds a Server header.
  HttpReply api;
  api.headers = {{"Server", kServer}, {"Server", kServer}};
  if (c.path.rfind(kObjectApi + "/", 0) == 0) {
    if (!get && c.method != "HEAD") return Middleware(c, 405);
    AddCors(api.headers);
    return Redirect(c, ObjectPath(c.path), false, std::move(api));
  }
  if (c.path.rfind(kOriginApi + "/", 0) == 0) {
    static const std::set<std::string> kVerbs = {"GET",    "HEAD",     "PUT",
                                                 "DELETE", "PROPFIND", "COPY"};
    if (!kVerbs.count(c.method)) return Middleware(c, 405);
    AddCors(api.headers);
    return Redirect(c, ObjectPath(c.path), true, std::move(api));
  }
  if (c.path.rfind(kApiV1 + "/", 0) == 0 && c.method == "OPTIONS") {
    AddCors(api.headers);
    api.headers.emplace_back("Content-Type", "text/plain; charset=utf-8");
    return api;
  }
  if (c.path == kApiV1 + "/listNamespaces") {
    if (!get) return Middleware(c, 405);
    api.headers.emplace_back(
        "Warning", R"(299 - "Deprecated API: use GET /api/v2.0/director/listNamespaces")");
    return ErrorReply(
        std::move(api), 299,
        "the GET /api/v1.0/director/listNamespaces endpoint is deprecated and no longer "
        "returns data; use GET /api/v2.0/director/listNamespaces");
  }
  if (c.path.rfind(kApiV1 + "/namespaces/prefix/", 0) == 0) {
    if (!get) return Middleware(c, 405);
    std::string p = c.path.substr((kApiV1 + "/namespaces/prefix").size());
    if (p == "/") return ErrorReply(std::move(api), 400, "Bad request. Path is empty or '/' ");
    const Namespace* ns = Match(gohttp::CleanPath(p));
    if (!ns) return ErrorReply(std::move(api), 404, "No server is currently advertising the path");
    return JsonReply(std::move(api), 200, Json{{"prefix", ns->prefix}});
  }
  if (c.path == "/api/v2.0/director/listNamespaces") {
    if (!get) return Middleware(c, 405);
    return JsonReply(std::move(api), 200, NamespaceAds());
  }
  if (c.path == "/.well-known/pelican-configuration") {
    if (!get) return Middleware(c, 405);
    HttpReply root;
    root.headers = {{"Server", kServer}};
    return ErrorReply(
        std::move(root), 410,
        "This Director is configured to disallow federation metadata hosting; your service "
        "is likely misconfigured to use a Director as its Federation.DiscoveryUrl URL");
  }
  return Middleware(c, 404);  // no route: gin runs the engine's middleware, then 404s
}

// director.go: ShortcutMiddleware with Director.DefaultResponse "cache".
HttpReply Director::Impl::Middleware(const Call& c, int fallthrough) {
  HttpReply r;
  r.headers = {{"Server", kServer}};
  AddCors(r.headers);
  if (c.method == "OPTIONS") {
    r.headers.emplace_back("Allow", "HEAD,GET,PUT,PROPFIND,COPY,OPTIONS,POST");
    return r;
  }
  bool director_api = c.path.rfind(kApiV1 + "/", 0) == 0;
  if (c.path.rfind("/.well-known/", 0) == 0 ||
      (c.path.rfind("/api/v1.0/", 0) == 0 && !director_api)) {
    return GinDefault(std::move(r), fallthrough);
  }
  if (c.method == "PUT" || c.method == "DELETE" || c.method == "COPY") {
    return Redirect(c, ObjectPath(kOriginApi + c.path), true, std::move(r));
  }
  if (c.method == "PROPFIND" && !director_api) {
    return Redirect(c, ObjectPath(kOriginApi + c.path), true, std::move(r));
  }
  if (c.Has("directread")) return Redirect(c, ObjectPath(c.path), true, std::move(r));
  if (!director_api && (c.method == "GET" || c.method == "HEAD")) {
    return Redirect(c, ObjectPath(kObjectApi + c.path), false, std::move(r));
  }
  return GinDefault(std::move(r), fallthrough);
}

// director.go: redirectToCache / redirectToOrigin, getSortedAds and generateRedirectResponse.
HttpReply Director::Impl::Redirect(const Call& c, const std::string& path, bool to_origin,
                                   HttpReply r) {
  std::string job = c.Header("X-Pelican-JobId");
  std::string id = IsUuid(job) ? job : NewUuid();
  if (c.Has("directread") && c.Has("prefercached")) {
    return ErrorReply(
        std::move(r), 400,
        "Failed to validate incoming request: invalid query parameter combination: cannot have "
        "both directread and prefercached query parameters: Request ID: " +
            id);
  }
  const Namespace* ns = Match(path);
  if (ns == nullptr) {
    return ErrorReply(std::move(r), 404,
                      "No sources found for the requested path: no origins found for the "
                      "requested namespace '" +
                          path + "': Request ID: " + id);
  }
  // sort.go: originSupportsVerb, originSupportsQuery (devfed origins: reads,
  // direct reads, listings unless --no-listings; never writes or copies).
  std::string depth = c.Header("Depth");
  bool supported = false;
  std::string verb = "unknown";
  if (c.method == "GET" || c.method == "HEAD") {
    supported = true;
    verb = c.method == "GET" ? "get" : "unknown";
  } else if (c.method == "PROPFIND") {
    bool stat = depth.empty() || depth == "0";
    supported = stat || ns->listings;
    verb = stat ? "stat" : "ls";
  } else if (c.method == "PUT" || c.method == "DELETE") {
    verb = c.method == "PUT" ? "put" : "delete";
  }
  if (c.Has("recursive") && !ns->listings) supported = false;
  if (!supported) {
    std::string caps = c.Has("directread") ? "DirectReads" : "";
    if (c.Has("recursive")) caps += (caps.empty() ? "" : " AND ") + std::string("Listings");
    return ErrorReply(
        std::move(r), 405,
        "Discovered sources for the namespace, but none support the request: no origins found "
        "that support the '" +
            verb + "' request type with queries '" + caps + "': See '" + Url() +
            "' to troubleshoot available origins/caches and their capabilities: Request ID: " + id);
  }
  std::vector<std::string> servers;
  if (!to_origin) {
    core::MutexLock l(mu);
    for (const std::string& u : ns->cache_urls) {
      if (!dead_caches.count(u)) servers.push_back(u);
    }
  }
  if (servers.empty())
    servers.push_back(ns->origin_url);  // origin request, or the DirectReads fallback
  if (servers.size() > kServerResLimit) servers.resize(kServerResLimit);
  std::string bearer = c.Header("Authorization");  // Go: Header.Get, then the authz query
  bearer = !bearer.empty()  ? TrimPrefix(bearer, "Bearer ")
           : c.Has("authz") ? TrimPrefix(c.query.at("authz").front(), "Bearer ")
                            : "";
  if (!bearer.empty() && TokenExpired(bearer)) {
    r.headers.emplace_back(
        "WWW-Authenticate",
        R"(Bearer error="invalid_token", error_description="token has expired")");
    return ErrorReply(std::move(r), 401, "bearer token has expired: Request ID: " + id);
  }

  // Link URLs: url.URL{Host, Path: path.Clean("/" + path)}.String(); depth from getLinkDepth.
  std::string escaped = gohttp::EscapePath(gohttp::CleanPath("/" + path));
  std::string below = TrimPrefix(TrimPrefix(path, ns->prefix), "/");
  int link_depth =
      below.empty() ? 0 : static_cast<int>(std::count(below.begin(), below.end(), '/')) + 1;
  std::string link;
  for (size_t i = 0; i < servers.size(); ++i) {
    link += (i ? ", <" : "<") + servers[i] + escaped +
            ">; rel=\"duplicate\"; pri=" + std::to_string(i + 1) +
            "; depth=" + std::to_string(link_depth);
  }
  r.headers.emplace_back("Link", link);
  std::vector<std::string> issuers = Issuers(*ns);
  for (const std::string& iss : issuers)
    r.headers.emplace_back("X-Pelican-Authorization", "issuer=" + iss);
  if (!issuers.empty()) {
    r.headers.emplace_back(
        "X-Pelican-Token-Generation",
        "issuer=" + issuers[0] + ", max-scope-depth=3, strategy=OAuth2, base-path=" + ns->prefix);
  }
  std::string xns =
      "namespace=" + ns->prefix + ", require-token=" + (ns->protected_ ? "true" : "false");
  if (ns->listings) xns += ", collections-url=" + ns->origin_url;
  r.headers.emplace_back("X-Pelican-Namespace", xns);
  r.headers.emplace_back("X-Pelican-JobId", id);

  // getRequestParameters: the query, with authz, pelican.timeout and the markers set.
  gohttp::Values params = c.query;
  std::string authz;
  if (auto it = c.query.find("authz"); it != c.query.end()) {
    authz = TrimPrefix(it->second.front(), "Bearer ");
  } else if (c.HasHeader(boost::beast::http::field::authorization)) {
    authz = TrimPrefix(c.Header("Authorization"), "Bearer ");
  }
  if (!authz.empty()) params["authz"] = {authz};
  std::string timeout;
  if (auto it = c.query.find("pelican.timeout"); it != c.query.end()) {
    timeout = it->second.front();
  } else {
    timeout = c.Header("X-Pelican-Timeout");
  }
  if (!timeout.empty()) params["pelican.timeout"] = {timeout};
  for (const char* marker : {"skipstat", "prefercached", "directread"}) {
    if (c.Has(marker)) params[marker] = {""};
  }
  if (auto it = params.find("redirect"); it != params.end() && it->second.front() == "false") {
    r.status = 200;
    return r;
  }
  std::string encoded = gohttp::Encode(params);
  std::string location = servers[0] + escaped + (encoded.empty() ? "" : "?" + encoded);
  // net/http's Redirect, as gin's ctx.Redirect calls it.
  r.status = 307;
  r.headers.emplace_back("Location", location);
  if (c.method == "GET" || c.method == "HEAD")
    r.headers.emplace_back("Content-Type", "text/html; charset=utf-8");
  if (c.method == "GET")
    r.body = "<a href=\"" + gohttp::HtmlEscape(location) + "\">Temporary Redirect</a>.\n\n";
  return r;
}

// director.go: listNamespacesV2; server_utils/origin.go: NamespaceAdsFromExports.
Json Director::Impl::NamespaceAds() const {
  auto caps = [](bool public_reads, bool listings, bool direct_reads) {
    return Json{
        {"PublicRead", public_reads},   {"Read", true},   {"Write", false}, {"Listing", listings},
        {"FallBackRead", direct_reads}, {"Copies", false}};
  };
  Json out = Json::array();
  for (const Namespace& ns : namespaces) {
    std::vector<std::string> issuers = Issuers(ns);
    Json token_issuers = Json::array();
    for (const std::string& iss : issuers) {
      token_issuers.push_back(Json{{"base-paths", {ns.prefix}},
                                   {"restricted-paths", nullptr},
                                   {"issuer", gohttp::UrlStruct(iss)}});
    }
    Json generation{{"strategy", issuers.empty() ? "" : "OAuth2"},
                    {"vault-server", ""},
                    {"max-scope-depth", issuers.empty() ? 0 : 3},
                    {"issuer", gohttp::UrlStruct(issuers.empty() ? "" : issuers[0])}};
    out.push_back(Json{{"Caps", caps(!ns.protected_, ns.listings, true)},
                       {"path", ns.prefix},
                       {"token-generation", Json::array({generation})},
                       {"token-issuer", token_issuers},
                       {"from-topology", false}});
  }
  out.push_back(Json{{"Caps", caps(true, false, false)},
                     {"path", kMonitoringNs},
                     {"token-generation", nullptr},
                     {"token-issuer", nullptr},
                     {"from-topology", false}});
  return out;
}

Director::Director(std::vector<Namespace> namespaces, int port, const std::string& cert,
                   const std::string& key)
    : impl_(std::make_unique<Impl>()) {
  impl_->namespaces = std::move(namespaces);
  Impl* impl = impl_.get();
  impl_->server = std::make_unique<HttpServer>(
      [impl](const HttpRequest& req) {
        HttpReply r = impl->Handle(req);
        spdlog::debug("director: {} {} -> {}", std::string(req.method_string()),
                      std::string(req.target()), r.status);
        return r;
      },
      port, cert, key);
}

Director::~Director() { Stop(); }

std::string Director::Url() const { return impl_->Url(); }

int Director::port() const { return impl_->server->port(); }

bool Director::DropCache(const std::string& cache_url) {
  for (const Namespace& ns : impl_->namespaces) {
    if (std::find(ns.cache_urls.begin(), ns.cache_urls.end(), cache_url) != ns.cache_urls.end()) {
      core::MutexLock l(impl_->mu);
      impl_->dead_caches.insert(cache_url);
      return true;
    }
  }
  return false;
}

void Director::Stop() { impl_->server->Stop(); }

// ---- DiscoveryHost ----

struct DiscoveryHost::Impl {
  std::unique_ptr<HttpServer> server;
  core::Mutex mu;
  std::string document PERCH_GUARDED_BY(mu);

  HttpReply Handle(const HttpRequest& req) {
    HttpReply r;
    if (req.target() != "/.well-known/pelican-configuration" ||
        req.method() != boost::beast::http::verb::get) {
      return GinDefault(std::move(r), 404);
    }
    r.headers = {{"Content-Disposition", "attachment; filename=pelican-configuration.json"},
                 {"Content-Type", "application/json"}};
    core::MutexLock l(mu);
    r.body = document;
    return r;
  }
};

DiscoveryHost::DiscoveryHost(int port, const std::string& cert, const std::string& key)
    : impl_(std::make_unique<Impl>()) {
  Impl* impl = impl_.get();
  impl_->server = std::make_unique<HttpServer>(
      [impl](const HttpRequest& req) { return impl->Handle(req); }, port, cert, key);
  SetUrls(Url(), Url());
}

DiscoveryHost::~DiscoveryHost() { Stop(); }

// director/discovery.go: federationDiscoveryHandler (json.MarshalIndent of
// pelican_url.FederationDiscovery, then a newline). The scheme is kept
// (Pelican forces https; devfed without --tls has none).
void DiscoveryHost::SetUrls(const std::string& discovery_url, const std::string& director_url) {
  Json doc{{"discovery_endpoint", discovery_url},
           {"director_endpoint", director_url},
           {"namespace_registration_endpoint", discovery_url},
           {"jwks_uri", discovery_url + "/.well-known/issuer.jwks"},
           {"broker_endpoint", ""}};
  core::MutexLock l(impl_->mu);
  impl_->document = gohttp::JsonMarshal(doc, 2) + "\n";
}

std::string DiscoveryHost::Url() const { return impl_->server->Url(); }

int DiscoveryHost::port() const { return impl_->server->port(); }

void DiscoveryHost::Stop() { impl_->server->Stop(); }

}  // namespace perch::devfed

// Director and DiscoveryHost: perch-devfed's stand-ins for a Pelican 7.27
// director and for the federation's discovery host, answering byte for byte
// what PelicanPlatform/pelican (snapshot 4012bc4a, 2026-08-22, newest tag
// v7.27.0-rc.1) answers, so that perch is tested against the real protocol
// rather than a kinder one. Where each behaviour comes from:
//
// - Routing (launchers/director_serve.go, director/director.go:
//   ShortcutMiddleware, RegisterDirectorAPI; gin runs the middleware only for
//   paths no route matches): OPTIONS -> 200 + Allow; PUT/DELETE/COPY and
//   PROPFIND -> the origin endpoint; ?directread -> origin; GET/HEAD -> cache;
//   any other method on an object path -> gin's "404 page not found".
// - Choosing servers (director/sort.go: getAdsForPath, originSupportsVerb,
//   originSupportsQuery, getSortedAds; server_structs/director.go:
//   LongestNSMatch): the longest namespace prefix wins, on '/' boundaries;
//   PROPFIND with Depth 0 or none needs Reads, any other Depth or ?recursive
//   needs Listings on origin and namespace (else 405); writes need Writes.
//   No cache for the namespace: the origin, for its DirectReads capability
//   (director.go: redirectToCache). At most 6 servers (serverResLimit).
// - A missing object is redirected like any other (director/stat.go:
//   shouldStatOrigins skips the stat for a cache request that has caches,
//   and Director.AssumePresenceAtSingleOrigin, default true, skips it for a
//   namespace with one origin, which every devfed namespace has); the cache
//   or origin then answers 404.
// - The 307 (director.go: generateRedirectResponse, getRedirectURL,
//   generateLinkHeader, getLinkDepth, getRequestParameters,
//   getFinalRedirectURL; server_structs/director.go: SetXAuthHeader,
//   SetXTokenGenHeader, SetXNamespaceHeader): server URLs are url.URL
//   {Host, Path: path.Clean(object path)}.String() (Go's path escaping, which
//   keeps $&+,:;=@, see go_http.h); Link `<url>; rel="duplicate"; pri=N;
//   depth=D` without queries; X-Pelican-Namespace `namespace=P,
//   require-token=B[, collections-url=U]`, the URL only when origin and
//   namespace allow listings; one X-Pelican-Authorization line per issuer;
//   X-Pelican-Token-Generation `issuer=, max-scope-depth=3, strategy=OAuth2,
//   base-path=` (server_utils/origin.go: NamespaceAdsFromExports);
//   X-Pelican-JobId; Location = first URL + url.Values.Encode() of the query
//   plus authz (query or Authorization header), pelican.timeout,
//   directread=, prefercached=, skipstat=; ?redirect=false -> 200.
//   gin's ctx.Redirect is net/http's Redirect: for GET a text/html body
//   `<a href="URL">Temporary Redirect</a>.` and two newlines.
// - A bearer token (Authorization header, else ?authz=) that is a JWT
//   expiring within 10 s (or half its lifetime) -> 401 + WWW-Authenticate
//   (director.go: validateClientToken); opaque tokens pass.
// - Errors are gin JSON {"status":"error","msg":"... Request ID: <uuid>"}
//   (director.go: processSortedAdsErr, validateQueryParams); no JobId header.
// - Headers: `Server: pelican/7.27.0` (web_ui/middleware.go:
//   ServerHeaderMiddleware) once on middleware-routed answers and twice on
//   /api/v1.0/director/* routes (the root group and the API group each add
//   one); CORS headers (director.go: corsHeadersMiddleware).
// - /api/v2.0/director/listNamespaces: JSON array of NamespaceAd
//   (director.go: listNamespacesV2; server_structs/director.go: NamespaceAd,
//   Capabilities, TokenGen, TokenIssuer, url.URL marshalled as a struct) plus
//   /pelican/monitoring; /api/v1.0/director/listNamespaces: 299 + Warning, no
//   data (listNamespacesV1Deprecated, since v7.27);
//   /api/v1.0/director/namespaces/prefix/<path>: {"prefix": P}.
// - Discovery (director/discovery.go, pelican_url/discovery.go): served by a
//   separate DiscoveryHost, as the OSDF serves it from osg-htc.org apart from
//   its director; the director itself answers 410, like a director with
//   Director.EnableFederationMetadataHosting=false.
//
// Deliberate differences: server URLs keep devfed's scheme (plain http
// without --tls; Pelican always writes https), and caches are not stat'ed to
// order them (the order is fixed, minus caches that died).
//
// Thread-safety: the namespace table is fixed before the servers start;
// DropCache may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace perch::devfed {

struct Namespace {
  std::string prefix;                   // "/test" (decoded, no trailing '/')
  std::string dir;                      // the exported directory
  bool protected_ = false;              // the origin requires a bearer token
  bool listings = true;                 // origin and namespace have the Listings capability
  std::string origin_url;               // "http://127.0.0.1:P"
  std::vector<std::string> cache_urls;  // best first
};

class Director {
 public:
  // `cert`/`key` empty: plain HTTP. Binds 127.0.0.1:`port` (0 = any free
  // port); throws std::exception when it cannot.
  Director(std::vector<Namespace> namespaces, int port, const std::string& cert,
           const std::string& key);
  ~Director();
  Director(const Director&) = delete;
  Director& operator=(const Director&) = delete;

  // "http(s)://127.0.0.1:PORT".
  std::string Url() const;
  int port() const;
  // Stops naming the cache at `cache_url` (its process died); false if no
  // namespace names it.
  bool DropCache(const std::string& cache_url);
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class DiscoveryHost {
 public:
  // Serves /.well-known/pelican-configuration naming `director_url`.
  DiscoveryHost(int port, const std::string& cert, const std::string& key);
  ~DiscoveryHost();
  DiscoveryHost(const DiscoveryHost&) = delete;
  DiscoveryHost& operator=(const DiscoveryHost&) = delete;

  // What the document names: its own URL as clients reach it, and the director's.
  void SetUrls(const std::string& discovery_url, const std::string& director_url);
  std::string Url() const;
  int port() const;
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::devfed

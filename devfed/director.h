// Director: perch-devfed's stand-in for a Pelican director (and discovery
// host), speaking the protocol of shared/reference/pelican-protocol.md §2-§3:
// the discovery document, 307 redirects with Link / X-Pelican-Namespace /
// X-Pelican-Authorization / X-Pelican-JobId headers, and JSON errors.
//
// A Boost.Beast server on 127.0.0.1, a thread per connection (a test tool:
// simplicity over scale), plain HTTP or TLS.
//
// Thread-safety: the namespace table is fixed before Start(); connections
// only read it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace perch::devfed {

struct Namespace {
  std::string prefix;                   // "/test" (decoded, no trailing '/')
  std::string dir;                      // the exported directory
  bool protected_ = false;              // the origin requires a bearer token
  std::string origin_url;               // "http://127.0.0.1:P"
  std::vector<std::string> cache_urls;  // best first
};

class Director {
 public:
  // `cert`/`key` empty: plain HTTP. Binds 127.0.0.1:`port` (0 = any free port).
  Director(std::vector<Namespace> namespaces, int port, std::string cert, std::string key);
  ~Director();
  Director(const Director&) = delete;
  Director& operator=(const Director&) = delete;

  // "http(s)://127.0.0.1:PORT".
  std::string Url() const;
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::devfed

// DevFed: runs build/bin/perch-devfed for a test and tears it down. Start()
// waits for "ready" and parses what devfed printed; the destructor stops it
// (SIGTERM; SIGKILL and a sweep of its servers' pids if it lingers), so a
// failing test leaves nothing running.
//
// A server stopped on purpose (Stop, KillCache) leaves its port held until the
// DevFed is destroyed (devfed/held_port.h): clients still configured with it
// are refused, as on a machine of their own, and never reach the server of a
// test running beside this one that the kernel gave the freed port.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devfed/held_port.h"

namespace perch::testing {

class DevFed {
 public:
  struct Export {
    std::string ns;   // "/test"
    std::string dir;  // served directory (readable by user xrootd)
    bool protected_ = false;
    bool listings = true;  // false: --no-listings
  };
  struct Options {
    std::vector<Export> exports;
    int caches = 0;
    bool tls = false;
    std::vector<std::string> extra_args = {};  // more perch-devfed flags
  };

  explicit DevFed(Options options);
  ~DevFed();
  DevFed(const DevFed&) = delete;
  DevFed& operator=(const DevFed&) = delete;

  // "" once devfed is ready, else an error with devfed's stderr.
  std::string Start();
  // Stops devfed and its servers; their ports stay held (see above).
  void Stop();

  // The discovery host (what perchd is given) and the director it names.
  std::string FederationUrl() const { return federation_; }
  std::string DirectorUrl() const { return director_; }
  std::string OriginUrl(const std::string& ns) const;
  std::vector<std::string> CacheUrls(const std::string& ns) const;
  // SIGKILLs cache `i` (0-based) of `ns`; its port stays held.
  void KillCache(const std::string& ns, size_t i);
  // Sends `sig` to cache `i` of `ns`, or to its origin when `i` is -1
  // (SIGSTOP makes a server that accepts connections and never answers).
  void Signal(const std::string& ns, int i, int sig);
  std::string CaFile() const { return ca_; }
  std::string TokenFile() const { return token_; }
  // perch-devfed's pid, and those of the XRootD servers it started.
  pid_t Pid() const { return pid_; }
  std::vector<pid_t> ServerPids() const;
  // What perch-devfed wrote to stderr so far.
  std::string ErrLog() const;

  // True if xrootd is installed (tests skip otherwise).
  static bool XrootdAvailable();

 private:
  struct Server {
    std::string url;
    pid_t pid = -1;
  };
  void StopServers();
  // Holds the port of `url` ("http://127.0.0.1:P") once its server let it go.
  void HoldPort(const std::string& url);

  Options options_;
  pid_t pid_ = -1;
  std::string work_;
  std::string federation_, director_, ca_, token_;
  std::map<std::string, Server> origins_;
  std::map<std::string, std::vector<Server>> caches_;
  std::vector<std::unique_ptr<devfed::HeldPort>> held_;
};

}  // namespace perch::testing

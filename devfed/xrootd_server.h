// XrootdServer: one real xrootd process (an origin, or an XCache in front of
// one) serving HTTP(S) through XrdHttp on a loopback port, run as the
// unprivileged user `xrootd` (xrootd refuses to run as root).
//
// Thread-safety: not thread-safe; owned by perch-devfed's main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace perch::devfed {

struct XrootdConfig {
  std::string name;         // "origin-1", "cache-1-2": names its directory and log
  std::string work_dir;     // parent of the server's own directory
  std::string export_root;  // oss.localroot: the tree served (origin) or cache storage
  int port = 0;             // 0: pick a free port
  int origin_port = 0;      // for a cache: the origin's root:// port
  std::string tls_cert, tls_key, tls_ca_dir;  // all set: HTTPS
  std::string extra;                          // more config lines (token plugins)
};

class XrootdServer {
 public:
  // Writes the config and starts xrootd; waits until it answers HTTP. Returns
  // "" or an error with the tail of the server's log.
  std::string Start(const XrootdConfig& config);
  // SIGTERM, then SIGKILL after a short grace period. Idempotent.
  void Stop();
  // Sends `sig` without waiting (StopAll stops many servers at once).
  void Signal(int sig);
  // True once, when the process has exited (it is reaped; `how` says how:
  // "pid N, killed by signal 11"); false while it runs or after Stop().
  bool Reap(std::string* how);
  ~XrootdServer() { Stop(); }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string Url() const;
  std::string log_path() const { return log_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool tls_ = false;
  std::string log_;
};

// Stops all `servers` together: SIGTERM, one second of grace, SIGKILL.
void StopAll(const std::vector<XrootdServer*>& servers);

// Runs `argv` and waits; returns its exit status (-1 if it could not run).
int RunCommand(const std::vector<std::string>& argv);

}  // namespace perch::devfed

// Where perchd's control API listens unless told otherwise, and which
// addresses it may listen on at all; the one place both ends (perchd and
// perchctl) and perchd's configuration take these rules from.
//
// The control API has no authentication: whoever can connect may warm, pin,
// evict and hint. So it listens on a unix socket (mode 0660, access by file
// permissions) or on loopback TCP, never on a network address. The metrics
// endpoint is read-only but still unauthenticated: loopback unless the
// operator opts in.
#pragma once

#include <arpa/inet.h>
#include <grp.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace perch {

// $RUNTIME_DIRECTORY/perchd.sock under systemd (RuntimeDirectory=perch),
// /run/perch/perchd.sock for root, else $XDG_RUNTIME_DIR/perch/perchd.sock
// (or /tmp/perch-UID/perchd.sock without one).
inline std::string DefaultControlSocket() {
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"); d != nullptr && *d != '\0') {
    std::string dir(d);
    return dir.substr(0, dir.find(':')) + "/perchd.sock";
  }
  if (::geteuid() == 0) return "/run/perch/perchd.sock";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x != '\0') {
    return std::string(x) + "/perch/perchd.sock";
  }
  return "/tmp/perch-" + std::to_string(::geteuid()) + "/perchd.sock";
}

// What perchctl connects to without --socket: $PERCH_SOCKET, else the
// system daemon's socket when it exists (users in its group may talk to it),
// else this user's default.
inline std::string DefaultClientSocket() {
  if (const char* s = std::getenv("PERCH_SOCKET"); s != nullptr && *s != '\0') return s;
  if (::access("/run/perch/perchd.sock", F_OK) == 0) return "/run/perch/perchd.sock";
  return DefaultControlSocket();
}

// True for "localhost", an IPv4 address in 127.0.0.0/8 and the IPv6 loopback
// "::1" (bracketed or not). Names other than localhost are not resolved: what
// they point at can change after the check.
inline bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  std::string h(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// Splits "HOST:PORT" ("[::1]:PORT" for IPv6) into host and port; false unless
// the port is a number up to 65535 and an IPv6 host is bracketed.
inline bool SplitHostPort(std::string_view address, std::string* host, unsigned* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size() ||
      colon + 6 < address.size()) {
    return false;
  }
  unsigned p = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
    p = p * 10 + static_cast<unsigned>(c - '0');
  }
  std::string_view h = address.substr(0, colon);
  bool bracketed = h.size() >= 2 && h.front() == '[' && h.back() == ']';
  if (p > 65535 || (!bracketed && h.find(':') != std::string_view::npos)) return false;
  *host = std::string(h);
  *port = p;
  return true;
}

// "" if perchd may serve its control API at `address`, else why not (one
// line, naming the accepted forms). Accepted: "unix:PATH" and "tcp:HOST:PORT"
// with a loopback HOST; "" stands for the default socket.
inline std::string CheckControlAddress(const std::string& address) {
  if (address.empty()) return "";
  if (address.starts_with("unix:")) {
    return address.size() > 5 ? ""
                              : "bad control address 'unix:': give a socket path, e.g. "
                                "unix:/run/perch/perchd.sock";
  }
  std::string host;
  unsigned port = 0;
  if (!address.starts_with("tcp:") ||
      !SplitHostPort(std::string_view(address).substr(4), &host, &port)) {
    return "bad control address '" + address + "': use unix:/path/to/sock or tcp:127.0.0.1:PORT";
  }
  if (!IsLoopbackHost(host)) {
    return "control address '" + address +
           "' is not on loopback: the control API has no authentication, so " +
           "perchd serves it only on a unix socket or on 127.0.0.1, [::1] or localhost";
  }
  return "";
}

// "" if perchd may serve Prometheus metrics at `address` ("HOST:PORT" with a
// literal IP address), else why not. A non-loopback host needs `allow_remote`
// (--metrics-allow-remote, config metrics_allow_remote).
// Why "IP:PORT" may not be listened on by the listener `what` ("metrics",
// "http"), or "" when it may: it must be a numeric address, on loopback
// unless `allow_remote` (given by flag `flag` or config key `key`).
inline std::string CheckListenAddress(const std::string& what, const std::string& address,
                                      bool allow_remote, const std::string& flag,
                                      const std::string& key) {
  if (address.empty()) return "";
  std::string host;
  unsigned port = 0;
  std::string bare;
  if (SplitHostPort(address, &host, &port)) {
    bare = host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  }
  in6_addr any{};
  if (bare.empty() || (::inet_pton(AF_INET, bare.c_str(), &any) != 1 &&
                       ::inet_pton(AF_INET6, bare.c_str(), &any) != 1)) {
    return "bad " + what + " address '" + address +
           "': use IP:PORT, e.g. 127.0.0.1:" + (what == "http" ? "8480" : "9464");
  }
  if (!allow_remote && !IsLoopbackHost(host)) {
    return what + " address '" + address + "' is not on loopback and the " + what +
           " endpoint has no authentication; add " + flag + " (config " + key +
           " = true) to serve it there";
  }
  return "";
}

inline std::string CheckMetricsAddress(const std::string& address, bool allow_remote) {
  return CheckListenAddress("metrics", address, allow_remote, "--metrics-allow-remote",
                            "metrics_allow_remote");
}

// The gid of the group named `name` (or numbered: "1001"); false if there
// is no such group. The control socket is chowned to it (control_group).
inline bool LookupGroup(const std::string& name, gid_t* gid) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
      name.size() < 10) {
    *gid = static_cast<gid_t>(std::stoul(name));
    return true;
  }
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  *gid = found->gr_gid;
  return true;
}

// The name of group `gid` (its number when it has no name).
inline std::string GroupName(gid_t gid) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::to_string(gid);
  }
  return found->gr_name;
}

}  // namespace perch

// Where perchd's control API listens unless told otherwise; the one place
// both ends (perchd and perchctl) take the default from.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

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

}  // namespace perch

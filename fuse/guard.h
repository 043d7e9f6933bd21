// Guarded: the one wrapper around every callback libfuse calls. The callback
// table (FuseServer::LowLevelOps, ops.cc) names each callback through it, so
// that no exception, std::bad_alloc included, unwinds into libfuse's C
// frames (std::terminate, a dead mount): what a callback throws goes to
// `OnThrow`, which answers the request (ops.cc: EIO; none for FORGET, which
// takes no answer) or, for INIT, ends the session.
//
//   o.lookup = &Guarded<"lookup", &Ops::Lookup, &OnThrow>::Call;
//
// Thread-safety: Call runs on whichever thread libfuse calls from.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>

struct fuse_req;
struct fuse_conn_info;

namespace perch::fuse {

// A callback's name, as a template argument.
template <size_t N>
struct OpName {
  constexpr OpName(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT: implicit by design
  char text[N];
};

// What reached the guard: the request (null for INIT, which has none), the
// userdata INIT was given (null otherwise), the callback's name, and what it threw.
struct Thrown {
  fuse_req* req;
  void* userdata;
  const char* op;
  std::exception_ptr error;
};

template <OpName kName, auto F, auto OnThrow>
struct Guarded;

// Every callback of a request: fuse_req first.
template <OpName kName, typename... A, void (*F)(fuse_req*, A...),
          void (*OnThrow)(const Thrown&) noexcept>
struct Guarded<kName, F, OnThrow> {
  static void Call(fuse_req* req, A... a) noexcept {
    try {
      F(req, a...);
    } catch (...) {
      OnThrow(Thrown{req, nullptr, kName.text, std::current_exception()});
    }
  }
};

// INIT: no request, the session's userdata.
template <OpName kName, void (*F)(void*, fuse_conn_info*), void (*OnThrow)(const Thrown&) noexcept>
struct Guarded<kName, F, OnThrow> {
  static void Call(void* userdata, fuse_conn_info* conn) noexcept {
    try {
      F(userdata, conn);
    } catch (...) {
      OnThrow(Thrown{nullptr, userdata, kName.text, std::current_exception()});
    }
  }
};

}  // namespace perch::fuse

// PERCH_CHECK and PERCH_CHECKED: invariants the code relies on, checked in
// every build. A failed check is a bug in perch, not bad input (bad input
// gets a Status): it logs what failed and where, then aborts, so that a
// broken invariant never turns into undefined behaviour on a shared node.
//
//   PERCH_CHECK(prefix.IsRoot() || !tag_.empty());
//   ObjectPath p = PERCH_CHECKED(ObjectPath::Parse("/" + name));  // name is a clean segment
//
// Thread-safety: usable from any thread.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "daemon/core/result.h"

namespace perch::core {

// Written to stderr directly (where perchd logs), whatever the log level.
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* what,
                                     const std::string& detail = "") {
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "check failed at %s:%d: %s%s%s\n", file, line, what,
               detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

// The value of `r`, which the caller knows holds one.
template <typename T>
T CheckedValue(Result<T> r, const char* file, int line, const char* what) {
  if (!r.ok()) CheckFailed(file, line, what, r.status().ToString());
  return std::move(r).value();
}

}  // namespace perch::core

#define PERCH_CHECK(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) ::perch::core::CheckFailed(__FILE__, __LINE__, "PERCH_CHECK(" #cond ")"); \
  } while (0)

#define PERCH_CHECKED(expr) ::perch::core::CheckedValue((expr), __FILE__, __LINE__, #expr)

// Shared by the fuzz targets: quiet logging (a fuzzer runs millions of inputs
// and warnings about hostile input are expected) and FUZZ_CHECK, an invariant
// that aborts so that libFuzzer and the corpus replay both report it.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace perch::fuzz {

inline void QuietLogs() {
  static const bool once = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)once;
}

}  // namespace perch::fuzz

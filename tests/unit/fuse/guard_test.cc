// Guarded (guard.h): what a callback throws reaches the handler, with the
// request, the callback's name and the exception, and never libfuse.
#include "fuse/guard.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace perch::fuse {
namespace guard_test {

struct Seen {
  fuse_req* req;
  void* userdata;
  std::string op, what;
};
std::vector<Seen> seen;
int sum = 0;

void Record(const Thrown& t) noexcept {
  std::string what = "not a std::exception";
  try {
    std::rethrow_exception(t.error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  seen.push_back(Seen{t.req, t.userdata, t.op, what});
}

inline fuse_req* Req(uintptr_t n) { return reinterpret_cast<fuse_req*>(n); }

void Adds(fuse_req*, int x, const char*) { sum += x; }
void Throws(fuse_req*, int, const char*) { throw std::runtime_error("boom"); }
void ThrowsAnInt(fuse_req*) { throw 7; }
void RunsOutOfMemory(void*, fuse_conn_info*) { throw std::bad_alloc(); }

TEST(GuardTest, WhatACallbackThrowsGoesToTheHandlerNeverToLibfuse) {
  seen.clear();
  sum = 0;
  Guarded<"adds", &Adds, &Record>::Call(Req(1), 5, "x");
  EXPECT_EQ(sum, 5);
  EXPECT_TRUE(seen.empty());  // nothing thrown, nothing handled

  Guarded<"lookup", &Throws, &Record>::Call(Req(2), 1, "x");
  Guarded<"forget", &ThrowsAnInt, &Record>::Call(Req(3));
  int session = 0;
  Guarded<"init", &RunsOutOfMemory, &Record>::Call(&session, nullptr);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].req, Req(2));
  EXPECT_EQ(seen[0].op, "lookup");
  EXPECT_EQ(seen[0].what, "boom");
  EXPECT_EQ(seen[1].req, Req(3));
  EXPECT_EQ(seen[1].op, "forget");
  EXPECT_EQ(seen[1].what, "not a std::exception");
  EXPECT_EQ(seen[2].req, nullptr);  // INIT has no request: its userdata instead
  EXPECT_EQ(seen[2].userdata, &session);
  EXPECT_EQ(seen[2].op, "init");
  EXPECT_EQ(seen[2].what, std::bad_alloc().what());
}

// The guard's entry points are what libfuse's table holds: noexcept, with
// the callback's own parameters.
static_assert(noexcept(Guarded<"lookup", &Throws, &Record>::Call(nullptr, 0, nullptr)));
static_assert(std::is_same_v<decltype(&Guarded<"lookup", &Throws, &Record>::Call),
                             void (*)(fuse_req*, int, const char*) noexcept>);

}  // namespace guard_test
}  // namespace perch::fuse

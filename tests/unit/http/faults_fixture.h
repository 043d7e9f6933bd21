// The fixture of the federation client's tests against FaultServer (a
// misbehaving fake federation on loopback): one object of 1 MiB below /ns.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>
#include <string>

#include "daemon/http/federation_client.h"
#include "tests/fakes/fault_server.h"

namespace perch::http {

inline std::string RandomBytes(size_t n) {
  std::mt19937 rng(1);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    object_ = RandomBytes(1 << 20);
    server_.AddObject("obj", object_);
    FederationClientOptions opts;
    opts.low_speed_time = std::chrono::seconds(1);
    opts.low_speed_bytes = 1000;
    opts.director_backoff = std::chrono::milliseconds(50);
    client_ = std::make_unique<FederationClient>(
        loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
  }

  core::Result<core::Bytes> Read(uint64_t off, uint64_t len,
                                 std::chrono::seconds timeout = std::chrono::seconds(20)) {
    std::promise<core::Result<core::Bytes>> p;
    client_->ReadRange(*core::ObjectPath::Parse("/obj"), core::ObjectVersion{object_.size(), ""},
                       core::ByteRange{off, len}, core::DeadlineAfter(timeout),
                       [&](core::Result<core::FetchedBytes> r) {
                         p.set_value(r.ok() ? core::Result<core::Bytes>(std::move(r->bytes))
                                            : core::Result<core::Bytes>(r.status()));
                       });
    return p.get_future().get();
  }

  perch::testing::FaultServer server_;
  CurlLoop loop_{CurlLoop::Options{}};
  std::unique_ptr<FederationClient> client_;
  std::string object_;
};

}  // namespace perch::http

// Issue 41: with the defaults, a whole object is delivered only once its
// bytes match a digest that a server other than the one that sent them (or
// the origin) states, against FaultServer's hostile caches: one byte wrong
// in every answer, and a digest that is the digest of those wrong bytes,
// none, junk, or a refusal of Want-Digest.
#include <gtest/gtest.h>
#include <isa-l/igzip_lib.h>

#include <future>
#include <vector>

#include "tests/unit/http/faults_fixture.h"

namespace perch::http {
namespace {

using core::Result;
using core::StatusCode;

class WholeObjectCheckTest : public FaultsTest {
 protected:
  // A fresh client (no penalties, no director answers kept), links and origins.
  void Federation(std::vector<std::string> links, std::string direct,
                  FederationClientOptions opts = {}) {
    opts.director_backoff = std::chrono::milliseconds(50);
    client_ = std::make_unique<FederationClient>(
        loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
    server_.SetLinks(std::move(links));
    server_.SetDirectReads(std::move(direct));
  }

  Result<core::FetchedBytes> ReadWhole(const std::string& name = "obj") {
    std::promise<Result<core::FetchedBytes>> p;
    client_->ReadRange(*core::ObjectPath::Parse("/" + name),
                       core::ObjectVersion{object_.size(), ""}, core::ByteRange{0, object_.size()},
                       core::DeadlineAfter(std::chrono::seconds(20)),
                       [&](Result<core::FetchedBytes> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  // Objects obj0 .. obj<n-1> (each object_), read whole all at once: each
  // read exact.
  void ReadObjectsAtOnce(int n) {
    for (int i = 0; i < n; ++i) server_.AddObject("obj" + std::to_string(i), object_);
    std::vector<std::promise<Result<core::FetchedBytes>>> done(n);
    for (int i = 0; i < n; ++i) {
      client_->ReadRange(
          *core::ObjectPath::Parse("/obj" + std::to_string(i)),
          core::ObjectVersion{object_.size(), ""}, core::ByteRange{0, object_.size()},
          core::DeadlineAfter(std::chrono::seconds(30)),
          [&done, i](Result<core::FetchedBytes> r) { done[i].set_value(std::move(r)); });
    }
    for (auto& d : done) {
      auto r = d.get_future().get();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(r->bytes == object_);
    }
  }

  Result<std::vector<core::ObjectDigest>> Digests() {
    std::promise<Result<std::vector<core::ObjectDigest>>> p;
    client_->Digests(*core::ObjectPath::Parse("/obj"), core::ObjectVersion{object_.size(), ""}, {},
                     core::DeadlineAfter(std::chrono::seconds(20)),
                     [&](Result<std::vector<core::ObjectDigest>> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  core::ObjectDigest TrueAdler32() const {
    uint32_t a =
        isal_adler32(1, reinterpret_cast<const unsigned char*>(object_.data()), object_.size());
    return {"adler32",
            {static_cast<char>(a >> 24), static_cast<char>(a >> 16), static_cast<char>(a >> 8),
             static_cast<char>(a)}};
  }
};

TEST_F(WholeObjectCheckTest, AnotherServersDigestVouchesForTheBody) {
  Federation({"ok", "ok2"}, "");
  auto r = ReadWhole();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->bytes == object_);
  EXPECT_EQ(r->vouched, std::vector<core::ObjectDigest>{TrueAdler32()});
  EXPECT_TRUE(r->unverified.empty());
  EXPECT_EQ(server_.DigestAsks("ok"), 0);  // the body's request asks for none
  EXPECT_EQ(server_.DigestAsks("ok2"), 1);
  EXPECT_EQ(client_->counters().digests_verified, 1u);
  EXPECT_EQ(client_->counters().digest_asks, 1u);
  // A part of an object is not checked here (Mount::VerifyComplete is).
  EXPECT_TRUE(Read(0, 4096).ok());
  EXPECT_EQ(client_->counters().digest_asks, 1u);
}

// Acceptance (c) and (a), (b): a cache whose bytes are wrong never has them
// delivered, whatever it says of their digest and wherever it stands in the
// list; the digest handed back is the true one.
TEST_F(WholeObjectCheckTest, AHostileCacheNeverHasItsBytesDelivered) {
  for (std::string hostile : {"lies", "lies-405", "lies-none", "lies-junk"}) {
    for (std::vector<std::string> links : std::vector<std::vector<std::string>>{
             {hostile, "ok2"}, {"ok2", hostile}, {hostile}, {hostile, "corrupt"}}) {
      SCOPED_TRACE(hostile + " in {" + links.front() + (links.size() > 1 ? ", " + links[1] : "") +
                   "}");
      Federation(links, "ok");
      auto r = ReadWhole();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(r->bytes == object_);
      EXPECT_EQ(r->vouched, std::vector<core::ObjectDigest>{TrueAdler32()});
    }
  }
}

// Both caches send wrong bytes and no origin may be read directly: nothing
// wrong is delivered; the read fails. (Two caches that send the same wrong
// bytes, each with their digest, would vouch for each other: the check
// trusts that the director's servers do not collude.)
TEST_F(WholeObjectCheckTest, WhenEveryServerSendsWrongBytesTheReadFails) {
  Federation({"lies", "corrupt"}, "");
  auto r = ReadWhole();
  ASSERT_FALSE(r.ok());
  EXPECT_GE(client_->counters().digest_mismatches, 2u);
}

TEST_F(WholeObjectCheckTest, WhereNoServerStatesADigestTheBodyIsServedAndCounted) {
  Federation({"nodigest"}, "");
  auto r = ReadWhole();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->bytes == object_);
  EXPECT_FALSE(r->unverified.empty()) << "the reason";
  EXPECT_TRUE(r->vouched.empty());
  EXPECT_EQ(client_->counters().digests_unverified, 1u);
  EXPECT_EQ(client_->counters().digests_verified, 0u);
}

TEST_F(WholeObjectCheckTest, DigestRequestsPerOriginStayWithinTheBound) {
  FederationClientOptions opts;
  opts.digest_requests_per_origin = 2;
  opts.digest_requests_per_server = 8;  // the namespace's bound is the one that holds
  Federation({"ok2", "slowdigest"}, "", opts);
  constexpr int kReads = 24;
  ReadObjectsAtOnce(kReads);
  EXPECT_LE(server_.MaxDigestsInFlight(), 2);
  EXPECT_EQ(server_.DigestAsks("slowdigest"), kReads);
  EXPECT_EQ(client_->counters().digests_verified, static_cast<uint64_t>(kReads));
}

// XRootD before 5.8 crashes under two digests computed at once at one server
// (docs/quirks.md): whatever the namespace allows, one server is asked one at
// a time.
TEST_F(WholeObjectCheckTest, DigestRequestsPerServerStayWithinTheBound) {
  FederationClientOptions opts;
  opts.digest_requests_per_origin = 8;
  opts.digest_requests_per_server = 1;
  Federation({"ok2", "slowdigest"}, "", opts);
  constexpr int kReads = 12;
  ReadObjectsAtOnce(kReads);
  EXPECT_EQ(server_.MaxDigestsInFlight(), 1);  // all at slowdigest, which did not send them
  EXPECT_EQ(server_.DigestAsks("slowdigest"), kReads);
  EXPECT_EQ(client_->counters().digests_verified, static_cast<uint64_t>(kReads));
}

// The digest of an object (Origin::Digests, what a whole cached copy is
// checked against) comes from a server that did not send its bytes.
TEST_F(WholeObjectCheckTest, AnObjectsDigestComesFromAServerThatDidNotSendItsBytes) {
  Federation({"lies", "ok2"}, "");
  ASSERT_TRUE(Read(0, 4096).ok());  // a part, from the liar (not checked here)
  auto d = Digests();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(server_.DigestAsks("lies"), 0);
  EXPECT_EQ(server_.DigestAsks("ok2"), 1);
  EXPECT_NE(std::find(d->begin(), d->end(), TrueAdler32()), d->end());
}

// A copy of unknown senders (cached by an earlier run) has its digest from
// the origins first.
TEST_F(WholeObjectCheckTest, ACopyOfUnknownSendersHasItsDigestFromTheOrigin) {
  Federation({"lies", "ok2"}, "ok");
  auto d = Digests();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(server_.DigestAsks("ok"), 1);
  EXPECT_EQ(server_.DigestAsks("lies"), 0);
  EXPECT_EQ(server_.DigestAsks("ok2"), 0);
}

// XRootD 5.5 answers some requests carrying Want-Digest with 404 for a file
// it has when they come at once (docs/quirks.md). Such a 404 states no
// digest, and is not the object's answer: the origin vouches, and a body
// that fails its digest is read again elsewhere.
TEST_F(WholeObjectCheckTest, A404ToWantDigestLeavesTheOriginToVouch) {
  Federation({"corrupt", "digest404"}, "ok");
  auto r = ReadWhole();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->bytes == object_);
  EXPECT_EQ(server_.DigestAsks("digest404"), 1);
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(client_->counters().digest_mismatches, 1u);
  EXPECT_EQ(client_->counters().digests_verified, 1u);

  // Every server, the origin too, answers Want-Digest with 404: no digest
  // could be had now, and the body is not delivered unchecked.
  Federation({"digest404"}, "digest404");
  r = ReadWhole();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  auto d = Digests();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable) << d.status().ToString();
}

// A read that goes to the origin first (its cached copy failed the digest)
// has the named servers vouch for the origin's bytes, and goes on to them
// when the origin fails it.
TEST_F(WholeObjectCheckTest, ADistrustedReadIsTheOriginsAndIsStillChecked) {
  Federation({"ok2"}, "ok");
  client_->Distrust(*core::ObjectPath::Parse("/obj"));
  auto r = ReadWhole();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->bytes == object_);
  EXPECT_EQ(server_.Hits("ok"), 1);         // the body, from the origin
  EXPECT_EQ(server_.DigestAsks("ok2"), 1);  // the digest, from the cache
  EXPECT_EQ(client_->counters().digests_verified, 1u);

  Federation({"ok2"}, "500");
  client_->Distrust(*core::ObjectPath::Parse("/obj"));
  r = ReadWhole();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->bytes == object_);
  // The body from the cache; only it states a digest (the origin fails):
  // served, counted as unverified.
  EXPECT_EQ(client_->counters().digests_unverified, 1u);
}

}  // namespace
}  // namespace perch::http

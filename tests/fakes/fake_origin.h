// FakeOrigin: an in-memory federation for core tests. Objects and
// directories live in a map; switches inject failures (a status for every
// call, a short body) and `hold` parks completions until Release(), so
// tests can line up concurrent readers. Counters say what was asked.
//
// Thread-safety: all methods are safe from any thread; completions run on
// the caller's thread, or on the thread that calls Release().
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/origin.h"

namespace perch::testing {

class FakeOrigin : public core::Origin {
 public:
  void AddFile(const std::string& path, std::string bytes, int64_t mtime = 1700000000);
  void AddDir(const std::string& path);
  // The object is gone from the origin (Stat: kNotFound; reads fail likewise).
  void RemoveFile(const std::string& path);

  // Every call fails with `status` until cleared with Status::Ok().
  void FailWith(core::Status status);
  // Stat alone fails with `status` until cleared with Status::Ok().
  void FailStatsWith(core::Status status);
  // Reads return one byte less than asked.
  void ShortBodies(bool on);
  // Reads say their bytes may not be kept (Cache-Control: no-store).
  void NoStore(bool on);
  // Reads return their bytes with the first one flipped (a cache with a bad
  // disk); Stat and Digests answer as before.
  void CorruptBodies(bool on);
  // Digests answers `digest` of the file's bytes (empty: kNotFound, as an
  // origin that offers none).
  using DigestFn = std::function<std::vector<core::ObjectDigest>(const std::string& bytes)>;
  void OfferDigests(DigestFn digest);
  // Files' answers (Stat, List, reads) carry this freshness lifetime
  // (Cache-Control max-age; FileAttr::max_age), -1: none.
  void MaxAge(int64_t seconds);
  // Park completions until Release().
  void Hold(bool on);
  // Runs parked completions; returns how many ran.
  size_t Release();
  // Runs the oldest parked completion (others stay parked); false if none.
  bool ReleaseOne();
  // "path@offset" of every ReadRange, in call order.
  std::vector<std::string> ReadLog();

  void Stat(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done) override;
  void List(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<std::vector<core::DirEntry>>)> done) override;
  void ReadRange(const core::ObjectPath& path, const core::ObjectVersion& version,
                 core::ByteRange range, core::Deadline deadline,
                 std::function<void(core::Result<core::FetchedBytes>)> done) override;
  void Digests(const core::ObjectPath& path, const core::ObjectVersion& version,
               const std::vector<std::string>& algorithms, core::Deadline deadline,
               std::function<void(core::Result<std::vector<core::ObjectDigest>>)> done) override;

  void Distrust(const core::ObjectPath& path) override {
    (void)path;
    distrusts++;
  }

  void Blame(const core::ObjectPath& path) override {
    (void)path;
    blames++;
  }

  std::atomic<int> stats{0}, lists{0}, reads{0}, digest_asks{0}, distrusts{0}, blames{0};
  std::atomic<uint64_t> bytes_read{0};

 private:
  void Complete(std::function<void()> fn);

  std::mutex mu_;
  std::map<std::string, std::string> files_;   // Protected by mu_
  std::map<std::string, int64_t> mtimes_;      // Protected by mu_
  std::map<std::string, bool> dirs_;           // Protected by mu_
  core::Status fail_;                          // Protected by mu_
  core::Status fail_stats_;                    // Protected by mu_
  bool short_ = false;                         // Protected by mu_
  bool no_store_ = false;                      // Protected by mu_
  bool corrupt_ = false;                       // Protected by mu_
  DigestFn digest_;                            // Protected by mu_
  int64_t max_age_ = -1;                       // Protected by mu_
  bool hold_ = false;                          // Protected by mu_
  std::vector<std::function<void()>> parked_;  // Protected by mu_
  std::vector<std::string> read_log_;          // Protected by mu_
};

}  // namespace perch::testing

// NamespaceCache: answers "what is at this path" (attributes and directory
// listings) from memory, then from the persisted index, then from the Origin.
//
// Objects in a federation are immutable, so file attributes live long
// (file_ttl); listings can gain entries and live shorter (dir_ttl); a path
// the federation does not have is remembered as a negative entry
// (negative_ttl). Every answer is written through to the Index, so a
// restarted daemon knows the namespace without asking the network.
//
// A file whose answer carried a freshness lifetime (FileAttr::max_age, from
// Cache-Control: no-cache, max-age, s-maxage) is answered from memory for at
// most that long, whether its attributes came on their own or in its
// directory's listing: then the origin is asked again (a revalidation), so
// an object replaced there is seen within its lifetime. The lifetime is
// counted in whole seconds, at least kMinFreshness (no-cache: the origin is
// asked at most once a second per file, however many stats and reads).
//
// Offline: when the Origin cannot answer (kUnavailable, kDeadlineExceeded)
// and an expired entry exists, the expired entry is served (stale-if-error)
// and the cache reports offline() until the Origin answers again. This is
// what lets a node keep reading its cached data when the federation is down.
//
// Thread-safety: all methods are safe from any thread; they block the caller
// until answered or the deadline passes (FUSE workers may block). mu_ is a
// leaf lock, never held across Origin or Index calls.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/index.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"
#include "daemon/core/origin.h"

namespace perch::core {

struct NamespaceOptions {
  std::chrono::seconds file_ttl{3600};
  std::chrono::seconds dir_ttl{300};
  std::chrono::seconds negative_ttl{30};
  // Put between the key type and the path of every persisted entry, so that
  // several mounts share one index without sharing entries: "/<tag>" (see
  // CacheStack), or "" for the unprefixed layout.
  std::string key_prefix;
};

class NamespaceCache {
 public:
  static constexpr int64_t kMinFreshness = 1;  // seconds

  NamespaceCache(Origin& origin, Index& index, NamespaceOptions options);

  // kNotFound (possibly from a negative entry), or the Origin's error when
  // nothing, not even a stale entry, is known.
  Result<FileAttr> GetAttr(const ObjectPath& path, Deadline deadline);

  // The entries of directory `path`, sorted by name. kInvalidArgument for a file.
  Result<std::vector<DirEntry>> ReadDir(const ObjectPath& path, Deadline deadline);

  // What the origin has at `path` now (attributes, or kNotFound), learnt
  // outside a lookup (a file found replaced while it was read): answers for
  // `path` from now on, in memory, in its directory's listing held in memory
  // and in the index, as if just asked.
  void Learned(const ObjectPath& path, const Result<FileAttr>& now);

  // True while answers come from stale entries because the Origin failed.
  bool offline() const { return offline_.load(); }
  // The federation answered something else (a block fetched, a health probe):
  // offline no more. Cheap: an atomic exchange.
  void NoteOnline();

  // Files whose attributes were asked of the origin again because their
  // freshness lifetime ran out, and those of them found changed (another
  // version, or gone).
  uint64_t revalidations() const { return revalidations_.load(); }
  uint64_t revalidated_changes() const { return revalidated_changes_.load(); }

  // True if the index holds any namespace entry of this cache's key prefix
  // (a warm cache to serve offline).
  bool HasPersistedEntries();

 private:
  struct AttrEntry {
    bool exists = false;
    FileAttr attr;
    int64_t expires = 0;  // seconds since the epoch (persisted: wall clock)
  };
  struct ListEntry {
    std::vector<DirEntry> entries;
    int64_t expires = 0;
    int64_t fetched = 0;  // when the origin gave it (read back: expires - dir_ttl)
  };

  // How long an answer of `a` is kept: dir_ttl, file_ttl, or less for a
  // file with a freshness lifetime.
  int64_t TtlOf(const FileAttr& a) const;
  // Whether a listing fetched at `fetched` still answers for its entry `a`
  // at `now` (it does unless `a`'s freshness lifetime ran out).
  static bool FreshInListing(const FileAttr& a, int64_t fetched, int64_t now);
  // An expiry `stored` in the index, bounded by now + `ttl` (the .cc says why).
  static int64_t StoredExpiry(uint64_t stored, int64_t ttl);
  // Gives `path`'s entry in its directory's listing in memory the answer
  // `now` (attributes, or removed for kNotFound).
  void UpdateListed(const ObjectPath& path, const Result<FileAttr>& now);

  std::string AttrKey(const ObjectPath& p) const {
    return index_keys::Attr(options_.key_prefix, p);
  }
  std::string ListKey(const ObjectPath& p) const {
    return index_keys::Listing(options_.key_prefix, p);
  }
  std::optional<AttrEntry> FindAttr(const ObjectPath& path);
  // The listing of `path`, shared (a lookup copies one entry, not the listing).
  std::shared_ptr<const ListEntry> FindList(const ObjectPath& path);
  // The attributes of `path` from its parent's listing in memory if that is
  // fresh at `now` and names it.
  std::optional<FileAttr> FromListingInMemory(const ObjectPath& path, int64_t now);
  void StoreAttr(const ObjectPath& path, const AttrEntry& e);
  void StoreList(const ObjectPath& path, std::shared_ptr<const ListEntry> listing);
  void NoteOffline(const Status& why);

  // Constant after construction.
  Origin& origin_;
  Index& index_;
  const NamespaceOptions options_;

  std::atomic<bool> offline_{false};
  std::atomic<uint64_t> revalidations_{0};
  std::atomic<uint64_t> revalidated_changes_{0};
  Mutex mu_;
  // Memory (issue 14): a listed file is one DirEntry in its directory's
  // listing; attrs_ holds only paths stat'ed on their own or read back from
  // the index after their listing expired (children's attributes from a
  // listing go to the index, not here).
  std::map<std::string, AttrEntry> attrs_ PERCH_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const ListEntry>> lists_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core

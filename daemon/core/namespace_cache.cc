#include "daemon/core/namespace_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "daemon/core/codec.h"
#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"
#include "daemon/core/wait.h"

namespace perch::core {
namespace {

// Index keys (index_keys.h; docs/design.md "On-disk format"): "na" + key_prefix + path -> attribute
// entry, "nl" + key_prefix + path -> listing entry (NamespaceCache::AttrKey).

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// The largest freshness lifetime kept (FileAttr::max_age, in the flags' top
// 32 bits): beyond any TTL, so no less fresh than the answer said.
constexpr int64_t kMaxKeptFreshness = 0xffffffffLL;

void PutAttr(std::string* out, const FileAttr& a) {
  // Flags: bit 0 directory, bit 1 restricted, bit 2 partial listing, bit 3 a
  // freshness lifetime, its seconds in bits 32-63 (entries written before a
  // flag existed read as without it; a perch from before bit 3 ignores it).
  uint64_t flags = (a.is_dir ? 1 : 0) | (a.restricted ? 2 : 0) | (a.partial_listing ? 4 : 0);
  if (a.max_age >= 0) {
    flags |= 8 | (static_cast<uint64_t>(std::min(a.max_age, kMaxKeptFreshness)) << 32);
  }
  codec::PutU64(out, flags);
  codec::PutU64(out, a.size);
  codec::PutU64(out, static_cast<uint64_t>(a.mtime));
  codec::PutString(out, a.etag);
}

bool GetAttrFields(codec::Reader* r, FileAttr* a) {
  uint64_t dir = 0, size = 0, mtime = 0;
  if (!r->GetU64(&dir) || !r->GetU64(&size) || !r->GetU64(&mtime) || !r->GetString(&a->etag)) {
    return false;
  }
  a->is_dir = (dir & 1) != 0;
  a->restricted = (dir & 2) != 0;
  a->partial_listing = (dir & 4) != 0;
  a->max_age = (dir & 8) != 0 ? static_cast<int64_t>(dir >> 32) : -1;
  a->size = size;
  a->mtime = static_cast<int64_t>(mtime);
  return true;
}

// Drops the entries of a listing from the origin that the mount cannot
// serve: names the kernel or tools cannot handle (IsServableName), files
// larger than kMaxObjectSize, anything past kMaxListingEntries. One warning
// per listing, with the count and one example, escaped.
void DropUnservable(const ObjectPath& dir, std::vector<DirEntry>* entries) {
  size_t dropped = 0;
  std::string example;
  size_t kept = 0;
  for (DirEntry& e : *entries) {
    bool ok = kept < kMaxListingEntries && IsServableName(e.name) &&
              (e.attr.is_dir || e.attr.size <= kMaxObjectSize) &&
              dir.str().size() + 1 + e.name.size() <= kMaxPathBytes;
    if (!ok) {
      if (dropped++ == 0) example = e.name + " (" + std::to_string(e.attr.size) + " bytes)";
      continue;
    }
    if (&(*entries)[kept] != &e) (*entries)[kept] = std::move(e);
    ++kept;
  }
  entries->resize(kept);
  if (dropped > 0) {
    spdlog::warn(
        "namespace: listing of {} has {} entr{} the mount cannot serve (a name too long, with "
        "'/' or NUL, '.', '..', a size beyond {} bytes, or too many entries), e.g. '{}'; "
        "skipped",
        EscapeForLog(dir.str()), dropped, dropped == 1 ? "y" : "ies", kMaxObjectSize,
        EscapeForLog(example, 300));
  }
}

bool IsOffline(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace

NamespaceCache::NamespaceCache(Origin& origin, Index& index, NamespaceOptions options)
    : origin_(origin), index_(index), options_(options) {}

int64_t NamespaceCache::TtlOf(const FileAttr& a) const {
  if (a.is_dir) return options_.dir_ttl.count();
  int64_t ttl = options_.file_ttl.count();
  if (a.max_age >= 0) ttl = std::min(ttl, std::max(a.max_age, kMinFreshness));
  return ttl;
}

// An expiry read back from the index, bounded: a record this node wrote says now + a TTL. Past
// now + `ttl` it was damaged or written under a clock since set back; it then lives `ttl` from
// now, so a damaged record is never trusted for longer than a fresh one, and the arithmetic on
// it (expires - ttl, fetched + max_age) cannot overflow. REQUIRES: 0 <= ttl <= 2^40 s (config).
int64_t NamespaceCache::StoredExpiry(uint64_t stored, int64_t ttl) {
  const int64_t latest = Now() + ttl;
  return stored > static_cast<uint64_t>(latest) ? latest : static_cast<int64_t>(stored);
}

bool NamespaceCache::FreshInListing(const FileAttr& a, int64_t fetched, int64_t now) {
  return a.is_dir || a.max_age < 0 || fetched + std::max(a.max_age, kMinFreshness) > now;
}

bool NamespaceCache::HasPersistedEntries() {
  bool any = false;
  // Every path starts with '/', so "na<prefix>/" holds this cache's entries only.
  for (std::string_view kind : {index_keys::kAttr, index_keys::kListing}) {
    index_
        .Scan(std::string(kind) + options_.key_prefix + "/",
              [&](std::string_view, std::string_view) {
                any = true;
                return false;
              })
        .IgnoreError();
  }
  return any;
}

std::optional<NamespaceCache::AttrEntry> NamespaceCache::FindAttr(const ObjectPath& path) {
  {
    MutexLock l(mu_);
    if (auto it = attrs_.find(path.str()); it != attrs_.end()) return it->second;
  }
  auto v = index_.Get(AttrKey(path));
  if (!v.ok() || !v->has_value()) return std::nullopt;
  codec::Reader r(**v);
  AttrEntry e;
  uint64_t exists = 0, expires = 0;
  if (!r.GetU64(&exists) || !r.GetU64(&expires) || !GetAttrFields(&r, &e.attr)) {
    spdlog::warn("namespace: undecodable index entry for {}; ignoring it",
                 EscapeForLog(path.str()));
    return std::nullopt;
  }
  e.exists = exists != 0;
  e.expires = StoredExpiry(expires, options_.file_ttl.count());
  MutexLock l(mu_);
  attrs_[path.str()] = e;
  return e;
}

std::optional<FileAttr> NamespaceCache::FromListingInMemory(const ObjectPath& path, int64_t now) {
  if (path.IsRoot()) return std::nullopt;
  MutexLock l(mu_);
  auto it = lists_.find(path.Parent().str());
  if (it == lists_.end() || it->second->expires <= now) return std::nullopt;
  const std::vector<DirEntry>& entries = it->second->entries;  // sorted by name
  const std::string_view name = path.Name();
  auto e = std::lower_bound(entries.begin(), entries.end(), name,
                            [](const DirEntry& d, std::string_view n) { return d.name < n; });
  if (e == entries.end() || e->name != name) return std::nullopt;
  if (!FreshInListing(e->attr, it->second->fetched, now)) return std::nullopt;
  return e->attr;
}

std::shared_ptr<const NamespaceCache::ListEntry> NamespaceCache::FindList(const ObjectPath& path) {
  {
    MutexLock l(mu_);
    if (auto it = lists_.find(path.str()); it != lists_.end()) return it->second;
  }
  auto v = index_.Get(ListKey(path));
  if (!v.ok() || !v->has_value()) return nullptr;
  codec::Reader r(**v);
  auto e = std::make_shared<ListEntry>();
  uint64_t expires = 0, n = 0;
  if (!r.GetU64(&expires) || !r.GetU64(&n)) return nullptr;
  e->expires = StoredExpiry(expires, options_.dir_ttl.count());
  e->fetched = e->expires - options_.dir_ttl.count();
  for (uint64_t i = 0; i < n; ++i) {
    DirEntry d;
    if (!r.GetString(&d.name) || !GetAttrFields(&r, &d.attr)) {
      spdlog::warn("namespace: undecodable listing for {}; ignoring it", EscapeForLog(path.str()));
      return nullptr;
    }
    e->entries.push_back(std::move(d));
  }
  // Written sorted by name; sorted again in case an entry came otherwise
  // (FromListingInMemory searches it).
  if (!std::is_sorted(e->entries.begin(), e->entries.end(),
                      [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; })) {
    std::sort(e->entries.begin(), e->entries.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  }
  MutexLock l(mu_);
  lists_[path.str()] = e;
  return e;
}

void NamespaceCache::StoreAttr(const ObjectPath& path, const AttrEntry& e) {
  {
    MutexLock l(mu_);
    attrs_[path.str()] = e;
  }
  std::string v;
  codec::PutU64(&v, e.exists ? 1 : 0);
  codec::PutU64(&v, static_cast<uint64_t>(e.expires));
  PutAttr(&v, e.attr);
  Status s = index_.Apply({{AttrKey(path), std::move(v)}});
  if (!s.ok()) {
    spdlog::warn("namespace: could not persist {}: {}", EscapeForLog(path.str()),
                 EscapeForLog(s.ToString()));
  }
}

void NamespaceCache::StoreList(const ObjectPath& path, std::shared_ptr<const ListEntry> listing) {
  const ListEntry& e = *listing;
  {
    MutexLock l(mu_);
    lists_[path.str()] = listing;
    // Entries of an earlier state of this directory: the listing answers now.
    for (const DirEntry& d : e.entries) {
      auto child = path.Child(d.name);
      if (child.ok()) attrs_.erase(child->str());
    }
  }
  // Persisted in batches of kBatch writes: a listing of 100,000 entries
  // never holds all its records in memory at once (twice, with RocksDB's copy).
  constexpr size_t kBatch = 4096;
  std::vector<Index::Write> batch;
  Status s;
  auto flush = [&] {
    if (!batch.empty() && s.ok()) s = index_.Apply(batch);
    batch.clear();
  };
  std::string v;
  codec::PutU64(&v, static_cast<uint64_t>(e.expires));
  codec::PutU64(&v, e.entries.size());
  int64_t now = Now();
  for (const DirEntry& d : e.entries) {
    codec::PutString(&v, d.name);
    PutAttr(&v, d.attr);
  }
  batch.push_back({ListKey(path), std::move(v)});
  // Children's attributes come with the listing (readdirplus needs them); in
  // memory the listing answers for them (FromListingInMemory).
  for (const DirEntry& d : e.entries) {
    auto child = path.Child(d.name);
    if (!child.ok()) continue;
    AttrEntry ae{true, d.attr, now + TtlOf(d.attr)};
    std::string av;
    codec::PutU64(&av, 1);
    codec::PutU64(&av, static_cast<uint64_t>(ae.expires));
    PutAttr(&av, ae.attr);
    batch.push_back({AttrKey(*child), std::move(av)});
    if (batch.size() >= kBatch) flush();
  }
  flush();
  if (!s.ok()) {
    spdlog::warn("namespace: could not persist listing of {}: {}", EscapeForLog(path.str()),
                 EscapeForLog(s.ToString()));
  }
}

void NamespaceCache::Learned(const ObjectPath& path, const Result<FileAttr>& now) {
  const int64_t t = Now();
  if (now.ok()) {
    StoreAttr(path, AttrEntry{true, *now, t + TtlOf(*now)});
  } else if (now.status().code() == StatusCode::kNotFound) {
    StoreAttr(path, AttrEntry{false, {}, t + options_.negative_ttl.count()});
  } else {
    return;
  }
  UpdateListed(path, now);
}

void NamespaceCache::UpdateListed(const ObjectPath& path, const Result<FileAttr>& now) {
  if (path.IsRoot()) return;
  // The listing in memory answers readdirplus: it must not show the old
  // version (the index's copy is read only after a restart, when the entry
  // just stored answers first).
  MutexLock l(mu_);
  auto it = lists_.find(path.Parent().str());
  if (it == lists_.end()) return;
  const std::vector<DirEntry>& entries = it->second->entries;
  auto e = std::lower_bound(entries.begin(), entries.end(), path.Name(),
                            [](const DirEntry& d, std::string_view n) { return d.name < n; });
  if (e == entries.end() || e->name != path.Name()) return;
  auto changed = std::make_shared<ListEntry>(*it->second);
  auto pos = changed->entries.begin() + (e - entries.begin());
  if (now.ok()) {
    pos->attr = *now;
  } else {
    changed->entries.erase(pos);
  }
  it->second = std::move(changed);
}

void NamespaceCache::NoteOnline() {
  if (offline_.exchange(false)) spdlog::info("namespace: the federation answers again");
}

void NamespaceCache::NoteOffline(const Status& why) {
  if (!offline_.exchange(true)) {
    spdlog::warn("namespace: federation unavailable ({}); serving what is cached",
                 EscapeForLog(why.ToString()));
  }
}

Result<FileAttr> NamespaceCache::GetAttr(const ObjectPath& path, Deadline deadline) {
  int64_t now = Now();
  {
    MutexLock l(mu_);
    auto it = attrs_.find(path.str());
    if (it != attrs_.end() && it->second.expires > now) {
      if (!it->second.exists) return NotFoundError(path.str() + " does not exist (cached answer)");
      return it->second.attr;
    }
    const bool in_memory = it != attrs_.end();
    l.Unlock();
    // A listed file's attributes live in its directory's listing (no attrs_ entry).
    if (!in_memory) {
      if (auto listed = FromListingInMemory(path, now)) return *listed;
    }
  }
  std::optional<AttrEntry> known = FindAttr(path);
  if (known && known->expires > now) {
    if (!known->exists) return NotFoundError(path.str() + " does not exist (cached answer)");
    return known->attr;
  }
  // A file whose freshness lifetime ran out: what it was, to serve if the
  // origin cannot be asked and to tell a change.
  std::optional<FileAttr> revalidating;
  if (known && known->exists && !known->attr.is_dir && known->attr.max_age >= 0) {
    revalidating = known->attr;
  }
  // A fresh, complete listing of the parent answers without a network round
  // trip. A partial one (the federation root, an unlisted namespace) only
  // answers for the names it has.
  if (!path.IsRoot()) {
    std::optional<AttrEntry> parent_attr = FindAttr(path.Parent());
    bool complete = !(parent_attr && parent_attr->exists && parent_attr->attr.partial_listing);
    if (auto parent = FindList(path.Parent()); parent && parent->expires > now) {
      auto it = std::find_if(parent->entries.begin(), parent->entries.end(),
                             [&](const DirEntry& d) { return d.name == path.Name(); });
      if (it != parent->entries.end()) {
        if (FreshInListing(it->attr, parent->fetched, now)) return it->attr;
        revalidating = it->attr;
      } else if (complete && path.Name().size() < kMaxNameBytes) {
        // XRootD (5.5) lists a 255-byte name cut to 254 bytes: a name of the
        // longest length is asked of the origin, whatever the listing says.
        StoreAttr(path, AttrEntry{false, {}, now + options_.negative_ttl.count()});
        return NotFoundError(path.str() + " does not exist (not in its directory's listing)");
      }
    }
  }
  if (revalidating) revalidations_++;
  auto r = WaitFor<FileAttr>(deadline, [&](auto cb) { origin_.Stat(path, deadline, cb); });
  if (r.ok() && !r->is_dir && r->size > kMaxObjectSize) {
    r = CorruptError(EscapeForLog(path.str()) + ": the federation gives a size of " +
                         std::to_string(r->size) + " bytes, beyond the limit of " +
                         std::to_string(kMaxObjectSize),
                     FailureSite::kOrigin);
  }
  if (revalidating && (r.ok() || r.status().code() == StatusCode::kNotFound)) {
    const bool same = r.ok() && !r->is_dir && r->size == revalidating->size &&
                      r->mtime == revalidating->mtime && r->etag == revalidating->etag;
    if (!same) {
      revalidated_changes_++;
      spdlog::info("namespace: {} changed at the origin (its freshness lifetime of {} s ran out)",
                   EscapeForLog(path.str()), revalidating->max_age);
      UpdateListed(path, r);  // readdirplus must not give the old version back
    }
  }
  if (r.ok()) {
    NoteOnline();
    StoreAttr(path, AttrEntry{true, *r, now + TtlOf(*r)});
    return r;
  }
  if (r.status().code() == StatusCode::kNotFound) {
    NoteOnline();
    StoreAttr(path, AttrEntry{false, {}, now + options_.negative_ttl.count()});
    return r.status();
  }
  if (IsOffline(r.status()) && revalidating && !known) {  // a listed file: its listing's answer
    NoteOffline(r.status());
    return *revalidating;
  }
  if (IsOffline(r.status()) && known) {
    NoteOffline(r.status());
    if (!known->exists)
      return NotFoundError(path.str() + " does not exist (stale answer, federation offline)");
    return known->attr;
  }
  return r.status();
}

Result<std::vector<DirEntry>> NamespaceCache::ReadDir(const ObjectPath& path, Deadline deadline) {
  int64_t now = Now();
  std::shared_ptr<const ListEntry> known = FindList(path);
  if (known && known->expires > now) return known->entries;
  auto r =
      WaitFor<std::vector<DirEntry>>(deadline, [&](auto cb) { origin_.List(path, deadline, cb); });
  if (r.ok()) {
    NoteOnline();
    DropUnservable(path, &*r);
    std::sort(r->begin(), r->end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    // One copy is kept (shared by lookups), one returned.
    auto listing = std::make_shared<ListEntry>();
    listing->entries = std::move(*r);
    listing->expires = now + options_.dir_ttl.count();
    listing->fetched = now;
    StoreList(path, listing);
    return listing->entries;
  }
  if (IsOffline(r.status()) && known) {
    NoteOffline(r.status());
    return known->entries;
  }
  return r.status();
}

}  // namespace perch::core

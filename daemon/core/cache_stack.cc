#include "daemon/core/cache_stack.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "daemon/core/check.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"

namespace perch::core {

// Tells the shared catalog of this mount's blocks, with catalog paths.
class Mount::Listener : public BlockListener {
 public:
  Listener(CacheCatalog& catalog, Mount& mount) : catalog_(catalog), mount_(mount) {}
  void Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
              const ObjectVersion& version) override {
    mount_.CopyChanged(key.object_id);
    catalog_.Stored(key, length, mount_.CatalogPath(path), version);
  }
  void StoredMany(const std::vector<StoredBlock>& blocks) override {
    std::vector<StoredBlock> named = blocks;
    for (StoredBlock& b : named) {
      mount_.CopyChanged(b.key.object_id);
      b.path = mount_.CatalogPath(b.path);
    }
    catalog_.StoredMany(named);
  }
  void Touched(const BlockKey& key, uint64_t length) override { catalog_.Touched(key, length); }
  void Dropped(const BlockKey& key) override { catalog_.Dropped(key); }
  void StoreFailed(const BlockKey& key, uint64_t length, const Status& why) override {
    catalog_.StoreFailed(key, length, why);
  }
  bool Contains(const BlockKey& key) const override { return catalog_.Contains(key); }
  bool MayContain(const BlockKey& key) const override { return catalog_.MayContain(key); }
  void Vouched(const std::string& object_id, const std::vector<ObjectDigest>& digests) override {
    mount_.digests_.Vouched(object_id, digests);
  }
  void Unverified(const std::string& object_id, const std::string& why) override {
    mount_.digests_.Unverified(object_id, why, /*count=*/false);  // counted where it was found
  }

 private:
  CacheCatalog& catalog_;
  Mount& mount_;
};

namespace {

// One object's bytes against one digest that DigestKeeper verified.
class KnownDigestCheck final : public ObjectDigests::Check {
 public:
  KnownDigestCheck(ObjectDigest want, std::unique_ptr<DigestHasher> hasher)
      : want_(std::move(want)), hasher_(std::move(hasher)) {}
  void Update(std::string_view bytes) override { hasher_->Update(bytes); }
  bool Matches() override {
    std::vector<ObjectDigest> got = hasher_->Finish();
    return got.size() == 1 && got.front() == want_;
  }
  std::string Describe() const override { return DigestText(want_); }

 private:
  const ObjectDigest want_;
  const std::unique_ptr<DigestHasher> hasher_;
};

// The scrub's whole-object digests: those DigestKeeper verified against a
// server's (it keeps them in memory: what it verified since start). The
// cheapest algorithm is checked, crc32c where known.
class KnownDigests final : public ObjectDigests {
 public:
  KnownDigests(DigestKeeper& keeper, DigestHasherFactory hasher)
      : keeper_(keeper), hasher_(std::move(hasher)) {}
  std::unique_ptr<Check> Start(const std::string& object_id, uint64_t size) override {
    (void)size;  // the id names the version, size included
    std::vector<ObjectDigest> known = keeper_.Known(object_id);
    const ObjectDigest* pick = CheapestDigest(known);
    if (pick == nullptr) return nullptr;
    return std::make_unique<KnownDigestCheck>(*pick, hasher_({pick->algorithm}));
  }
  DigestVerdict Verdict(const std::string& object_id) const override {
    return keeper_.Verdict(object_id);
  }
  void Mismatched(const std::string& object_id, std::string what) override {
    keeper_.Mismatched(object_id, std::move(what));
  }

 private:
  DigestKeeper& keeper_;
  const DigestHasherFactory hasher_;
};

std::unique_ptr<ObjectDigests> NewKnownDigests(DigestKeeper& keeper, DigestHasherFactory hasher) {
  if (!hasher) return nullptr;
  return std::make_unique<KnownDigests>(keeper, std::move(hasher));
}

}  // namespace

Mount::Mount(MountSpec spec, std::string tag, CacheCatalog& catalog, DigestKeeper& digests)
    : spec_(std::move(spec)), tag_(std::move(tag)), catalog_(catalog), digests_(digests) {}

Mount::~Mount() = default;

ObjectPath Mount::CatalogPath(const ObjectPath& p) const {
  return PERCH_CHECKED(ObjectPath::Parse("/" + tag_ + (p.IsRoot() ? "" : p.str())));
}

std::optional<ObjectPath> Mount::FromCatalogPath(const ObjectPath& p) const {
  return p.RelativeTo(CatalogPath(ObjectPath()));
}

std::string Mount::FederationPath(const ObjectPath& p) const {
  if (spec_.federation_prefix.IsRoot()) return p.str();
  if (p.IsRoot()) return spec_.federation_prefix.str();
  return spec_.federation_prefix.str() + p.str();
}

std::vector<CachedObject> Mount::List(const ObjectPath& prefix, const std::string& after,
                                      size_t limit) const {
  std::string catalog_after;
  if (auto a = ObjectPath::Parse(after); !after.empty() && a.ok())
    catalog_after = CatalogPath(*a).str();
  auto objects = catalog_.List(CatalogPath(prefix), catalog_after, limit);
  for (CachedObject& o : objects) o.path = FromCatalogPath(o.path).value_or(o.path);
  return objects;
}

Result<EvictResult> Mount::Evict(const ObjectPath& prefix) {
  return catalog_.Evict(CatalogPath(prefix));
}
Status Mount::Pin(const ObjectPath& prefix) { return catalog_.Pin(CatalogPath(prefix)); }
Status Mount::Unpin(const ObjectPath& prefix) { return catalog_.Unpin(CatalogPath(prefix)); }

std::vector<ObjectPath> Mount::Pins() const {
  std::vector<ObjectPath> out;
  for (const ObjectPath& p : catalog_.Pins()) {
    if (auto mine = FromCatalogPath(p)) out.push_back(*mine);
  }
  return out;
}

std::map<std::string, std::string> Mount::Xattrs(const ObjectPath& p, const FileAttr& a) {
  std::map<std::string, std::string> x;
  x["user.perch.federation"] = spec_.federation_id;
  if (!a.is_dir) {
    std::string id = fs_->ObjectId(p, a);
    x["user.perch.cache_id"] = id;
    x["user.perch.cached_bytes"] = std::to_string(catalog_.CachedBytes(id));
    // The federation URL of the root ends in '/', one of a prefix does not.
    // Percent-encoded, so that perchctl (or any URL parser) takes it back
    // exactly: "a b" is a%20b, "#" %23, "%" %25.
    const std::string path = spec_.encode_path ? spec_.encode_path(p) : p.str();
    x["user.perch.url"] =
        spec_.federation_id + (spec_.federation_prefix.IsRoot() ? path.substr(1) : path);
    if (spec_.last_server) {
      if (std::string server = spec_.last_server(p); !server.empty())
        x["user.perch.server"] = server;
    }
    for (const ObjectDigest& d : digests_.Known(id)) {
      x[kDigestXattrPrefix + d.algorithm] = DigestValueText(d);
    }
    x[kVerdictXattr] = VerdictText(a, id);
  }
  return x;
}

std::string Mount::VerdictText(const FileAttr& a, const std::string& object_id) {
  const DigestVerdict v = digests_.Verdict(object_id);
  switch (v.kind) {
    case DigestVerdict::kVerified:
      return v.detail;
    case DigestVerdict::kUnverified:
    case DigestVerdict::kMismatched:
      return std::string(ToString(v.kind)) + ": " + v.detail;
    case DigestVerdict::kUnknown:
      break;
  }
  if (a.size == 0) return "unverified: empty";
  if (!verify_complete_) return "unverified: digest checks are off (--no-verify-digests)";
  return "unverified: not checked yet (" + std::to_string(catalog_.CachedBytes(object_id)) +
         " of " + std::to_string(a.size) + " bytes cached; checked once read whole)";
}

Result<std::string> Mount::Xattr(const ObjectPath& p, const FileAttr& a, std::string_view name) {
  const std::string_view prefix = kDigestXattrPrefix;
  if (name.substr(0, prefix.size()) == prefix && !a.is_dir) {
    std::string algorithm(name.substr(prefix.size()));
    if (!IsDigestAlgorithm(algorithm)) return NotFoundError("no such attribute");
    auto d = Digests(p, a, {algorithm});
    if (!d.ok()) return d.status();
    if (d->empty()) return NotFoundError("no such attribute");
    return DigestValueText(d->front());
  }
  auto all = Xattrs(p, a);
  auto it = all.find(std::string(name));
  if (it == all.end()) return NotFoundError("no such attribute");
  return it->second;
}

Result<std::vector<ObjectDigest>> Mount::Digests(const ObjectPath& p, const FileAttr& a,
                                                 const std::vector<std::string>& wanted) {
  auto all = digests_.Get(*spec_.origin, *reader_, p, a, fs_->ObjectId(p, a),
                          DeadlineAfter(spec_.op_timeout), OnMismatch::kFetchAgain, wanted);
  if (!all.ok() || wanted.empty()) return all;
  std::vector<ObjectDigest> out;
  for (const std::string& w : wanted) {
    for (const ObjectDigest& d : *all) {
      if (d.algorithm == w) out.push_back(d);
    }
  }
  return out;
}

bool Mount::NeedsCheck(const FileAttr& a, const std::string& object_id) {
  if (!verify_complete_ || a.is_dir || a.size <= reader_->block_size()) return false;
  {
    MutexLock l(verified_mu_);
    if (verified_.count(object_id) > 0) return false;
  }
  return reader_->AllCached(ObjectVersion{a.size, a.etag}, object_id);
}

Status Mount::VerifyComplete(const ObjectPath& p, const FileAttr& a, const std::string& object_id,
                             Deadline deadline) {
  if (!NeedsCheck(a, object_id)) return Status::Ok();
  {
    MutexLock l(verified_mu_);
    verifying_[object_id] = false;  // the same object twice at once: checked twice
    watching_ = verified_.size() + verifying_.size();
  }
  Status checked = digests_.CheckCopy(*spec_.origin, *reader_, p, a, object_id, deadline);
  {
    MutexLock l(verified_mu_);
    auto it = verifying_.find(object_id);
    const bool changed = it == verifying_.end() || it->second;
    if (it != verifying_.end()) verifying_.erase(it);
    // No server offers a digest of it (kNotFound): nothing to check this
    // copy against, and asking again at every read to its end would cost a
    // request each time.
    if ((checked.ok() || checked.code() == StatusCode::kNotFound) && !changed) {
      if (verified_.size() >= kMaxVerifiedCopies) verified_.erase(verified_.begin());
      verified_.insert(object_id);
    }
    watching_ = verified_.size() + verifying_.size();
  }
  const bool unreachable =
      checked.code() == StatusCode::kUnavailable || checked.code() == StatusCode::kDeadlineExceeded;
  const bool federation_gone = offline() || checked.where() == FailureSite::kDirector;
  if (checked.code() == StatusCode::kNotFound || (unreachable && federation_gone)) {
    // No server but those that sent its bytes states a digest, or the
    // federation does not answer at all (offline, or its director down): no
    // source can check it,
    // so it is served, counted, and said once per mount.
    digests_.Unverified(object_id,
                        checked.code() == StatusCode::kNotFound
                            ? "no server but those that sent its bytes states a digest"
                            : "the federation did not answer (" + checked.message() + ")",
                        /*count=*/true);
    if (!said_unverified_.exchange(true)) {
      spdlog::warn("{}: {}; such objects of {} are served unchecked (digests_unverified)",
                   EscapeForLog(p.str()), EscapeForLog(checked.message()), spec_.federation_id);
    }
    return Status::Ok();
  }
  // A mismatch, or no answer in time while the federation answers: never
  // served unchecked while a server may vouch for it (the next read asks
  // again).
  return checked;
}

void Mount::CopyChanged(const std::string& object_id) {
  if (watching_.load(std::memory_order_relaxed) == 0) return;  // checking off, or none checked
  MutexLock l(verified_mu_);
  verified_.erase(object_id);
  if (auto it = verifying_.find(object_id); it != verifying_.end()) it->second = true;
}

Status Mount::CheckRoot(std::chrono::milliseconds timeout) {
  auto root = names_->GetAttr(ObjectPath(), DeadlineAfter(timeout));
  if (root.ok()) {
    if (root->is_dir) return Status::Ok();
    return InvalidArgumentError(spec_.federation_id +
                                " is a file, not a directory; mount its parent");
  }
  bool unreachable = root.status().code() == StatusCode::kUnavailable ||
                     root.status().code() == StatusCode::kDeadlineExceeded;
  if (unreachable && names_->HasPersistedEntries()) {
    spdlog::warn(
        "federation {} unreachable ({}); serving the cached namespace and retrying in the "
        "background",
        spec_.federation_id, root.status().message());
    return Status::Ok();
  }
  return Status(root.status().code(),
                "cannot mount " + spec_.federation_id + ": " + root.status().message(),
                root.status().where(), root.status().retryable());
}

CacheStack::CacheStack(Index& index, BlockStore& store, Executor& disk, Executor& jobs,
                       StackOptions options)
    : index_(index),
      store_(store),
      disk_(disk),
      jobs_(jobs),
      options_(std::move(options)),
      // A block is in use if any mount's reader is reading or fetching it.
      catalog_(index, store, disk, WithAnnouncedReads(options_.catalog),
               [this](const BlockKey& k) {
                 for (Mount* m : mounts()) {
                   if (m->reader().InUse(k)) return true;
                 }
                 return false;
               }),
      scheduler_(options_.scheduler),
      digests_(options_.digest_hasher, options_.digest_keeper, &index_),
      known_digests_(NewKnownDigests(digests_, options_.digest_hasher)) {
  ScrubOptions scrub = options_.scrub;
  scrub.block_size = options_.reader.block_size;
  scrub.path_name = [this](const ObjectPath& p) {
    ObjectPath below;
    Mount* m = MountOfCatalogPath(p, &below);
    return m == nullptr ? p.str() : m->FederationPath(below);
  };
  scrubber_ = std::make_unique<Scrubber>(
      catalog_, store_, index_, jobs_, std::move(scrub),
      options_.digests != nullptr ? options_.digests : known_digests_.get());
}

CacheStack::~CacheStack() {
  closing_ = true;
  scrubber_->Stop();  // no step of it may run past the stack
}

Status CacheStack::Open(const std::function<Status(const Status&)>& reset_index) {
  Status loaded = catalog_.Load();
  if (loaded.code() == StatusCode::kCorrupt && reset_index) {
    // Corruption found past Open: a new index; Reconcile re-adopts the blocks.
    if (Status s = reset_index(loaded); !s.ok()) return s;
    loaded = catalog_.Load();
  }
  if (!loaded.ok())
    return Status(loaded.code(), "cannot read the cache index: " + loaded.ToString());
  catalog_.Reconcile();  // background: orphans, leftovers, records without files
  if (options_.flush_period.count() > 0) ScheduleFlush();
  scrubber_->Start();  // after the walk (it waits for it)
  return Status::Ok();
}

std::string CacheStack::TagOf(const std::string& federation_id) {
  // FNV-1a: fixed by definition (std::hash is not), so tags survive upgrades.
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : federation_id) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "fed-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Result<Mount*> CacheStack::AddMount(MountSpec spec) {
  if (spec.origin == nullptr) return InvalidArgumentError("a mount needs an origin");
  for (Mount* m : mounts()) {
    if (m->spec().federation_id == spec.federation_id) {
      return InvalidArgumentError(spec.federation_id + " is mounted twice (at " +
                                  m->spec().mountpoint + " and " + spec.mountpoint + ")");
    }
  }
  std::string tag = TagOf(spec.federation_id);
  if (spec.adopt_untagged_entries) {
    if (Status s = AdoptUntaggedEntries(tag); !s.ok()) return s;
  }
  spec.names.key_prefix = "/" + tag;
  spec.fs.op_timeout = spec.op_timeout;
  spec.fs.federation_id = spec.federation_id;
  auto mount =
      std::unique_ptr<Mount>(new Mount(std::move(spec), std::move(tag), catalog_, digests_));
  Mount& m = *mount;
  m.verify_complete_ = options_.verify_complete_objects;
  const MountSpec& s = m.spec_;
  m.listener_ = std::make_unique<Mount::Listener>(catalog_, m);
  m.names_ = std::make_unique<NamespaceCache>(*s.origin, index_, s.names);
  BlockReaderOptions ropts = options_.reader;
  ropts.flow_prefix = m.tag_ + ":";  // fair between namespaces of every mount
  // A replaced object: new opens see the new version, the old one's blocks go.
  m.guard_ = std::make_unique<VersionGuard>(
      *s.origin, disk_, VersionGuardOptions{s.federation_id, options_.version_check_interval},
      [this](const std::string& object_id) { return catalog_.CachedBytes(object_id) > 0; },
      [&m](const ObjectPath& path, const Result<FileAttr>& now) {
        m.names_->Learned(path, now);
        auto evicted = m.Evict(path);
        if (!evicted.ok()) {
          spdlog::warn("cache: could not drop the old version of {}: {}", EscapeForLog(path.str()),
                       EscapeForLog(evicted.status().ToString()));
        }
      });
  m.reader_ = std::make_unique<BlockReader>(*s.origin, store_, disk_, ropts, m.listener_.get(),
                                            &scheduler_, m.guard_.get());
  // A block fetched is the federation answering: the mount is offline no more
  // (reads of files already open need no stat, which would say so too).
  m.reader_->OnFederationAnswered([names = m.names_.get()] { names->NoteOnline(); });
  if (options_.prefetch) {
    PrefetchOptions popts = options_.prefetch_options;
    // Nothing is fetched ahead so far that it would push out what is being
    // read (of the quota as the filesystem caps it: a small disk prefetches
    // less), and one directory's prefetch never flushes the cache.
    const uint64_t quota = catalog_.capacity_bytes();
    popts.max_window_bytes = std::min(popts.max_window_bytes, quota / 8);
    popts.dir_max_bytes = std::min(popts.dir_max_bytes, quota / 8);
    // Hinted files fetched ahead of their reader take at most a 16th of the
    // quota: a dataset larger than the cache keeps the rest for what it
    // reads again (the eviction order, CacheCatalog), and that window holds
    // the reader's rate times the servers' latency many times over.
    popts.hint_window_bytes =
        popts.hint_window_bytes == 0 ? quota / 16 : std::min(popts.hint_window_bytes, quota / 16);
    m.prefetcher_ = std::make_unique<Prefetcher>(
        *m.names_, *m.reader_, jobs_, popts,
        [fed = s.federation_id](const ObjectPath& p, const FileAttr& a) {
          return ObjectIdFor(fed, p, a);
        });
  }
  FileSystemOptions fs_options = s.fs;
  if (options_.verify_complete_objects) {
    // A check reads the whole object and hashes it: a job, not the reader's thread.
    fs_options.verify_complete = [this, &m](const OpenFile& f, Deadline deadline,
                                            std::function<void(Status)> done) {
      if (!m.NeedsCheck(f.attr, f.object_id)) return done(Status::Ok());
      jobs_.Post([&m, f, deadline, done = std::move(done)] {
        done(m.VerifyComplete(f.path, f.attr, f.object_id, deadline));
      });
    };
  }
  m.fs_ = std::make_unique<FileSystem>(*m.names_, *m.reader_, fs_options, m.prefetcher_.get());
  WarmerOptions wopts = options_.warmer;
  wopts.path_name = [&m](const ObjectPath& p) { return m.FederationPath(p); };
  m.warmer_ = std::make_unique<Warmer>(*m.fs_, *m.reader_, catalog_, jobs_, wopts);
  MutexLock l(mu_);
  mounts_.push_back(std::move(mount));
  return &m;
}

namespace {

// True if `path` starts with a mount tag ("/fed-" and 16 hex digits).
bool IsTagged(std::string_view path) {
  if (!path.starts_with("/fed-") || path.size() < 21) return false;
  for (char c : path.substr(5, 16)) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return path.size() == 21 || path[21] == '/';
}

}  // namespace

Status CacheStack::AdoptUntaggedEntries(const std::string& tag) {
  // Every mount's first answer is its root's attributes: without an untagged
  // root entry ("na/") there is nothing to adopt, and one Get says so.
  auto root = index_.Get(std::string(index_keys::kAttr) + "/");
  if (!root.ok()) return root.status();
  if (!root->has_value()) return Status::Ok();
  std::vector<Index::Write> batch;
  for (std::string_view kind : {index_keys::kAttr, index_keys::kListing}) {
    const std::string untagged = std::string(kind) + "/";
    Status s = index_.Scan(untagged, [&](std::string_view key, std::string_view value) {
      std::string_view path = key.substr(kind.size());
      if (IsTagged(path)) return true;
      batch.push_back({untagged + tag + std::string(path), std::string(value)});
      batch.push_back({std::string(key), std::nullopt});
      return true;
    });
    if (!s.ok()) return s;
  }
  spdlog::info("namespace: {} entries of the untagged layout moved under {}", batch.size() / 2,
               tag);
  return index_.Apply(batch);
}

CatalogOptions CacheStack::WithAnnouncedReads(CatalogOptions o) {
  if (o.future_uses) return o;  // a test's own
  // Every mount's hinted reads, as catalog paths; the nearest need wins.
  o.future_uses = [this] {
    FutureUses out;
    for (Mount* m : mounts()) {
      const Prefetcher* p = m->prefetcher();
      if (p == nullptr) continue;
      p->FutureUses(kAnnouncedHorizon, [&](const ObjectPath& path, uint64_t ahead) {
        auto [it, added] = out.try_emplace(m->CatalogPath(path).str(), ahead);
        if (!added) it->second = std::min(it->second, ahead);
      });
    }
    return out;
  };
  return o;
}

std::vector<Mount*> CacheStack::mounts() const {
  MutexLock l(mu_);
  std::vector<Mount*> out;
  for (const auto& m : mounts_) out.push_back(m.get());
  return out;
}

Mount* MostSpecificMount(const std::vector<Mount*>& mounts, const ObjectPath& path,
                         ObjectPath* below) {
  Mount* best = nullptr;
  for (Mount* m : mounts) {
    const ObjectPath& prefix = m->spec().federation_prefix;
    if (best != nullptr && prefix.str().size() <= best->spec().federation_prefix.str().size())
      continue;
    if (auto rel = path.RelativeTo(prefix)) {
      best = m;
      *below = *std::move(rel);
    }
  }
  return best;
}

Mount* CacheStack::MountOfCatalogPath(const ObjectPath& p, ObjectPath* object_path) const {
  for (Mount* m : mounts()) {
    if (auto mine = m->FromCatalogPath(p)) {
      *object_path = *mine;
      return m;
    }
  }
  return nullptr;
}

void CacheStack::StatFs(uint64_t unit, uint64_t* blocks, uint64_t* free_blocks) const {
  if (unit == 0) unit = 1;
  const uint64_t capacity = catalog_.capacity_bytes();
  const uint64_t used = std::min(catalog_.cached_bytes(), capacity);
  *blocks = capacity / unit;
  *free_blocks = (capacity - used) / unit;
}

void CacheStack::ScheduleFlush() {
  disk_.PostAfter(options_.flush_period, [this] {
    if (closing_) return;
    catalog_.Flush().IgnoreError();
    catalog_.UpdateCapacity();  // the disk may be filling with other things
    ScheduleFlush();
  });
}

void CacheStack::StopBackground(std::chrono::milliseconds warm_timeout) {
  for (Mount* m : mounts()) m->warmer().Shutdown(warm_timeout);
  for (Mount* m : mounts()) {
    if (m->prefetcher() != nullptr) m->prefetcher()->Shutdown();
  }
  scrubber_->Stop();
}

void CacheStack::Close() {
  closing_ = true;
  for (Mount* m : mounts()) m->reader().FlushWrites();
  catalog_.Flush().IgnoreError();
}

}  // namespace perch::core

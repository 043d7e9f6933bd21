#include "daemon/core/filesystem.h"

#include <algorithm>

#include "daemon/core/codec.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"
#include "daemon/core/wait.h"

namespace perch::core {

FileSystem::FileSystem(NamespaceCache& names, BlockReader& reader, FileSystemOptions options,
                       Prefetcher* prefetcher)
    : names_(names), reader_(reader), options_(std::move(options)), prefetcher_(prefetcher) {}

Result<FileAttr> FileSystem::GetAttr(const ObjectPath& path) {
  auto attr = names_.GetAttr(path, NewDeadline());
  Answered(path, attr);
  return attr;
}

Result<FileAttr> FileSystem::Lookup(const ObjectPath& parent, std::string_view name) {
  auto child = parent.Child(name);
  if (!child.ok()) return NotFoundError("invalid name", FailureSite::kLocal);
  auto attr = names_.GetAttr(*child, NewDeadline());
  Answered(*child, attr);
  return attr;
}

void FileSystem::Answered(const ObjectPath& path, const Result<FileAttr>& attr) {
  if (!attr.ok() || attr->is_dir || attr->max_age < 0) return;  // no lifetime: nothing to do
  std::string old_id;
  {
    MutexLock l(mu_);
    auto it = implicit_.find(path.str());
    if (it == implicit_.end()) return;
    auto f = open_.find(it->second->second);
    if (f == open_.end() || f->second.attr.max_age < 0) return;
    old_id = f->second.object_id;
  }
  if (old_id != ObjectId(path, *attr)) ForgetImplicit(path, old_id);
}

Status FileSystem::Revalidate(const OpenFile& f) {
  if (f.attr.max_age < 0) return Status::Ok();  // no lifetime: its version stands
  auto now = names_.GetAttr(f.path, NewDeadline());
  if ((now.ok() && (now->is_dir || ObjectId(f.path, *now) != f.object_id)) ||
      (!now.ok() && now.status().code() == StatusCode::kNotFound)) {
    return StaleError(EscapeForLog(f.path.str()) +
                      " changed at the origin since it was opened (its freshness lifetime ran "
                      "out); open it again");
  }
  return Status::Ok();
}

Result<std::vector<DirEntry>> FileSystem::ReadDir(const ObjectPath& path) {
  return names_.ReadDir(path, NewDeadline());
}

std::string FileSystem::ObjectId(const ObjectPath& path, const FileAttr& attr) const {
  return ObjectIdFor(options_.federation_id, path, attr);
}

Result<uint64_t> FileSystem::Open(const ObjectPath& path) {
  auto attr = names_.GetAttr(path, NewDeadline());
  if (!attr.ok()) return attr.status();
  if (attr->is_dir) return InvalidArgumentError(path.str() + " is a directory");
  uint64_t h = next_handle_++;
  OpenFile f{path, *attr, ObjectId(path, *attr)};
  if (prefetcher_ != nullptr) prefetcher_->Opened(h, f.path, f.attr, f.object_id);
  MutexLock l(mu_);
  open_.emplace(h, std::move(f));
  return h;
}

std::vector<std::pair<uint64_t, OpenFile>> FileSystem::OpenFiles() const {
  MutexLock l(mu_);
  std::vector<std::pair<uint64_t, OpenFile>> out;
  out.reserve(open_.size());
  for (const auto& [h, f] : open_) {
    out.emplace_back(h, f);
  }
  std::erase_if(out, [&](const auto& e) {  // still under mu_
    auto it = implicit_.find(e.second.path.str());
    return it != implicit_.end() && it->second->second == e.first;
  });
  return out;
}

void FileSystem::AdoptOpenFile(uint64_t handle, const ObjectPath& path, const FileAttr& attr) {
  OpenFile f{path, attr, ObjectId(path, attr)};
  if (prefetcher_ != nullptr) prefetcher_->Opened(handle, f.path, f.attr, f.object_id);
  uint64_t next = next_handle_.load();
  while (next <= handle && !next_handle_.compare_exchange_weak(next, handle + 1)) {
  }
  MutexLock l(mu_);
  open_[handle] = std::move(f);
}

Result<std::shared_ptr<const BlockFd>> FileSystem::WholeFile(uint64_t handle) {
  OpenFile f;
  {
    MutexLock l(mu_);
    auto it = open_.find(handle);
    if (it == open_.end()) return InvalidArgumentError("unknown file handle");
    f = it->second;
  }
  // The kernel reads that file without us: the last chance to check it.
  if (options_.verify_complete) {
    const Deadline deadline = NewDeadline();
    auto checked = WaitFor<bool>(deadline, [&](auto cb) {
      options_.verify_complete(f, deadline, [cb](Status s) {
        if (s.ok()) return cb(true);
        cb(std::move(s));
      });
    });
    if (!checked.ok()) return checked.status();
  }
  return reader_.WholeFile(ObjectVersion{f.attr.size, f.attr.etag}, f.object_id);
}

Result<OpenFile> FileSystem::StartRead(uint64_t handle, uint64_t offset, uint64_t size) {
  OpenFile f;
  {
    MutexLock l(mu_);
    auto it = open_.find(handle);
    if (it == open_.end()) return InvalidArgumentError("unknown file handle");
    f = it->second;
  }
  if (prefetcher_ != nullptr) prefetcher_->Read(handle, offset, size);
  if (FailedItsDigest(handle, f.object_id)) {
    return CorruptError(f.path.str() +
                        ": this open file read bytes that failed the object's digest; open it "
                        "again to read it fetched again");
  }
  if (Status s = Revalidate(f); !s.ok()) return s;
  return f;
}

Result<OpenFile> FileSystem::StartPathRead(const ObjectPath& path, uint64_t offset, uint64_t size) {
  // A handle can be closed by eviction between lookup and read (only after
  // `implicit_open_limit` other files were opened meanwhile): open it again.
  for (int attempt = 0;; ++attempt) {
    auto h = ImplicitHandle(path);
    if (!h.ok()) return h.status();
    auto f = StartRead(*h, offset, size);
    // Revalidated and gone: the next read by path opens the new version.
    if (f.status().code() == StatusCode::kStale) ForgetImplicitHandle(path, *h);
    if (f.ok() || f.status().code() != StatusCode::kInvalidArgument || attempt > 0) return f;
  }
}

namespace {

// Whether a read was answered wholly from the cache's files (no fetch, no
// byte in memory): such a read leaves a remembered failure alone, as the
// zero-copy path always did.
bool AllInFiles(const Result<std::vector<ReadPiece>>& r) {
  if (!r.ok()) return false;
  for (const ReadPiece& p : *r) {
    if (p.slice() == nullptr) return false;
  }
  return true;
}

}  // namespace

bool FileSystem::ChecksAtEnd(const OpenFile& f, uint64_t offset, uint64_t size) const {
  return options_.verify_complete && size > 0 && offset < f.attr.size &&
         size >= f.attr.size - offset && f.attr.size > reader_.block_size();
}

void FileSystem::AfterCheck(const OpenFile& f, Deadline deadline, Result<std::vector<ReadPiece>> r,
                            ReadDone done) {
  if (!r.ok()) return done(std::move(r));
  auto held = std::make_shared<Result<std::vector<ReadPiece>>>(std::move(r));
  options_.verify_complete(f, deadline, [this, id = f.object_id, held, done](Status s) {
    if (s.code() == StatusCode::kCorrupt) NoteDigestFailure(id);
    if (!s.ok()) return done(std::move(s));
    done(std::move(*held));
  });
}

void FileSystem::NoteDigestFailure(const std::string& object_id) {
  const uint64_t last = next_handle_.load() - 1;  // every handle open now
  MutexLock l(mu_);
  if (digest_failed_.size() >= 4096) digest_failed_.clear();
  uint64_t& upto = digest_failed_[object_id];
  upto = std::max(upto, last);
}

bool FileSystem::FailedItsDigest(uint64_t handle, const std::string& object_id) {
  MutexLock l(mu_);
  if (digest_failed_.empty()) return false;
  auto it = digest_failed_.find(object_id);
  return it != digest_failed_.end() && handle <= it->second;
}

void FileSystem::Read(const FileRef& file, uint64_t offset, uint64_t size, ReadDone done) {
  const bool by_path = file.handle == 0;
  auto f = by_path ? StartPathRead(file.path, offset, size) : StartRead(file.handle, offset, size);
  if (!f.ok()) return done(f.status());
  const std::string& id = f->object_id;
  const Deadline deadline = NewDeadline();
  ReadDone finish = std::move(done);
  if (by_path) {
    // The object changed at the origin, or its bytes failed its digest: the
    // next read by path opens it again and reads the new version, or the
    // copy fetched again.
    finish = [this, path = f->path, id, finish](Result<std::vector<ReadPiece>> r) {
      StatusCode c = r.status().code();
      if (c == StatusCode::kStale || c == StatusCode::kCorrupt) ForgetImplicit(path, id);
      finish(std::move(r));
    };
  }
  reader_.ReadPieces(
      f->path, ObjectVersion{f->attr.size, f->attr.etag}, id, ByteRange{offset, size}, deadline,
      [this, f = *f, check = ChecksAtEnd(*f, offset, size), deadline,
       done = std::move(finish)](Result<std::vector<ReadPiece>> r) {
        if (!AllInFiles(r)) NoteResult(f.object_id, r.status());
        if (check) return AfterCheck(f, deadline, std::move(r), done);
        done(std::move(r));
      },
      // Only a read that must fetch is stopped by a recent failure.
      [this, &id] { return RecentFailure(id).value_or(Status::Ok()); });
}

std::optional<Status> FileSystem::RecentFailure(const std::string& object_id) {
  MutexLock l(mu_);
  auto it = failed_.find(object_id);
  if (it == failed_.end()) return std::nullopt;
  if (Clock::now() - it->second.first >= options_.failure_memo) {
    failed_.erase(it);
    return std::nullopt;
  }
  return it->second.second;
}

void FileSystem::NoteResult(const std::string& object_id, const Status& s) {
  bool undeliverable =
      s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
  MutexLock l(mu_);
  if (!undeliverable) {
    if (!failed_.empty()) failed_.erase(object_id);
    return;
  }
  if (failed_.size() >= 4096) failed_.clear();
  failed_[object_id] = {Clock::now(),
                        Status(s.code(),
                               s.message() + " (a read of this file failed moments ago; "
                                             "it is tried again after a few seconds)",
                               s.where(), s.retryable())};
}

int64_t FileSystem::MaxAge(uint64_t handle) const {
  MutexLock l(mu_);
  auto it = open_.find(handle);
  return it == open_.end() ? -1 : it->second.attr.max_age;
}

void FileSystem::Release(uint64_t handle) {
  {
    MutexLock l(mu_);
    auto it = open_.find(handle);
    if (it == open_.end()) return;
    open_.erase(it);
  }
  if (prefetcher_ != nullptr) prefetcher_->Released(handle);
}

Result<uint64_t> FileSystem::ImplicitHandle(const ObjectPath& path) {
  {
    MutexLock l(mu_);
    if (auto it = implicit_.find(path.str()); it != implicit_.end()) {
      implicit_lru_.splice(implicit_lru_.end(), implicit_lru_, it->second);  // most recent last
      return it->second->second;
    }
  }
  auto h = Open(path);
  if (!h.ok()) return h.status();
  std::vector<uint64_t> close;
  uint64_t handle = *h;
  {
    MutexLock l(mu_);
    auto [it, inserted] = implicit_.try_emplace(path.str());
    if (!inserted) {
      close.push_back(handle);  // another reader opened it meanwhile: use theirs
      handle = it->second->second;
    } else {
      it->second = implicit_lru_.insert(implicit_lru_.end(), {path.str(), handle});
    }
    while (implicit_lru_.size() > options_.implicit_open_limit) {
      close.push_back(implicit_lru_.front().second);
      implicit_.erase(implicit_lru_.front().first);
      implicit_lru_.pop_front();
    }
  }
  for (uint64_t c : close) Release(c);
  return handle;
}

void FileSystem::ForgetImplicit(const ObjectPath& path, const std::string& object_id) {
  uint64_t handle = 0;
  {
    MutexLock l(mu_);
    auto it = implicit_.find(path.str());
    if (it == implicit_.end()) return;
    handle = it->second->second;
    auto f = open_.find(handle);
    if (f != open_.end() && f->second.object_id != object_id) return;  // reopened meanwhile
    implicit_lru_.erase(it->second);
    implicit_.erase(it);
  }
  Release(handle);
}

void FileSystem::ForgetImplicitHandle(const ObjectPath& path, uint64_t handle) {
  {
    MutexLock l(mu_);
    auto it = implicit_.find(path.str());
    if (it == implicit_.end() || it->second->second != handle) return;  // reopened meanwhile
    implicit_lru_.erase(it->second);
    implicit_.erase(it);
  }
  Release(handle);
}

}  // namespace perch::core

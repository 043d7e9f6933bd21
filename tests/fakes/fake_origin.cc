#include "tests/fakes/fake_origin.h"

namespace perch::testing {

using core::Result;

void FakeOrigin::AddFile(const std::string& path, std::string bytes, int64_t mtime) {
  std::lock_guard<std::mutex> l(mu_);
  files_[path] = std::move(bytes);
  mtimes_[path] = mtime;
  for (auto p = core::ObjectPath::Parse(path)->Parent();; p = p.Parent()) {
    dirs_[p.str()] = true;
    if (p.IsRoot()) break;
  }
}

void FakeOrigin::AddDir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto p = *core::ObjectPath::Parse(path);; p = p.Parent()) {
    dirs_[p.str()] = true;
    if (p.IsRoot()) break;
  }
}

void FakeOrigin::FailWith(core::Status status) {
  std::lock_guard<std::mutex> l(mu_);
  fail_ = std::move(status);
}

void FakeOrigin::ShortBodies(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  short_ = on;
}

void FakeOrigin::NoStore(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  no_store_ = on;
}

void FakeOrigin::CorruptBodies(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  corrupt_ = on;
}

void FakeOrigin::OfferDigests(DigestFn digest) {
  std::lock_guard<std::mutex> l(mu_);
  digest_ = std::move(digest);
}

void FakeOrigin::MaxAge(int64_t seconds) {
  std::lock_guard<std::mutex> l(mu_);
  max_age_ = seconds;
}

void FakeOrigin::Hold(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  hold_ = on;
}

size_t FakeOrigin::Release() {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> l(mu_);
    run.swap(parked_);
  }
  for (auto& f : run) f();
  return run.size();
}

bool FakeOrigin::ReleaseOne() {
  std::function<void()> first;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (parked_.empty()) return false;
    first = std::move(parked_.front());
    parked_.erase(parked_.begin());
  }
  first();
  return true;
}

std::vector<std::string> FakeOrigin::ReadLog() {
  std::lock_guard<std::mutex> l(mu_);
  return read_log_;
}

void FakeOrigin::Complete(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (hold_) {
      parked_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void FakeOrigin::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(path);
  mtimes_.erase(path);
}

void FakeOrigin::FailStatsWith(core::Status status) {
  std::lock_guard<std::mutex> l(mu_);
  fail_stats_ = std::move(status);
}

void FakeOrigin::Stat(const core::ObjectPath& path, core::Deadline,
                      std::function<void(Result<core::FileAttr>)> done) {
  stats++;
  Result<core::FileAttr> r = core::NotFoundError(path.str() + " not found");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!fail_.ok()) {
      r = fail_;
    } else if (!fail_stats_.ok()) {
      r = fail_stats_;
    } else if (auto f = files_.find(path.str()); f != files_.end()) {
      r = core::FileAttr{false, f->second.size(), mtimes_[path.str()], ""};
      r->max_age = max_age_;
    } else if (dirs_.count(path.str())) {
      r = core::FileAttr{true, 0, 1700000000, ""};
    }
  }
  Complete([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

void FakeOrigin::List(const core::ObjectPath& path, core::Deadline,
                      std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  lists++;
  Result<std::vector<core::DirEntry>> r = core::NotFoundError(path.str() + " not found");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!fail_.ok()) {
      r = fail_;
    } else if (dirs_.count(path.str())) {
      std::vector<core::DirEntry> out;
      for (const auto& [p, bytes] : files_) {
        auto op = *core::ObjectPath::Parse(p);
        if (op.Parent() == path)
          out.push_back({std::string(op.Name()), {false, bytes.size(), mtimes_[p], ""}});
        if (op.Parent() == path) out.back().attr.max_age = max_age_;
      }
      for (const auto& [p, unused] : dirs_) {
        auto op = *core::ObjectPath::Parse(p);
        if (!op.IsRoot() && op.Parent() == path)
          out.push_back({std::string(op.Name()), {true, 0, 0, ""}});
      }
      r = std::move(out);
    } else if (files_.count(path.str())) {
      r = core::InvalidArgumentError("not a directory");
    }
  }
  Complete([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

void FakeOrigin::ReadRange(const core::ObjectPath& path, const core::ObjectVersion& version,
                           core::ByteRange range, core::Deadline,
                           std::function<void(Result<core::FetchedBytes>)> done) {
  reads++;
  Result<core::Bytes> r = core::NotFoundError(path.str() + " not found");
  bool may_store = true;
  int64_t max_age = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    may_store = !no_store_;
    max_age = max_age_;
    read_log_.push_back(path.str() + "@" + std::to_string(range.offset));
    if (!fail_.ok()) {
      r = fail_;
    } else if (auto f = files_.find(path.str()); f != files_.end()) {
      if (version.size != f->second.size()) {
        r = core::CorruptError("version mismatch");
      } else {
        uint64_t off = std::min<uint64_t>(range.offset, f->second.size());
        uint64_t len = std::min<uint64_t>(range.length, f->second.size() - off);
        if (short_ && len > 0) {
          r = core::CorruptError("short body");
        } else {
          r = f->second.substr(off, len);
          if (corrupt_ && len > 0) (*r)[0] = static_cast<char>((*r)[0] ^ 0x5a);
          bytes_read += len;
        }
      }
    }
  }
  Complete([done = std::move(done), r = std::move(r), may_store, max_age]() mutable {
    if (!r.ok()) return done(r.status());
    done(core::FetchedBytes{*std::move(r), may_store, {}, max_age, {}});
  });
}

void FakeOrigin::Digests(const core::ObjectPath& path, const core::ObjectVersion& version,
                         const std::vector<std::string>&, core::Deadline,
                         std::function<void(Result<std::vector<core::ObjectDigest>>)> done) {
  digest_asks++;
  Result<std::vector<core::ObjectDigest>> r = core::NotFoundError(path.str() + ": no digests");
  {
    std::lock_guard<std::mutex> l(mu_);
    auto f = files_.find(path.str());
    if (!fail_.ok()) {
      r = fail_;
    } else if (f != files_.end() && digest_ && f->second.size() == version.size) {
      r = digest_(f->second);
    }
  }
  Complete([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

}  // namespace perch::testing

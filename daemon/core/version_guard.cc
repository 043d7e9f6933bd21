#include "daemon/core/version_guard.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "daemon/core/log_escape.h"
#include "daemon/core/object_ids.h"

namespace perch::core {
namespace {

// The longest a fetch waits for the origin's answer (a PROPFIND of one path
// takes milliseconds; a hung origin must not hold reads its caches can serve).
constexpr std::chrono::seconds kAskFor{5};

}  // namespace

VersionGuard::VersionGuard(Origin& origin, Executor& executor, VersionGuardOptions options,
                           std::function<bool(const std::string&)> stored,
                           std::function<void(const ObjectPath&, const Result<FileAttr>&)> replaced)
    : origin_(origin),
      executor_(executor),
      options_(std::move(options)),
      stored_(std::move(stored)),
      replaced_(std::move(replaced)) {}

Status VersionGuard::Gone(const ObjectPath& path) {
  return StaleError(EscapeForLog(path.str()) +
                    " changed at the origin since it was opened; open it again");
}

void VersionGuard::BeforeFetch(const ObjectPath& path, const std::string& object_id,
                               Deadline deadline, std::function<void(Status)> go) {
  const auto now = Clock::now();
  bool known = false;
  {
    MutexLock l(mu_);
    auto it = versions_.find(object_id);
    if (it != versions_.end()) {
      Entry& e = it->second;
      if (e.gone) {
        l.Unlock();
        go(Gone(path));
        return;
      }
      if (e.asking) {
        e.waiters.push_back(std::move(go));
        return;
      }
      if (e.confirmed != Clock::time_point{} && now - e.confirmed < options_.interval) {
        l.Unlock();
        go(Status::Ok());
        return;
      }
      known = true;
    }
  }
  // Nothing of it stored (and never seen): this first block is of the
  // version the origin has now. `stored_` is asked outside mu_ (the catalog's
  // lock is its own).
  const bool ask = known || stored_(object_id);
  {
    MutexLock l(mu_);
    auto it = versions_.find(object_id);
    if (it == versions_.end()) {
      if (versions_.size() >= options_.max_entries) MakeRoom();
      it = versions_.try_emplace(object_id).first;
    }
    Entry& entry = it->second;
    if (entry.gone) {
      l.Unlock();
      go(Gone(path));
      return;
    }
    if (entry.asking) {  // another fetch started asking meanwhile
      entry.waiters.push_back(std::move(go));
      return;
    }
    const bool fresh =
        entry.confirmed != Clock::time_point{} && now - entry.confirmed < options_.interval;
    if (!ask || fresh) {  // fresh: confirmed by another fetch meanwhile
      if (!fresh) entry.confirmed = now;
      l.Unlock();
      go(Status::Ok());
      return;
    }
    entry.asking = true;
    entry.waiters.push_back(std::move(go));
  }
  confirmations_++;
  // Half of what is left to the read, at most kAskFor, so that an origin
  // that does not answer leaves time for the fetch itself.
  const Clock::duration left = std::max(deadline - Clock::now(), Clock::duration::zero());
  const Clock::duration at_least = std::min<Clock::duration>(left, std::chrono::seconds(1));
  const Deadline ask_by =
      Clock::now() + std::min<Clock::duration>(std::max(left / 2, at_least), kAskFor);
  origin_.Stat(path, ask_by, [this, path, object_id](Result<FileAttr> r) {
    Answered(path, object_id, std::move(r));
  });
}

void VersionGuard::Answered(const ObjectPath& path, const std::string& object_id,
                            Result<FileAttr> now) {
  bool gone = false;
  bool confirmed = false;
  if (now.ok()) {
    gone = now->is_dir || ObjectIdFor(options_.federation_id, path, *now) != object_id;
    confirmed = !gone;
  } else if (now.status().code() == StatusCode::kNotFound) {
    gone = true;
  }  // else: not asked in time; the fetch goes on unconfirmed
  std::vector<std::function<void(Status)>> waiters;
  {
    MutexLock l(mu_);
    auto it = versions_.find(object_id);
    if (it != versions_.end()) {
      Entry& e = it->second;
      waiters = std::move(e.waiters);
      e.waiters.clear();
      e.asking = false;
      e.gone = gone;
      // Unanswered counts as asked too: an origin that is down or hung is
      // not asked again, nor waited for, before every fetch of the interval.
      if (!gone) e.confirmed = Clock::now();
    }
  }
  if (gone) {
    replacements_++;
    if (now.ok()) {
      spdlog::warn(
          "cache: {} was replaced at the origin (now {} bytes, modified {}); readers of the old "
          "version get ESTALE, new opens read the new one",
          EscapeForLog(path.str()), now->size, now->mtime);
    } else {
      spdlog::warn("cache: {} is gone from the origin; readers of it get ESTALE",
                   EscapeForLog(path.str()));
    }
    executor_.Post([this, path, now] { replaced_(path, now); });
  } else if (!confirmed) {
    spdlog::debug("cache: could not confirm the version of {}: {}", EscapeForLog(path.str()),
                  EscapeForLog(now.status().ToString()));
  }
  const Status verdict = gone ? Gone(path) : Status::Ok();
  for (auto& go : waiters) go(verdict);
}

void VersionGuard::MakeRoom() {
  // An eighth at a time: one walk of the map per many new versions.
  size_t target = options_.max_entries - options_.max_entries / 8;
  for (auto it = versions_.begin(); it != versions_.end() && versions_.size() > target;) {
    if (it->second.asking) {
      ++it;
    } else {
      it = versions_.erase(it);
    }
  }
}

}  // namespace perch::core

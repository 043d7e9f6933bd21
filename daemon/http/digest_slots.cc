#include "daemon/http/digest_slots.h"

#include <utility>

namespace perch::http {

void DigestSlots::Acquire(const std::string& origin, std::function<void()> go) {
  {
    core::MutexLock l(mu_);
    Origin& o = origins_[origin];
    if (o.in_flight >= per_origin_) {
      o.waiting.push_back(std::move(go));
      return;
    }
    o.in_flight++;
  }
  go();
}

void DigestSlots::Release(const std::string& origin) {
  std::function<void()> next;
  {
    core::MutexLock l(mu_);
    auto it = origins_.find(origin);
    if (it == origins_.end()) return;
    Origin& o = it->second;
    if (!o.waiting.empty()) {
      next = std::move(o.waiting.front());  // the slot passes to the next in line
      o.waiting.pop_front();
    } else if (--o.in_flight == 0) {
      origins_.erase(it);
    }
  }
  if (next) next();
}

size_t DigestSlots::InFlight(const std::string& origin) {
  core::MutexLock l(mu_);
  auto it = origins_.find(origin);
  return it == origins_.end() ? 0 : it->second.in_flight;
}

}  // namespace perch::http

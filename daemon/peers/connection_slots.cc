#include "daemon/peers/connection_slots.h"

#include "daemon/core/check.h"

namespace perch::peers {

ConnectionSlots::ConnectionSlots(size_t total, size_t per_owner)
    : total_(total), per_owner_(per_owner) {
  PERCH_CHECK(per_owner >= 1 && per_owner <= total);
}

ConnectionSlots::Admission ConnectionSlots::Acquire(Owner owner) {
  if (held_by(owner) >= per_owner_) return Admission::kOwnerFull;
  if (held_ >= total_) return Admission::kFull;
  ++held_;
  ++by_owner_[owner];
  return Admission::kAdmitted;
}

void ConnectionSlots::Release(Owner owner) {
  auto it = by_owner_.find(owner);
  PERCH_CHECK(it != by_owner_.end() && held_ > 0);
  --held_;
  if (--it->second == 0) by_owner_.erase(it);
}

size_t ConnectionSlots::held_by(Owner owner) const {
  auto it = by_owner_.find(owner);
  return it == by_owner_.end() ? 0 : it->second;
}

}  // namespace perch::peers

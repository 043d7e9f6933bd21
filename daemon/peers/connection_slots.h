// ConnectionSlots: how the HTTP endpoint shares its connections among the
// node's users, so that one local user cannot lock every other one out
// (issue 29: 64 slow connections of `nobody` took every slot and every other
// request got 503).
//
// Each connection is charged to its owner, the uid that owns the peer socket
// (peer_credentials.h), and one owner may hold at most `per_owner` of the
// `total` slots at once. Connections whose owner cannot be learned (not on
// loopback, or the kernel did not say) are charged together to one
// "unknown" owner with the same share, so remote clients (with
// --http-allow-remote) cannot take the local users' slots either.
//
// Root is an owner like any other: the share is about fairness, not
// privilege, and a runaway root process (a monitoring probe, a plugin run as
// root) must not starve the jobs either.
//
// Not thread-safe: the endpoint calls it under its own mutex.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <optional>

namespace perch::peers {

class ConnectionSlots {
 public:
  // A uid, or nullopt for "unknown".
  using Owner = std::optional<uid_t>;
  enum class Admission { kAdmitted, kFull, kOwnerFull };

  // REQUIRES: 1 <= per_owner <= total.
  ConnectionSlots(size_t total, size_t per_owner);

  // Takes a slot for a connection of `owner`: kAdmitted (Release it later);
  // kOwnerFull when `owner` holds per_owner slots already; else kFull when
  // all `total` are taken. Nothing is taken unless kAdmitted.
  [[nodiscard]] Admission Acquire(Owner owner);
  // Gives back a slot that Acquire gave `owner`.
  void Release(Owner owner);

  // Slots taken, in all and by `owner`.
  size_t held() const { return held_; }
  size_t held_by(Owner owner) const;

 private:
  const size_t total_;
  const size_t per_owner_;
  size_t held_ = 0;
  std::map<Owner, size_t> by_owner_;  // owners holding at least one slot
};

}  // namespace perch::peers

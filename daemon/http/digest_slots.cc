#include "daemon/http/digest_slots.h"

#include <utility>
#include <vector>

namespace perch::http {

void DigestSlots::Acquire(const Key& key, std::function<void()> go) {
  {
    core::MutexLock l(mu_);
    Namespace& n = namespaces_[key.ns];
    auto s = servers_.find(key.server);
    if (n.in_flight >= per_namespace_ || (s != servers_.end() && s->second >= per_server_)) {
      n.waiting[key.server].push_back(std::move(go));
      n.waiting_count++;
      return;
    }
    n.in_flight++;
    servers_[key.server]++;
  }
  go();
}

std::function<void()> DigestSlots::NextLocked(Namespace& n) {
  if (n.in_flight >= per_namespace_) return nullptr;
  for (auto it = n.waiting.begin(); it != n.waiting.end(); ++it) {
    auto s = servers_.find(it->first);
    if (s != servers_.end() && s->second >= per_server_) continue;  // busy: another may go
    std::function<void()> go = std::move(it->second.front());
    servers_[it->first]++;
    n.in_flight++;
    n.waiting_count--;
    it->second.pop_front();
    if (it->second.empty()) n.waiting.erase(it);
    return go;
  }
  return nullptr;
}

void DigestSlots::Release(const Key& key) {
  std::vector<std::function<void()>> next;
  {
    core::MutexLock l(mu_);
    if (auto s = servers_.find(key.server); s != servers_.end() && --s->second == 0) {
      servers_.erase(s);
    }
    if (auto it = namespaces_.find(key.ns); it != namespaces_.end() && it->second.in_flight > 0) {
      it->second.in_flight--;
    }
    // The freed slots go to the first waiters that can use them: this
    // namespace's first, then any namespace's waiting for the freed server.
    for (bool own : {true, false}) {
      for (auto& [ns, n] : namespaces_) {
        if ((ns == key.ns) != own) continue;
        while (auto go = NextLocked(n)) next.push_back(std::move(go));
      }
    }
    for (auto it = namespaces_.begin(); it != namespaces_.end();) {
      it = it->second.in_flight == 0 && it->second.waiting_count == 0 ? namespaces_.erase(it)
                                                                      : std::next(it);
    }
  }
  for (auto& go : next) go();
}

size_t DigestSlots::InFlight(const std::string& ns) {
  core::MutexLock l(mu_);
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? 0 : it->second.in_flight;
}

size_t DigestSlots::InFlightAt(const std::string& server) {
  core::MutexLock l(mu_);
  auto it = servers_.find(server);
  return it == servers_.end() ? 0 : it->second;
}

}  // namespace perch::http

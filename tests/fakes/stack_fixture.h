// A node's cache stack over fakes, built the way perchd builds it: through
// core::CacheStack, with one mount ("fed") of a FakeOrigin and as many more
// as a test adds. Rebuilding keeps the index and the block store, as a
// daemon restart does. Every core test that needs more than one component
// builds through this, so that they test the wiring perchd runs.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "daemon/core/cache_stack.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"

namespace perch::testing {

struct StackConfig {
  core::CatalogOptions catalog;
  core::SchedulerOptions scheduler;
  uint64_t block_size = 1000;
  bool prefetch = false;
  core::PrefetchOptions prefetch_options;
  core::NamespaceOptions names;
  std::chrono::milliseconds op_timeout{2000};
  std::chrono::milliseconds version_check_interval{5000};
  bool first_mount = true;  // false: the test adds every mount itself
  core::DigestHasherFactory digest_hasher;
  bool verify_complete_objects = false;
};

class StackFixture {
 public:
  // (Re)builds the stack and its first mount ("fed", of `origin`, unless
  // config.first_mount is false).
  // REQUIRES: nothing of the previous stack is in use.
  core::Status Build(const StackConfig& config = StackConfig()) {
    stack_.reset();
    config_ = config;
    core::StackOptions o;
    o.catalog = config.catalog;
    o.scheduler = config.scheduler;
    o.reader.block_size = config.block_size;
    o.prefetch = config.prefetch;
    o.prefetch_options = config.prefetch_options;
    o.version_check_interval = config.version_check_interval;
    o.digest_hasher = config.digest_hasher;
    o.verify_complete_objects = config.verify_complete_objects;
    o.flush_period =
        std::chrono::milliseconds(0);  // the inline executor would run it at once, forever
    stack_ = std::make_unique<core::CacheStack>(index, store, disk, disk, o);
    if (core::Status s = stack_->Open(); !s.ok()) return s;
    mount_ = nullptr;
    if (!config.first_mount) return core::Status::Ok();
    auto m = AddMount(origin, "fed");
    if (!m.ok()) return m.status();
    mount_ = *m;
    return core::Status::Ok();
  }

  // Adds a mount of another federation, at `mountpoint` (for NodeControl).
  core::Result<core::Mount*> AddMount(core::Origin& o, const std::string& federation_id,
                                      const std::string& mountpoint = "",
                                      const core::ObjectPath& prefix = core::ObjectPath()) {
    core::MountSpec spec;
    spec.federation_id = federation_id;
    spec.federation_prefix = prefix;
    spec.origin = &o;
    spec.mountpoint = mountpoint;
    spec.names = config_.names;
    spec.op_timeout = config_.op_timeout;
    return stack_->AddMount(std::move(spec));
  }

  core::CacheStack& stack() { return *stack_; }
  core::CacheCatalog& catalog() { return stack_->catalog(); }
  core::Mount& mount() { return *mount_; }

  FakeOrigin origin;
  MemIndex index;
  MemBlockStore store;
  InlineExecutor disk;

 private:
  StackConfig config_;
  std::unique_ptr<core::CacheStack> stack_;
  core::Mount* mount_ = nullptr;
};

}  // namespace perch::testing

// BlockListener: what BlockReader tells about the blocks it stores, touches
// and drops, and what it asks before probing the store. The catalog
// (cache_catalog.h) is the daemon's listener; tests record the calls.
//
// This is a seam of its own so that BlockReader depends on the contract, not
// on the catalog that implements it.
//
// Thread-safety: called from any thread (FUSE workers on hits, the disk
// executor after a write); an implementation must be safe for that and must
// not call back into the BlockReader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/block_store.h"
#include "daemon/core/object_digest.h"
#include "daemon/core/status.h"
#include "daemon/core/types.h"

namespace perch::core {

// What BlockReader tells about blocks as it uses them.
class BlockListener {
 public:
  virtual ~BlockListener() = default;
  // Block `key` of object `path` at `version` is now in the store.
  virtual void Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
                      const ObjectVersion& version) = 0;
  // Several blocks are now in the store (a write batch): as Stored for each,
  // which is what this does unless a listener records them together.
  struct StoredBlock {
    BlockKey key;
    uint64_t length = 0;
    ObjectPath path;
    ObjectVersion version;
  };
  virtual void StoredMany(const std::vector<StoredBlock>& blocks) {
    for (const StoredBlock& b : blocks) Stored(b.key, b.length, b.path, b.version);
  }
  virtual void Touched(const BlockKey& key, uint64_t length) = 0;
  virtual void Dropped(const BlockKey& key) = 0;
  // Writing block `key` (`length` bytes) failed with `why` (kNoSpace: the
  // disk is full). Runs on the disk executor; may evict before returning.
  virtual void StoreFailed(const BlockKey& key, uint64_t length, const Status& why) {
    (void)key, (void)length, (void)why;
  }
  // The bytes fetched of object `object_id` (an object of one block) matched
  // `digests`, stated by a server other than the one that sent them
  // (FetchedBytes::vouched).
  virtual void Vouched(const std::string& object_id, const std::vector<ObjectDigest>& digests) {
    (void)object_id, (void)digests;
  }
  // The bytes fetched of object `object_id` (an object of one block) were
  // delivered with no server but their sender stating a digest, for reason
  // `why` (FetchedBytes::unverified).
  virtual void Unverified(const std::string& object_id, const std::string& why) {
    (void)object_id, (void)why;
  }
  // True if block `key` is known to be in the store (prefetch skips it).
  virtual bool Contains(const BlockKey& key) const = 0;
  // False only if block `key` is certainly not in the store, so that a read
  // goes straight to the fetch instead of probing the store for a file that
  // cannot be there (a block stored meanwhile is still in the reader's
  // memory until Stored() has returned). True: look in the store.
  virtual bool MayContain(const BlockKey& key) const {
    (void)key;
    return true;
  }
};

}  // namespace perch::core

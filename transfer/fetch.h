// What one fetch path (through perchd, or straight from the federation)
// reports about a download it completed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/object_digest.h"

namespace perch::transfer {

struct FetchReport {
  uint64_t file_bytes = 0;     // the object's size, all written
  uint64_t network_bytes = 0;  // body bytes received, resent ones included
  uint64_t resumes = 0;        // requests that continued a cut transfer
  uint64_t failovers = 0;      // moves to another server after a failure
  std::string via;             // "perchd" or "federation"
  std::string server;          // perchd's endpoint, or the server that sent the last bytes
  // The object's digests as the fetch path states them (perchd's Digest
  // header, or a federation server's), raw; empty if none was offered.
  std::vector<core::ObjectDigest> digests;
};

}  // namespace perch::transfer

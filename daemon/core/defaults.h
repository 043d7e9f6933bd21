// The defaults of perchd's main settings, each written here once. Core owns
// them (it cuts objects into blocks, answers within the op timeout and keeps
// the fetch budget); the option structs of core, the adapters, the config
// table (daemon/config_keys.h), the tests and the docs take them from here.
//
// Constants only: perch_config includes this without linking perch_core.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace perch::core {

// Objects are cached in blocks of this many bytes (the last block of an
// object may be short; an object of one block is a "small" object).
inline constexpr uint64_t kDefaultBlockSize = uint64_t{4} << 20;

// Every filesystem request is answered within this; a read that the
// federation cannot serve in time fails (EIO) rather than wait longer.
inline constexpr std::chrono::milliseconds kDefaultOpTimeout{30000};

// Fetches in flight from the federation, all classes together (the demand
// class first; prefetch gets a share, SchedulerOptions::background_share).
inline constexpr size_t kDefaultMaxRequestsInFlight = 256;

}  // namespace perch::core

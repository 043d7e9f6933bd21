// perchd's configuration: defaults, then a TOML file (--config), then flags.
// Parsing throws ConfigError with a message that names the bad key or flag
// and the accepted form; main turns it into one line and exit status 2.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace perch {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DaemonConfig {
  std::string federation_url;
  std::string mountpoint;
  std::string cache_dir = "/var/cache/perch";
  uint64_t cache_size = 10ULL << 30;
  uint64_t block_size = 4ULL << 20;
  std::string log_level = "info";
  bool foreground = false;
  std::string ca_file;        // extra CA bundle for the federation's https servers
  std::string token_file;     // explicit bearer token file
  std::chrono::milliseconds op_timeout{30000};  // every FUSE request is answered within this
  unsigned fuse_threads = 32;
  size_t max_requests_in_flight = 256;
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  std::chrono::seconds dir_ttl{300};
  std::chrono::seconds file_ttl{3600};
  std::chrono::seconds negative_ttl{30};
  bool prefetch = true;                    // read-ahead, directory prefetch, hints
  bool fuse_no_open = true;                // let the kernel open files itself when it can
  uint64_t readahead = 64ULL << 20;        // largest read-ahead window per open file
  size_t prefetch_dir_max_entries = 4096;  // larger directories are not prefetched
  size_t hint_window = 512;                // hinted files fetched ahead of the reader
  uint64_t max_bytes_in_flight = 1ULL << 30;
  std::string control_address;  // "unix:PATH" or "tcp:HOST:PORT"; "" = the default socket
  std::string metrics_address;  // "HOST:PORT" for Prometheus; "" = off
};

// "4M", "10GiB", "512k", "1048576" -> bytes (binary units). Throws ConfigError.
uint64_t ParseSize(const std::string& text, const std::string& what);

// "30s", "500ms", "2m", "1h", "45" (seconds) -> milliseconds. Throws ConfigError.
std::chrono::milliseconds ParseDuration(const std::string& text, const std::string& what);

// Applies the TOML file at `path` over `config`. Unknown keys are errors.
void ApplyConfigFile(const std::string& path, DaemonConfig* config);

// The same for TOML text (`name` stands for the file in messages); for tests and fuzzing.
void ApplyConfigString(std::string_view text, const std::string& name, DaemonConfig* config);

// Checks cross-field rules (watermarks, block size bounds). Throws ConfigError.
void Validate(const DaemonConfig& config);

}  // namespace perch

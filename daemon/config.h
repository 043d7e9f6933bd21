// perchd's configuration: defaults, then a TOML file (--config), then flags.
// Parsing throws ConfigError with a message that names the bad key or flag
// and the accepted form; main turns it into one line and exit status 2.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace perch {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The HTTP endpoint's connections at most (then 503).
inline constexpr size_t kHttpConnections = 64;

// One federation mounted ([[mount]] in TOML). Every mount shares the cache
// (directory, quota, LRU), the fetch budget and the control socket.
struct MountConfig {
  std::string federation_url;
  std::string mountpoint;
  std::string token_file;  // "" = the top-level token_file
  // [mount.tokens]: token files per federation path prefix, before the top-level [tokens].
  std::map<std::string, std::string> namespace_tokens;
  bool allow_nonempty_mountpoint = false;  // or the top-level one
};

struct DaemonConfig {
  // The one-mount form (top-level keys, positional arguments) ...
  std::string federation_url;
  std::string mountpoint;
  // ... or [[mount]] tables; not both.
  std::vector<MountConfig> mounts;
  std::string cache_dir = "/var/cache/perch";
  uint64_t cache_size = 10ULL << 30;
  uint64_t block_size = 4ULL << 20;
  std::string log_level = "info";
  bool foreground = false;
  std::string ca_file;     // extra CA bundle for the federation's https servers
  std::string token_file;  // explicit bearer token file
  // Token file per federation path prefix ([tokens] "/ns" = "/etc/perch/ns.token"): used
  // only for namespaces at or below that prefix, before any other token source.
  std::map<std::string, std::string> namespace_tokens;
  // Files of namespaces that require a token are readable by root and this
  // group only (mode 0440, directories 0550); "" = root only.
  std::string protected_group;
  std::chrono::milliseconds op_timeout{30000};  // every FUSE request is answered within this
  unsigned fuse_threads = 32;
  // Network loops (threads that run HTTP transfers and answer the reads they
  // serve); 0 = one per 2 cores, 2 to 8 (NetThreadsOf).
  unsigned net_threads = 0;
  size_t max_requests_in_flight = 256;
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  std::chrono::seconds dir_ttl{300};
  std::chrono::seconds file_ttl{3600};
  std::chrono::seconds negative_ttl{30};
  bool prefetch = true;          // read-ahead, directory prefetch, hints
  bool fuse_no_open = true;      // let the kernel open files itself when it can
  bool fuse_passthrough = true;  // the kernel reads complete cached large objects itself
  // Ask for the digest of each object read whole (Want-Digest) and deliver it
  // only if it matches. Off by default: XRootD 5.5 crashes or answers 404
  // under concurrent Want-Digest requests (docs/quirks.md).
  bool verify_digests = false;
  // A partly cached object's version is confirmed with the origin before more
  // of it is fetched once its last confirmation is this old (0: every time).
  std::chrono::milliseconds version_check_interval{5000};
  // The background scrub: cached blocks read again and checked against their
  // CRC32C (and whole objects against a recorded digest) at this many bytes
  // a second; 0 = off. It begins scrub_start_delay after start.
  uint64_t scrub_rate = 4ULL << 20;
  std::chrono::seconds scrub_start_delay{300};
  uint64_t fuse_read_ahead = 1ULL << 20;   // the mount's kernel read-ahead; 0 = kernel default
  uint64_t readahead = 64ULL << 20;        // largest read-ahead window per open file
  size_t prefetch_dir_max_entries = 4096;  // larger directories are not prefetched
  size_t hint_window = 512;                // hinted files fetched ahead of the reader
  uint64_t max_bytes_in_flight = 1ULL << 30;
  std::string control_address;  // "unix:PATH" or "tcp:LOOPBACK:PORT"; "" = the default socket
  std::string control_group;    // group owning the control socket (may use perchctl); "" = perchd's
  std::string metrics_address;  // "IP:PORT" for Prometheus; "" = off
  bool metrics_allow_remote = false;      // metrics on a non-loopback address (no authentication)
  std::string http_address;               // "IP:PORT" for the HTTP endpoint; "" = off
  bool http_allow_remote = false;         // the endpoint on a non-loopback address
  size_t http_connections_per_user = 16;  // of the endpoint's kHttpConnections, per peer uid
  std::chrono::milliseconds http_request_timeout{10000};  // a request arrives whole within this
  bool allow_nonempty_mountpoint = false;  // mount over (and hide) a directory's entries
};

// "4M", "10GiB", "512k", "1048576" -> bytes (binary units). Throws ConfigError.
uint64_t ParseSize(const std::string& text, const std::string& what);

// "30s", "500ms", "2m", "1h", "45" (seconds) -> milliseconds. Throws ConfigError.
std::chrono::milliseconds ParseDuration(const std::string& text, const std::string& what);

// Applies the TOML file at `path` over `config`. Unknown keys are errors.
void ApplyConfigFile(const std::string& path, DaemonConfig* config);

// The same for TOML text (`name` stands for the file in messages); for tests and fuzzing.
void ApplyConfigString(std::string_view text, const std::string& name, DaemonConfig* config);

// Adds one "--namespace-token /PREFIX=FILE" to `out` (the [tokens] table on
// the command line). Throws ConfigError for anything else.
void AddNamespaceTokenFlag(const std::string& arg, std::map<std::string, std::string>* out);

// The mounts to serve: `mounts`, or the one-mount form as a list of one.
std::vector<MountConfig> MountsOf(const DaemonConfig& config);

// Every top-level key a configuration file may hold, sorted: the TOML reader's
// own list ("mount" and "tokens" are tables).
std::vector<std::string> ConfigKeys();

// Checks cross-field rules (each mount complete, mountpoints and federations
// distinct, watermarks, block size bounds, control and metrics
// addresses on loopback unless allowed). Throws ConfigError.
void Validate(const DaemonConfig& config);

// The network loops perchd runs: net_threads, or when 0 one per 2 of `cores`,
// at least 2 (a second loop gains even on 2 cores: one runs while the other
// waits) and at most 8.
size_t NetThreadsOf(const DaemonConfig& config, unsigned cores);

}  // namespace perch

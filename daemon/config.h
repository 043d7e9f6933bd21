// perchd's configuration: defaults, then a TOML file (--config), then flags,
// every setting from one table (daemon/config_keys.h).
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

#include "daemon/config_keys.h"

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

// Every setting: the fields of PERCH_CONFIG_KEYS (daemon/config_keys.h), with
// their defaults, and the file's tables.
struct DaemonConfig {
#define PERCH_CONFIG_FIELD(kind, type, field, key, flag, value, unset, help) type field = value;
  PERCH_CONFIG_KEYS(PERCH_CONFIG_FIELD)
#undef PERCH_CONFIG_FIELD
  // [[mount]] tables, instead of the one-mount form (federation, mountpoint); not both.
  std::vector<MountConfig> mounts;
  // Token file per federation path prefix ([tokens] "/ns" = "/etc/perch/ns.token", or
  // --namespace-token /ns=FILE): used only for namespaces at or below that prefix, before
  // any other token source.
  std::map<std::string, std::string> namespace_tokens;
};

// One row of PERCH_CONFIG_KEYS as data, for the code that walks every
// setting: the command line, --help and the docs' table.
struct ConfigKey {
  std::string_view key;    // TOML key; "" = command line only
  std::string_view flag;   // CLI11 option name(s); "" = file only
  std::string_view kind;   // "Str", "Size", "Time", "Count", "Real" or "Flag"
  std::string_view unset;  // what the default means, or ""
  std::string_view help;
  // Sets the field from `text` as written after the flag ("4M", "30s";
  // "true" or "false" for a Flag). Throws ConfigError naming `what`.
  void (*set)(DaemonConfig& config, const std::string& text, const std::string& what);
  // The default as the docs write it: `unset` if given, else the value ("4M", "30s").
  std::string (*default_text)();

  // A switch: its flag takes no value.
  bool is_switch() const { return kind == "Flag"; }
  // The value a switch's flag sets: false for --no-..., else true.
  bool SwitchValue() const { return flag.find("--no-") == std::string_view::npos; }
  // The option's long name ("--cache-size" of "-f,--foreground" too), for messages.
  std::string_view LongFlag() const { return flag.substr(flag.rfind(',') + 1); }
};

// Every row of PERCH_CONFIG_KEYS, in its order.
const std::vector<ConfigKey>& ConfigKeyTable();

// docs/configuration.md's table of the file's keys (the rows with a key), one
// line each: | `key` | `--flag` | default | help |. ConfigDocTest holds the
// docs to it.
std::string ConfigKeysMarkdown();

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

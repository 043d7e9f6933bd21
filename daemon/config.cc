#include "daemon/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "proto/control_address.h"

namespace perch {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Adds `prefix` -> `file` (a trailing '/' of the prefix dropped); false if
// the prefix is not a federation path or the file is "".
bool AddNamespaceToken(std::string prefix, const std::string& file,
                       std::map<std::string, std::string>* out) {
  if (prefix.empty() || prefix.front() != '/' || file.empty()) return false;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  (*out)[prefix] = file;
  return true;
}

// Reads a table of "/prefix" = "/token/file" (`what` names it in errors).
void ParseTokens(const toml::node& node, const std::string& path, const std::string& what,
                 std::map<std::string, std::string>* out) {
  const toml::table* tokens = node.as_table();
  if (tokens == nullptr) {
    throw ConfigError("config " + path + ": '" + what +
                      "' must be a table of \"/prefix\" = \"/token/file\"");
  }
  for (const auto& [k, v] : *tokens) {
    auto file = v.value<std::string>();
    std::string prefix(k.str());
    if (!file || !AddNamespaceToken(prefix, *file, out)) {
      throw ConfigError("config " + path + ": " + what + ".\"" + prefix +
                        "\" must map a federation path such as \"/ns\" to a token file");
    }
  }
}

// One [[mount]] table (`n` counts from 1, for errors).
MountConfig ParseMount(const toml::node& node, const std::string& path, size_t n) {
  const std::string where = "config " + path + ": mount #" + std::to_string(n);
  const toml::table* t = node.as_table();
  if (t == nullptr) throw ConfigError(where + " must be a table ([[mount]])");
  static const std::set<std::string> kKnown = {"federation", "mountpoint", "token_file", "tokens",
                                               "allow_nonempty_mountpoint"};
  for (const auto& [k, v] : *t) {
    if (!kKnown.count(std::string(k.str()))) {
      throw ConfigError(
          where + ": unknown key '" + std::string(k.str()) +
          "' (federation, mountpoint, token_file, tokens, allow_nonempty_mountpoint)");
    }
  }
  MountConfig m;
  auto str = [&](const char* key, std::string* out) {
    if (auto v = (*t)[key]) {
      auto s = v.value<std::string>();
      if (!s) throw ConfigError(where + ": '" + key + "' must be a string");
      *out = *s;
    }
  };
  str("federation", &m.federation_url);
  str("mountpoint", &m.mountpoint);
  str("token_file", &m.token_file);
  if (auto v = (*t)["tokens"]) ParseTokens(*v.node(), path, "mount.tokens", &m.namespace_tokens);
  if (auto v = (*t)["allow_nonempty_mountpoint"]) {
    auto b = v.value<bool>();
    if (!b) throw ConfigError(where + ": 'allow_nonempty_mountpoint' must be true or false");
    m.allow_nonempty_mountpoint = *b;
  }
  if (m.federation_url.empty() || m.mountpoint.empty()) {
    throw ConfigError(where + " needs both 'federation' and 'mountpoint'");
  }
  return m;
}

}  // namespace

uint64_t ParseSize(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 18) {
    throw ConfigError(what + ": '" + text + "' is not a size (examples: 4M, 10GiB, 1048576)");
  }
  uint64_t n = std::stoull(text.substr(0, i));
  std::string unit = Lower(text.substr(i));
  uint64_t mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    mult = 1ULL << 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    mult = 1ULL << 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    mult = 1ULL << 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    mult = 1ULL << 40;
  } else {
    throw ConfigError(what + ": unknown unit '" + text.substr(i) + "' in '" + text +
                      "' (use K, M, G or T)");
  }
  if (n > UINT64_MAX / mult) throw ConfigError(what + ": '" + text + "' is too large");
  return n * mult;
}

std::chrono::milliseconds ParseDuration(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 12)
    throw ConfigError(what + ": '" + text + "' is not a duration (examples: 30s, 500ms, 2m)");
  int64_t n = std::stoll(text.substr(0, i));
  std::string unit = Lower(text.substr(i));
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit.empty() || unit == "s") return std::chrono::seconds(n);
  if (unit == "m" || unit == "min") return std::chrono::minutes(n);
  if (unit == "h") return std::chrono::hours(n);
  throw ConfigError(what + ": unknown unit in '" + text + "' (use ms, s, m or h)");
}

namespace {

// Applies a parsed TOML table; `path` names it in messages.
void ApplyTable(const toml::table& t, const std::string& path, DaemonConfig* c,
                std::vector<std::string>* keys = nullptr);

ConfigError ParseFailure(const std::string& path, const toml::parse_error& e) {
  const auto& where = e.source().begin;
  return ConfigError("config " + path + ":" + std::to_string(where.line) + ":" +
                     std::to_string(where.column) + ": " + std::string(e.description()));
}

}  // namespace

void ApplyConfigFile(const std::string& path, DaemonConfig* c) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw ParseFailure(path, e);
  }
  ApplyTable(t, path, c);
}

void ApplyConfigString(std::string_view text, const std::string& name, DaemonConfig* c) {
  toml::table t;
  try {
    t = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    throw ParseFailure(name, e);
  }
  ApplyTable(t, name, c);
}

std::vector<std::string> ConfigKeys() {
  DaemonConfig c;
  std::vector<std::string> keys;
  ApplyTable(toml::table{}, "(keys)", &c, &keys);
  return keys;
}

namespace {

// Reads typed keys of one TOML table. Every key a Read names is known; a key
// no Read named is an error (Finish), so the reads below are the one list of
// keys a configuration file may hold.
class TableReader {
 public:
  TableReader(const toml::table& t, const std::string& path) : t_(t), path_(path) {}

  void Str(const char* key, std::string* out) {
    if (auto n = Node(key)) {
      auto s = n.value<std::string>();
      if (!s) Fail(key, "must be a string");
      *out = *s;
    }
  }
  // Sizes may be strings ("4M") or integers (bytes). value_exact, not
  // value<int64_t>: toml++ converts a float such as 2e33 to int64_t with an
  // undefined cast (found by tests/fuzz/config_fuzz).
  void Size(const char* key, uint64_t* out) {
    if (auto n = Node(key)) {
      if (auto i = n.value_exact<int64_t>(); i && *i >= 0) {
        *out = static_cast<uint64_t>(*i);
      } else if (auto s = n.value<std::string>()) {
        *out = ParseSize(*s, std::string("config ") + key);
      } else {
        Fail(key, "must be a size such as \"4M\"");
      }
    }
  }
  // Durations may be strings ("30s") or integers (seconds), bounded like
  // ParseDuration's 12 digits so that seconds -> ms cannot overflow.
  template <typename Duration>
  void Time(const char* key, Duration* out) {
    if (auto n = Node(key)) {
      std::chrono::milliseconds ms;
      if (auto i = n.value_exact<int64_t>(); i && *i >= 0 && *i < 1000000000000) {
        ms = std::chrono::seconds(*i);
      } else if (auto s = n.value<std::string>()) {
        ms = ParseDuration(*s, std::string("config ") + key);
      } else {
        Fail(key, "must be a duration such as \"30s\"");
      }
      *out = std::chrono::duration_cast<Duration>(ms);
    }
  }
  void Real(const char* key, double* out) {
    if (auto n = Node(key)) {
      auto d = n.value<double>();
      if (!d) Fail(key, "must be a number");
      *out = *d;
    }
  }
  template <typename Int>
  void Count(const char* key, Int* out) {
    if (auto n = Node(key)) {
      auto i = n.value_exact<int64_t>();
      if (!i || *i <= 0) Fail(key, "must be a positive integer");
      *out = static_cast<Int>(*i);
    }
  }
  void Flag(const char* key, bool* out) {
    if (auto n = Node(key)) {
      auto b = n.value<bool>();
      if (!b) Fail(key, "must be true or false");
      *out = *b;
    }
  }
  // The raw node of `key` (for tables and arrays); empty when absent.
  toml::node_view<const toml::node> Node(const char* key) {
    known_.insert(key);
    return t_[key];
  }
  // The keys named so far, sorted.
  std::vector<std::string> Known() const { return {known_.begin(), known_.end()}; }
  // Throws for the first key no Read named.
  void Finish() const {
    for (const auto& [k, v] : t_) {
      if (!known_.count(std::string(k.str())))
        throw ConfigError("config " + path_ + ": unknown key '" + std::string(k.str()) + "'");
    }
  }

 private:
  [[noreturn]] void Fail(const char* key, const char* what) const {
    throw ConfigError("config " + path_ + ": '" + key + "' " + what);
  }

  const toml::table& t_;
  const std::string& path_;
  std::set<std::string> known_;
};

void ApplyMounts(TableReader& r, const toml::table& t, const std::string& path, DaemonConfig* c) {
  auto n = r.Node("mount");
  if (!n) return;
  const toml::array* mounts = n.as_array();
  if (mounts == nullptr)
    throw ConfigError("config " + path + ": 'mount' must be an array of tables ([[mount]])");
  if (t.contains("federation") || t.contains("mountpoint")) {
    throw ConfigError(
        "config " + path +
        ": use either top-level 'federation'/'mountpoint' or [[mount]] tables, not both");
  }
  c->mounts.clear();
  for (size_t i = 0; i < mounts->size(); ++i)
    c->mounts.push_back(ParseMount(*mounts->get(i), path, i + 1));
}

void ApplyTable(const toml::table& t, const std::string& path, DaemonConfig* c,
                std::vector<std::string>* keys) {
  TableReader r(t, path);
#define PERCH_READ_KEY(kind, type, field, key, flag, value, unset, help) \
  if (!std::string_view(key).empty()) r.kind(key, &c->field);
  PERCH_CONFIG_KEYS(PERCH_READ_KEY)
#undef PERCH_READ_KEY
  if (auto n = r.Node("tokens")) ParseTokens(*n.node(), path, "tokens", &c->namespace_tokens);
  ApplyMounts(r, t, path, c);
  r.Finish();
  if (keys != nullptr) *keys = r.Known();
}

}  // namespace

void AddNamespaceTokenFlag(const std::string& arg, std::map<std::string, std::string>* out) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos || !AddNamespaceToken(arg.substr(0, eq), arg.substr(eq + 1), out)) {
    throw ConfigError(
        "--namespace-token wants /PREFIX=FILE (a federation path prefix and a token "
        "file), not '" +
        arg + "'");
  }
}

std::vector<MountConfig> MountsOf(const DaemonConfig& c) {
  if (!c.mounts.empty()) return c.mounts;
  if (c.federation_url.empty() && c.mountpoint.empty()) return {};
  MountConfig m;
  m.federation_url = c.federation_url;
  m.mountpoint = c.mountpoint;
  m.allow_nonempty_mountpoint = c.allow_nonempty_mountpoint;
  return {m};
}

size_t NetThreadsOf(const DaemonConfig& c, unsigned cores) {
  if (c.net_threads > 0) return c.net_threads;
  return std::clamp<size_t>(cores / 2, 2, 8);
}

void Validate(const DaemonConfig& c) {
  std::set<std::string> mountpoints, federations;
  for (const MountConfig& m : MountsOf(c)) {
    if (m.federation_url.empty() || m.mountpoint.empty()) {
      throw ConfigError("FEDERATION_URL and MOUNTPOINT are required (see --help)");
    }
    if (!mountpoints.insert(m.mountpoint).second)
      throw ConfigError("mountpoint " + m.mountpoint + " is used twice");
    if (!federations.insert(m.federation_url).second) {
      throw ConfigError("federation " + m.federation_url + " is mounted twice");
    }
  }
  if (c.block_size < 64 * 1024 || c.block_size > 256ULL << 20) {
    throw ConfigError("block_size must be between 64K and 256M");
  }
  if (c.cache_size < c.block_size * 4) throw ConfigError("cache_size must hold at least 4 blocks");
  if (c.fuse_read_ahead > 256ULL << 20) throw ConfigError("fuse_read_ahead must be at most 256M");
  if (!(c.low_watermark > 0 && c.low_watermark < c.high_watermark && c.high_watermark <= 1.0)) {
    throw ConfigError("watermarks must satisfy 0 < low_watermark < high_watermark <= 1");
  }
  if (c.op_timeout < std::chrono::milliseconds(100))
    throw ConfigError("op_timeout must be at least 100ms");
  if (c.net_threads > 64) throw ConfigError("net_threads must be at most 64");
  if (c.scrub_start_delay > std::chrono::hours(24 * 7))
    throw ConfigError("scrub_start_delay must be at most 7 days");
  if (std::string why = CheckControlAddress(c.control_address); !why.empty())
    throw ConfigError(why);
  if (std::string why = CheckMetricsAddress(c.metrics_address, c.metrics_allow_remote);
      !why.empty()) {
    throw ConfigError(why);
  }
  if (std::string why = CheckListenAddress("http", c.http_address, c.http_allow_remote,
                                           "--http-allow-remote", "http_allow_remote");
      !why.empty()) {
    throw ConfigError(why);
  }
  if (c.http_connections_per_user < 1 || c.http_connections_per_user > kHttpConnections) {
    throw ConfigError("http_connections_per_user must be between 1 and " +
                      std::to_string(kHttpConnections));
  }
  if (c.version_check_interval > std::chrono::hours(1)) {
    throw ConfigError("version_check_interval must be at most 1h");
  }
  if (c.http_request_timeout < std::chrono::milliseconds(100) ||
      c.http_request_timeout > std::chrono::hours(1)) {
    throw ConfigError("http_request_timeout must be between 100ms and 1h");
  }
  gid_t gid = 0;
  if (!c.control_group.empty() && !LookupGroup(c.control_group, &gid)) {
    throw ConfigError("control_group '" + c.control_group + "': no such group");
  }
  static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                "error", "critical", "off"};
  if (!kLevels.count(c.log_level)) {
    throw ConfigError("log_level '" + c.log_level +
                      "' is not one of trace, debug, info, warn, error, critical, off");
  }
}

}  // namespace perch

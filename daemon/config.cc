#include "daemon/config.h"

#include <toml++/toml.h>

#include <cctype>
#include <set>

#include "proto/control_address.h"

namespace perch {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
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
    if (!file || prefix.empty() || prefix.front() != '/') {
      throw ConfigError("config " + path + ": " + what + ".\"" + prefix +
                        "\" must map a federation path such as \"/ns\" to a token file");
    }
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    (*out)[prefix] = *file;
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
void ApplyTable(const toml::table& t, const std::string& path, DaemonConfig* c);

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

namespace {

void ApplyTable(const toml::table& t, const std::string& path, DaemonConfig* c) {
  static const std::set<std::string> kKnown = {"federation",
                                               "mountpoint",
                                               "cache_dir",
                                               "cache_size",
                                               "block_size",
                                               "log_level",
                                               "ca_file",
                                               "token_file",
                                               "op_timeout",
                                               "fuse_threads",
                                               "max_requests_in_flight",
                                               "high_watermark",
                                               "low_watermark",
                                               "dir_ttl",
                                               "file_ttl",
                                               "negative_ttl",
                                               "control",
                                               "metrics",
                                               "prefetch",
                                               "readahead",
                                               "prefetch_dir_max_entries",
                                               "hint_window",
                                               "max_bytes_in_flight",
                                               "fuse_no_open",
                                               "fuse_read_ahead",
                                               "control_group",
                                               "metrics_allow_remote",
                                               "http",
                                               "http_allow_remote",
                                               "allow_nonempty_mountpoint",
                                               "tokens",
                                               "protected_group",
                                               "mount"};
  for (const auto& [k, v] : t) {
    if (!kKnown.count(std::string(k.str()))) {
      throw ConfigError("config " + path + ": unknown key '" + std::string(k.str()) + "'");
    }
  }
  auto str = [&](const char* key, std::string* out) {
    if (auto n = t[key]) {
      auto s = n.value<std::string>();
      if (!s) throw ConfigError("config " + path + ": '" + key + "' must be a string");
      *out = *s;
    }
  };
  // Sizes and durations may be strings ("4M", "30s") or integers (bytes, seconds).
  // value_exact, not value<int64_t>: toml++ converts a float such as 2e33 to
  // int64_t with an undefined cast (found by tests/fuzz/config_fuzz).
  auto size = [&](const char* key, uint64_t* out) {
    if (auto n = t[key]) {
      if (auto i = n.value_exact<int64_t>(); i && *i >= 0) {
        *out = static_cast<uint64_t>(*i);
      } else if (auto s = n.value<std::string>()) {
        *out = ParseSize(*s, std::string("config ") + key);
      } else {
        throw ConfigError("config " + path + ": '" + key + "' must be a size such as \"4M\"");
      }
    }
  };
  auto duration = [&](const char* key, auto* out) {
    if (auto n = t[key]) {
      std::chrono::milliseconds ms;
      // Bounded like ParseDuration's 12 digits, so that seconds -> ms cannot overflow.
      if (auto i = n.value_exact<int64_t>(); i && *i >= 0 && *i < 1000000000000) {
        ms = std::chrono::seconds(*i);
      } else if (auto s = n.value<std::string>()) {
        ms = ParseDuration(*s, std::string("config ") + key);
      } else {
        throw ConfigError("config " + path + ": '" + key + "' must be a duration such as \"30s\"");
      }
      *out = std::chrono::duration_cast<std::remove_pointer_t<decltype(out)>>(ms);
    }
  };
  auto real = [&](const char* key, double* out) {
    if (auto n = t[key]) {
      auto d = n.value<double>();
      if (!d) throw ConfigError("config " + path + ": '" + key + "' must be a number");
      *out = *d;
    }
  };
  auto count = [&](const char* key, auto* out) {
    if (auto n = t[key]) {
      auto i = n.value_exact<int64_t>();
      if (!i || *i <= 0)
        throw ConfigError("config " + path + ": '" + key + "' must be a positive integer");
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(*i);
    }
  };
  str("federation", &c->federation_url);
  str("mountpoint", &c->mountpoint);
  str("cache_dir", &c->cache_dir);
  size("cache_size", &c->cache_size);
  size("block_size", &c->block_size);
  str("log_level", &c->log_level);
  str("ca_file", &c->ca_file);
  str("token_file", &c->token_file);
  duration("op_timeout", &c->op_timeout);
  count("fuse_threads", &c->fuse_threads);
  count("max_requests_in_flight", &c->max_requests_in_flight);
  real("high_watermark", &c->high_watermark);
  real("low_watermark", &c->low_watermark);
  duration("dir_ttl", &c->dir_ttl);
  duration("file_ttl", &c->file_ttl);
  duration("negative_ttl", &c->negative_ttl);
  auto flag = [&](const char* key, bool* out) {
    if (auto n = t[key]) {
      auto b = n.value<bool>();
      if (!b) throw ConfigError("config " + path + ": '" + key + "' must be true or false");
      *out = *b;
    }
  };
  flag("prefetch", &c->prefetch);
  flag("fuse_no_open", &c->fuse_no_open);
  size("readahead", &c->readahead);
  size("fuse_read_ahead", &c->fuse_read_ahead);
  count("prefetch_dir_max_entries", &c->prefetch_dir_max_entries);
  count("hint_window", &c->hint_window);
  size("max_bytes_in_flight", &c->max_bytes_in_flight);
  str("control", &c->control_address);
  str("metrics", &c->metrics_address);
  str("http", &c->http_address);
  str("protected_group", &c->protected_group);
  if (auto n = t["tokens"]) ParseTokens(*n.node(), path, "tokens", &c->namespace_tokens);
  if (auto n = t["mount"]) {
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
  str("control_group", &c->control_group);
  flag("metrics_allow_remote", &c->metrics_allow_remote);
  flag("http_allow_remote", &c->http_allow_remote);
  flag("allow_nonempty_mountpoint", &c->allow_nonempty_mountpoint);
}

}  // namespace

std::vector<MountConfig> MountsOf(const DaemonConfig& c) {
  if (!c.mounts.empty()) return c.mounts;
  if (c.federation_url.empty() && c.mountpoint.empty()) return {};
  MountConfig m;
  m.federation_url = c.federation_url;
  m.mountpoint = c.mountpoint;
  m.allow_nonempty_mountpoint = c.allow_nonempty_mountpoint;
  return {m};
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

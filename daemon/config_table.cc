// PERCH_CONFIG_KEYS as data (ConfigKeyTable): each row's setter from the
// text after a flag, its default as the docs write it, and the docs' table.
#include <cctype>
#include <cstdio>
#include <string>
#include <string_view>

#include "daemon/config.h"

namespace perch {
namespace {

// One tag per KIND of the table; Set and Show are overloaded on them.
namespace kind {
struct Str {};
struct Size {};
struct Time {};
struct Count {};
struct Real {};
struct Flag {};
}  // namespace kind

void Set(kind::Str, std::string* out, const std::string& text, const std::string&) { *out = text; }
void Set(kind::Size, uint64_t* out, const std::string& text, const std::string& what) {
  *out = ParseSize(text, what);
}
template <typename Duration>
void Set(kind::Time, Duration* out, const std::string& text, const std::string& what) {
  *out = std::chrono::duration_cast<Duration>(ParseDuration(text, what));
}
template <typename Int>
void Set(kind::Count, Int* out, const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i != text.size() || i > 9 || std::stoul(text) == 0) {
    throw ConfigError(what + ": '" + text + "' is not a positive integer");
  }
  *out = static_cast<Int>(std::stoul(text));
}
void Set(kind::Real, double* out, const std::string& text, const std::string& what) {
  size_t used = 0;
  try {
    *out = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw ConfigError(what + ": '" + text + "' is not a number");
}
void Set(kind::Flag, bool* out, const std::string& text, const std::string& what) {
  if (text != "true" && text != "false") {
    throw ConfigError(what + ": '" + text + "' is not true or false");
  }
  *out = text == "true";
}

// The largest binary unit that divides `bytes`: "4M", "10G", "1536K", "0".
std::string Show(kind::Size, uint64_t bytes) {
  static constexpr std::pair<int, char> kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  for (const auto& [shift, unit] : kUnits) {
    if (bytes != 0 && bytes % (1ULL << shift) == 0) {
      return std::to_string(bytes >> shift) + unit;
    }
  }
  return std::to_string(bytes);
}
// The largest unit that divides it: "30s", "5m", "1h", "500ms", "0".
template <typename Duration>
std::string Show(kind::Time, Duration d) {
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms == 0) return "0";
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}
std::string Show(kind::Str, const std::string& s) { return s; }
template <typename Int>
std::string Show(kind::Count, Int n) {
  return std::to_string(n);
}
std::string Show(kind::Real, double d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", d);
  return buf;
}
std::string Show(kind::Flag, bool b) { return b ? "true" : "false"; }

std::string DefaultText(std::string_view unset, std::string shown) {
  return unset.empty() ? shown : std::string(unset);
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeyTable() {
#define PERCH_KEY_ROW(kind_, type, field, key, flag, value, unset, help)            \
  ConfigKey{key,                                                                    \
            flag,                                                                   \
            #kind_,                                                                 \
            unset,                                                                  \
            help,                                                                   \
            [](DaemonConfig& c, const std::string& text, const std::string& what) { \
              Set(kind::kind_{}, &c.field, text, what);                             \
            },                                                                      \
            [] { return DefaultText(unset, Show(kind::kind_{}, DaemonConfig{}.field)); }},
  static const std::vector<ConfigKey> kTable = {PERCH_CONFIG_KEYS(PERCH_KEY_ROW)};
#undef PERCH_KEY_ROW
  return kTable;
}

std::string ConfigKeysMarkdown() {
  std::string out = "| key | flag | default | what |\n|---|---|---|---|\n";
  for (const ConfigKey& k : ConfigKeyTable()) {
    if (k.key.empty()) continue;
    const std::string shown = k.default_text();
    out += "| `" + std::string(k.key) + "` | ";
    if (!k.flag.empty()) out += "`" + std::string(k.LongFlag()) + "`";
    out += " | ";
    if (!k.unset.empty()) {
      out += shown;
    } else {
      out += shown.empty() ? "—" : "`" + shown + "`";
    }
    out += " | " + std::string(k.help) + " |\n";
  }
  return out;
}

}  // namespace perch

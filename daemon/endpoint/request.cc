#include "daemon/endpoint/request.h"

#include <charconv>
#include <ctime>

#include "daemon/core/limits.h"
#include "daemon/uri/percent.h"

namespace perch::endpoint {

core::Result<core::ObjectPath> PathOfTarget(std::string_view target) {
  if (size_t end = target.find_first_of("?#"); end != std::string_view::npos)
    target = target.substr(0, end);
  if (target.empty() || target.front() != '/')
    return core::InvalidArgumentError("the request target must be an absolute path");
  if (target.size() > 3 * core::kMaxPathBytes)
    return core::InvalidArgumentError("the request target is too long");
  auto decoded = uri::PercentDecode(target);
  if (!decoded.ok()) return decoded.status();
  if (decoded->size() > core::kMaxPathBytes)
    return core::InvalidArgumentError("the path is too long");
  return core::ObjectPath::Parse(*decoded);
}

namespace {

// A decimal number of at most 19 digits; nullopt otherwise.
std::optional<uint64_t> Number(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

RangeAnswer AnswerRange(std::string_view header, uint64_t size) {
  RangeAnswer whole{RangeAnswer::kWhole, 0, size};
  header = Trim(header);
  constexpr std::string_view kUnit = "bytes=";
  if (header.size() < kUnit.size()) return whole;
  for (size_t i = 0; i < kUnit.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kUnit[i]) return whole;
  }
  std::string_view spec = Trim(header.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) return whole;  // several ranges: served whole
  size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  std::string_view first = Trim(spec.substr(0, dash)), last = Trim(spec.substr(dash + 1));
  if (first.empty()) {  // suffix: the last n bytes
    auto n = Number(last);
    if (!n) return whole;
    if (*n == 0 || size == 0) return {RangeAnswer::kUnsatisfiable, 0, 0};
    uint64_t len = std::min(*n, size);
    return {RangeAnswer::kPart, size - len, len};
  }
  auto a = Number(first);
  if (!a) return whole;
  std::optional<uint64_t> b;
  if (!last.empty()) {
    b = Number(last);
    if (!b || *b < *a) return whole;
  }
  if (*a >= size) return {RangeAnswer::kUnsatisfiable, 0, 0};
  uint64_t end = b ? std::min(*b, size - 1) : size - 1;
  return {RangeAnswer::kPart, *a, end - *a + 1};
}

std::string HttpDate(int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday % 7],
                tm.tm_mday, kMonths[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buf;
}

std::string EntityTag(const core::FileAttr& attr) {
  std::string tag;
  for (char c : attr.etag) {
    // Keep what an entity tag may hold (RFC 9110 etagc); the federation's
    // own quotes and anything odd go.
    if (c != '"' && static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f)
      tag += c;
  }
  if (tag.empty() || tag.size() > 128) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%llx-%llx", static_cast<unsigned long long>(attr.size),
                  static_cast<unsigned long long>(attr.mtime));
    tag = buf;
  }
  return "\"" + tag + "\"";
}

bool IfRangeHolds(std::string_view if_range, const core::FileAttr& attr) {
  if_range = Trim(if_range);
  if (if_range.empty()) return true;
  if (if_range.front() == '"') return if_range == EntityTag(attr);
  return attr.mtime != 0 && if_range == HttpDate(attr.mtime);
}

std::string ClientLabel(std::string_view user_agent) {
  user_agent = Trim(user_agent);
  std::string out;
  for (char c : user_agent) {
    if (c == '/' || c == ' ' || out.size() == 32) break;
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '_' || l == '-')
      out += l;
  }
  return out.empty() ? "unknown" : out;
}

}  // namespace perch::endpoint

#include "trainer/tar_shards.h"

#include <archive.h>
#include <archive_entry.h>
#include <glob.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace perch::trainer {

namespace {

// libarchive reads the shard in blocks of this size: few, large, sequential reads, which is
// what a network filesystem (and perch's read-ahead) serves best.
constexpr size_t kReadBlock = 1 << 20;

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// The names one "{...}" group stands for.
std::vector<std::string> ExpandGroup(const std::string& body, size_t max_results) {
  std::vector<std::string> out;
  const size_t dots = body.find("..");
  if (dots != std::string::npos && body.find(',') == std::string::npos) {
    const std::string a = body.substr(0, dots);
    const std::string b = body.substr(dots + 2);
    if (!AllDigits(a) || !AllDigits(b)) {
      throw std::invalid_argument("brace range {" + body + "} is not {N..M}");
    }
    const int64_t lo = std::stoll(a);
    const int64_t hi = std::stoll(b);
    const bool padded = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0');
    const size_t width = padded ? std::max(a.size(), b.size()) : 0;
    const int64_t step = lo <= hi ? 1 : -1;
    if (static_cast<uint64_t>((hi - lo) * step) >= max_results) {
      throw std::invalid_argument("brace range {" + body + "} names too many shards");
    }
    for (int64_t v = lo;; v += step) {
      std::string s = std::to_string(v);
      if (s.size() < width) {
        s.insert(0, width - s.size(), '0');
      }
      out.push_back(std::move(s));
      if (v == hi) {
        break;
      }
    }
    return out;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = body.find(',', start);
    out.push_back(body.substr(start, comma - start));
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  if (out.size() < 2 && dots == std::string::npos) {
    throw std::invalid_argument("brace group {" + body + "} has no ',' or '..'");
  }
  return out;
}

std::string Join(const std::string& base, const std::string& name) {
  if (base.empty() || (!name.empty() && name[0] == '/')) {
    return name;
  }
  return base.back() == '/' ? base + name : base + "/" + name;
}

}  // namespace

std::vector<std::string> ExpandBraces(const std::string& pattern, size_t max_results) {
  std::vector<std::string> results = {""};
  size_t i = 0;
  while (i < pattern.size()) {
    const size_t open = pattern.find_first_of("{}", i);
    if (open == std::string::npos) {
      for (std::string& r : results) {
        r += pattern.substr(i);
      }
      break;
    }
    if (pattern[open] == '}') {
      throw std::invalid_argument("unbalanced '}' in " + pattern);
    }
    const size_t close = pattern.find_first_of("{}", open + 1);
    if (close == std::string::npos || pattern[close] == '{') {
      throw std::invalid_argument("unbalanced or nested '{' in " + pattern);
    }
    const std::string prefix = pattern.substr(i, open - i);
    const std::vector<std::string> group =
        ExpandGroup(pattern.substr(open + 1, close - open - 1), max_results);
    if (results.size() * group.size() > max_results) {
      throw std::invalid_argument(pattern + " names more than " + std::to_string(max_results) +
                                  " shards");
    }
    std::vector<std::string> next;
    next.reserve(results.size() * group.size());
    for (const std::string& r : results) {
      for (const std::string& g : group) {
        next.push_back(r + prefix + g);
      }
    }
    results = std::move(next);
    i = close + 1;
  }
  return results;
}

std::vector<std::string> ResolveShardPattern(const std::string& pattern, const std::string& base) {
  std::vector<std::string> out;
  for (const std::string& name : ExpandBraces(pattern)) {
    const std::string path = Join(base, name);
    if (name.find_first_of("*?") == std::string::npos) {
      out.push_back(path);
      continue;
    }
    glob_t g = {};
    const int rc = glob(path.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        out.emplace_back(g.gl_pathv[k]);
      }
    }
    globfree(&g);
    if (rc != 0) {
      throw std::invalid_argument("no shard matches " + path);
    }
  }
  if (out.empty()) {
    throw std::invalid_argument("the shard pattern " + pattern + " names no file");
  }
  return out;
}

bool SplitMemberName(const std::string& path, std::string* key, std::string* extension) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string::npos || dot == base) {
    return false;
  }
  *key = path.substr(0, dot);
  *extension = path.substr(dot + 1);
  std::transform(extension->begin(), extension->end(), extension->begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return true;
}

bool ParseClassLabel(const std::string& text, int64_t* label) {
  size_t b = 0;
  size_t e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) {
    ++b;
  }
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) {
    --e;
  }
  const std::string digits = text.substr(b, e - b);
  if (!AllDigits(digits)) {
    return false;
  }
  *label = std::stoll(digits);
  return true;
}

TarShardReader::TarShardReader(std::string path, ShardLimits limits, int64_t fixed_label,
                               int64_t classes)
    : path_(std::move(path)), limits_(limits), fixed_label_(fixed_label), classes_(classes) {}

TarShardReader::~TarShardReader() {
  if (archive_ != nullptr) {
    archive_read_free(archive_);
  }
}

void TarShardReader::Fail(const std::string& what) {
  if (error_.empty()) {
    error_ = what;
  }
  ++bad_;
  done_ = true;
}

bool TarShardReader::Open() {
  opened_ = true;
  archive_ = archive_read_new();
  if (archive_ == nullptr) {
    Fail("cannot allocate a libarchive reader");
    return false;
  }
  // Tar only (ustar, pax, GNU), plain or gzip'd; never the filters that run external programs.
  archive_read_support_format_tar(archive_);
  archive_read_support_filter_gzip(archive_);
  if (archive_read_open_filename(archive_, path_.c_str(), kReadBlock) != ARCHIVE_OK) {
    Fail(archive_error_string(archive_) ? archive_error_string(archive_) : "cannot open");
    return false;
  }
  return true;
}

TarShardReader::MemberResult TarShardReader::ReadMember(Member* m) {
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(archive_, &entry);
  if (r == ARCHIVE_EOF) {
    return MemberResult::kEnd;
  }
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
    const char* e = archive_error_string(archive_);
    Fail(std::string("corrupt tar: ") + (e ? e : "unreadable header"));
    return MemberResult::kEnd;
  }
  if (++members_ > limits_.max_members) {
    Fail("more than " + std::to_string(limits_.max_members) + " members");
    return MemberResult::kEnd;
  }
  if (archive_entry_filetype(entry) != AE_IFREG) {
    return MemberResult::kSkipped;  // directories, links: WebDataset ignores them too
  }
  const char* name = archive_entry_pathname(entry);
  if (name == nullptr || std::char_traits<char>::length(name) > limits_.max_key_bytes ||
      !SplitMemberName(name, &m->key, &m->extension)) {
    ++bad_;
    return MemberResult::kSkipped;
  }
  const int64_t size = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : -1;
  const bool wanted = m->extension == "jpg" || m->extension == "jpeg" || m->extension == "png" ||
                      (m->extension == "cls" && fixed_label_ < 0);
  const int64_t limit = m->extension == "cls" ? limits_.max_cls_bytes : limits_.max_member_bytes;
  m->data.clear();
  if (!wanted || size < 0 || size > limit) {
    if (wanted) {
      m->extension = "oversized";  // drops its sample
    }
    if (archive_read_data_skip(archive_) != ARCHIVE_OK) {
      Fail("corrupt tar: cannot skip member " + m->key);
      return MemberResult::kEnd;
    }
    return MemberResult::kMember;
  }
  m->data.resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < m->data.size()) {
    const la_ssize_t n = archive_read_data(archive_, m->data.data() + got, m->data.size() - got);
    if (n <= 0) {
      Fail("corrupt or truncated tar member " + std::string(name));
      return MemberResult::kEnd;
    }
    got += static_cast<size_t>(n);
  }
  return MemberResult::kMember;
}

void TarShardReader::Add(Member&& m) {
  if (m.extension == "oversized") {
    current_bad_ = true;
  } else if (m.extension == "cls") {
    current_bad_ = current_bad_ || has_cls_;  // a repeated member: WebDataset rejects those
    current_cls_.assign(m.data.begin(), m.data.end());
    has_cls_ = true;
  } else if (m.extension == "jpg" || m.extension == "jpeg" || m.extension == "png") {
    current_bad_ = current_bad_ || !current_.image.empty();
    current_.image = std::move(m.data);
  }
}

bool TarShardReader::Finish(ShardSample* out) {
  if (!has_current_) {
    return false;
  }
  has_current_ = false;
  int64_t label = fixed_label_;
  bool ok = !current_bad_ && !current_.image.empty();
  if (ok && fixed_label_ < 0) {
    ok = has_cls_ && ParseClassLabel(current_cls_, &label) && label < classes_;
  }
  if (ok && ++samples_ > limits_.max_samples) {
    Fail("more than " + std::to_string(limits_.max_samples) + " samples");
    return false;
  }
  if (!ok) {
    ++bad_;
    return false;
  }
  out->key = std::move(current_.key);
  out->image.swap(current_.image);
  out->label = label;
  return true;
}

bool TarShardReader::Next(ShardSample* out) {
  if (!opened_ && !Open()) {
    return false;
  }
  Member m;
  while (true) {
    m.key.clear();
    const MemberResult r = done_ ? MemberResult::kEnd : ReadMember(&m);
    if (r == MemberResult::kEnd) {
      done_ = true;
      // The last sample of a shard that broke off may be incomplete: dropped with the rest,
      // unless the damage came after the header of another key.
      const bool complete = error_.empty() || (!m.key.empty() && m.key != current_.key);
      if (complete && Finish(out)) {
        return true;
      }
      has_current_ = false;
      return false;
    }
    if (r == MemberResult::kSkipped) {
      continue;
    }
    bool emitted = false;
    if (has_current_ && m.key != current_.key) {
      emitted = Finish(out);
    }
    if (!has_current_) {
      has_current_ = true;
      current_bad_ = false;
      has_cls_ = false;
      current_cls_.clear();
      current_.key = m.key;
      current_.image.clear();
    }
    Add(std::move(m));
    if (emitted) {
      return true;
    }
    if (done_) {  // Finish failed the shard (too many samples)
      return false;
    }
  }
}

}  // namespace perch::trainer

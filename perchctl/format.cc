#include "perchctl/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <stdexcept>

namespace perch::ctl {

using nlohmann::json;

std::string Size(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

std::string Count(uint64_t n) {
  // Built forwards rather than by insert(), which gcc 12 -O2 warns about
  // (a false -Wrestrict, GCC bug 105329).
  const std::string digits = std::to_string(n);
  std::string s;
  s.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string Ratio(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f %%",
                100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses));
  return buf;
}

std::string Duration(double seconds) {
  char buf[32];
  if (seconds < 0.001) {
    std::snprintf(buf, sizeof(buf), "%.0f µs", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  } else if (seconds < 120) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0fm%02.0fs", std::floor(seconds / 60),
                  std::fmod(seconds, 60));
  }
  return buf;
}

double Quantile(const v1::Histogram& h, double q) {
  if (h.count() == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(h.count())));
  uint64_t seen = 0;
  for (int i = 0; i < h.counts_size(); ++i) {
    seen += h.counts(i);
    if (seen >= rank) return i < h.bounds_seconds_size() ? h.bounds_seconds(i) : INFINITY;
  }
  return INFINITY;
}

void Table(const std::vector<std::vector<std::string>>& rows, std::string_view align) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      std::string cell = r[i];
      std::string pad(width[i] - cell.size(), ' ');
      line += i < align.size() && align[i] == 'l' ? cell + pad : pad + cell;
      if (i + 1 < r.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
}

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Proto3's JSON mapping writes 64-bit integers as strings (for JavaScript's
// sake); perchctl's readers are jq and Python, and the numbers were always
// JSON numbers. Turns them back, guided by the descriptor so that a string
// field holding digits stays a string.
void Unquote64(const Descriptor* d, json& j) {
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    auto it = j.find(f->name());
    if (it == j.end()) continue;
    auto fix = [f](json& v) {
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Unquote64(f->message_type(), v);
      } else if (v.is_string() && f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
        v = std::stoull(v.get<std::string>());
      } else if (v.is_string() && f->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
        v = std::stoll(v.get<std::string>());
      }
    };
    if (f->is_repeated() && it->is_array()) {
      for (json& v : *it) fix(v);
    } else if (!f->is_repeated()) {
      fix(*it);
    }
  }
}

}  // namespace

json ProtoJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;  // a zero counter is still there
  options.preserve_proto_field_names = true;     // snake_case keys, as in perch.proto
  std::string text;
  auto st = google::protobuf::util::MessageToJsonString(m, &text, options);
  // The printer fails only on Any fields it cannot resolve; ours have none.
  if (!st.ok()) throw std::runtime_error("JSON printer: " + st.ToString());
  json j = json::parse(text);
  Unquote64(m.GetDescriptor(), j);
  return j;
}

namespace {

using google::protobuf::Message;
using google::protobuf::Reflection;

// `perchctl stats` for people, made by walking the Stats message: numbers go
// on the line of their (perch.v1.metric) group with their unit, repeated
// messages become tables, histograms rows of a latency table (P50 and P99
// are the upper bounds of their buckets), so a new field shows
// without a change here.
class StatsText {
 public:
  void Walk(const Message& m, std::string_view group) {
    const auto* d = m.GetDescriptor();
    const Reflection* r = m.GetReflection();
    for (int k = 0; k < d->field_count(); ++k) {
      const FieldDescriptor* f = d->field(k);
      const v1::Metric& opt = f->options().GetExtension(v1::metric);
      const std::string_view g = opt.group().empty() ? group : opt.group();
      if (f->message_type() == v1::WarmProgress::descriptor()) continue;  // its own table
      if (f->message_type() == v1::Histogram::descriptor()) {
        Latency(f->name(), static_cast<const v1::Histogram&>(r->GetMessage(m, f)));
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated()) {
        Walk(r->GetMessage(m, f), g);
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Repeated(m, f, g);
      } else if (!f->is_repeated() && f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
        Line(g) += Label(f) + " " + Value(m, f);
        if (const std::string ratio = HitRatio(m, f); !ratio.empty()) {
          Line(g) += "hit ratio " + ratio;
        }
      }
    }
  }

  void Print() const {
    for (const auto& [group, line] : lines_) {
      std::string padded = group + std::string(group.size() < 10 ? 10 - group.size() : 1, ' ');
      std::cout << padded << line << "\n";
    }
    for (const Rows& t : tables_) {
      std::cout << "\n";
      Table(t.rows, t.align);
    }
  }

 private:
  static std::string Label(const FieldDescriptor* f) {
    std::string name = f->name();
    for (std::string_view unit : {"_bytes", "_seconds"}) {
      if (name.size() > unit.size() && name.ends_with(unit)) name.resize(name.size() - unit.size());
    }
    std::replace(name.begin(), name.end(), '_', ' ');
    return name;
  }

  static std::string Value(const Message& m, const FieldDescriptor* f) {
    const Reflection* r = m.GetReflection();
    const auto unit = f->options().GetExtension(v1::metric).unit();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        return r->GetBool(m, f) ? "yes" : "no";
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return Duration(r->GetDouble(m, f));
      default: {
        const uint64_t v = f->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ? r->GetUInt32(m, f)
                                                                            : r->GetUInt64(m, f);
        if (unit == v1::Metric::BYTES) return Size(v);
        if (unit == v1::Metric::SECONDS) {
          return v < 120 ? std::to_string(v) + " s"
                         : Duration(static_cast<double>(v));  // whole seconds
        }
        return Count(v);
      }
    }
  }

  // After the field "misses" of a message that also has "hits": their ratio.
  static std::string HitRatio(const Message& m, const FieldDescriptor* f) {
    const FieldDescriptor* hits = m.GetDescriptor()->FindFieldByName("hits");
    if (f->name() != "misses" || hits == nullptr ||
        hits->cpp_type() != FieldDescriptor::CPPTYPE_UINT64) {
      return "";
    }
    const Reflection* r = m.GetReflection();
    return Ratio(r->GetUInt64(m, hits), r->GetUInt64(m, f));
  }

  std::string& Line(std::string_view group) {
    for (auto& [g, line] : lines_) {
      if (g == group) return line += ", ";
    }
    return lines_.emplace_back(std::string(group), "").second;
  }

  // A histogram as a row of the latency table (the first table).
  void Latency(const std::string& name, const v1::Histogram& h) {
    if (h.count() == 0) return;
    if (tables_.empty() || tables_.front().rows.front().front() != "LATENCY") {
      tables_.insert(tables_.begin(), Rows{{{"LATENCY", "COUNT", "P50", "P99", "MEAN"}}, "lrrrr"});
    }
    tables_.front().rows.push_back({name, Count(h.count()), Duration(Quantile(h, 0.5)),
                                    Duration(Quantile(h, 0.99)),
                                    Duration(h.sum_seconds() / static_cast<double>(h.count()))});
  }

  // One element of a repeated message as table cells: its labels (left
  // aligned) and numbers, through singular messages; histograms go apart.
  struct Row {
    std::vector<std::string> head, cells;
    std::string align;
    std::vector<bool> only_if_varies;
    bool counted = false;  // some number is not zero
    bool numbers = false;
  };
  static void Cells(const Message& m, Row* row) {
    const auto* d = m.GetDescriptor();
    const Reflection* r = m.GetReflection();
    for (int k = 0; k < d->field_count(); ++k) {
      const FieldDescriptor* f = d->field(k);
      if (f->is_repeated() || f->message_type() == v1::Histogram::descriptor()) continue;
      const bool label = f->options().HasExtension(v1::label);
      if (label) {
        row->head.push_back(f->options().GetExtension(v1::label).name());
        row->cells.push_back(r->GetString(m, f));
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Cells(r->GetMessage(m, f), row);
        continue;
      } else if (f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
        row->head.push_back(Label(f));
        row->cells.push_back(Value(m, f));
        row->numbers = true;
        row->counted |= f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64 && r->GetUInt64(m, f) > 0;
        if (const std::string ratio = HitRatio(m, f); !ratio.empty()) {
          row->head.push_back("hit ratio");
          row->cells.push_back(ratio);
          row->align += 'r';
          row->only_if_varies.push_back(false);
        }
      } else {
        continue;
      }
      row->align += label ? 'l' : 'r';
      row->only_if_varies.push_back(label && f->options().GetExtension(v1::label).only_if_varies());
    }
  }

  // A repeated message: a histogram per element onto the latency line; in a
  // group, one "labels numbers" entry per element that counted something;
  // otherwise a table.
  void Repeated(const Message& m, const FieldDescriptor* f, std::string_view group) {
    const Reflection* r = m.GetReflection();
    std::vector<std::vector<std::string>> rows;
    Row first;
    for (int i = 0; i < r->FieldSize(m, f); ++i) {
      const Message& e = r->GetRepeatedMessage(m, f, i);
      const auto* d = e.GetDescriptor();
      for (int k = 0; k < d->field_count(); ++k) {
        if (d->field(k)->message_type() != v1::Histogram::descriptor()) continue;
        const FieldDescriptor* name = d->field(0);  // the label, or the field's name
        Latency(name->cpp_type() == FieldDescriptor::CPPTYPE_STRING
                    ? e.GetReflection()->GetString(e, name)
                    : f->name(),
                static_cast<const v1::Histogram&>(e.GetReflection()->GetMessage(e, d->field(k))));
      }
      Row row;
      Cells(e, &row);
      if (!row.numbers) continue;
      if (!group.empty()) {
        if (row.counted) Line(group) += Join(row.cells, " ");
        continue;
      }
      if (rows.empty()) first = row;
      rows.push_back(std::move(row.cells));
    }
    if (rows.empty()) return;
    rows.insert(rows.begin(), first.head);
    for (std::string& h : rows.front()) std::transform(h.begin(), h.end(), h.begin(), ::toupper);
    // Columns that say the same on every row where they only tell rows apart.
    for (size_t c = first.align.size(); c-- > 0;) {
      bool same = true;
      for (size_t i = 2; i < rows.size(); ++i) same &= rows[i][c] == rows[1][c];
      if (!first.only_if_varies[c] || !same) continue;
      for (auto& row : rows) row.erase(row.begin() + static_cast<ptrdiff_t>(c));
      first.align.erase(c, 1);
    }
    tables_.push_back({std::move(rows), first.align});
  }

  static std::string Join(const std::vector<std::string>& v, std::string_view sep) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
    return out;
  }

  std::vector<std::pair<std::string, std::string>> lines_;  // group, "name value, ..."
  struct Rows {
    std::vector<std::vector<std::string>> rows;  // the header first
    std::string align;
  };
  std::vector<Rows> tables_;
};

}  // namespace

void PrintStats(const v1::Stats& s) {
  StatsText text;
  text.Walk(s, "");
  text.Print();
  std::vector<std::vector<std::string>> rows;
  if (s.warm_jobs_size() > 0) {
    std::cout << "\n";
    rows.clear();
    rows.push_back({"WARM", "FILES", "BYTES", "FAILED", "STATE", "PATHS"});
    for (const auto& w : s.warm_jobs()) {
      std::string paths;
      for (const auto& p : w.paths()) paths += (paths.empty() ? "" : " ") + p;
      rows.push_back({"#" + std::to_string(w.job_id()),
                      Count(w.files_done()) + "/" + Count(w.files_total()),
                      Size(w.bytes_done()) + "/" + Size(w.bytes_total()), Count(w.files_failed()),
                      w.cancelled()  ? "cancelled"
                      : w.finished() ? "done"
                                     : "running",
                      paths});
    }
    Table(rows, "lrrrll");
  }
}

}  // namespace perch::ctl

#include "daemon/control/prometheus.h"

#include <fmt/format.h>

#include <map>
#include <string_view>
#include <vector>

#include "proto/perch.pb.h"

namespace perch::control {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Escapes a label value: backslash, double quote and newline.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Families in the order first seen, each with its samples together (the
// format wants a family's lines in one group; repeated messages visit their
// families once per element).
class Exposition {
 public:
  std::string& Family(const std::string& name, std::string_view type, std::string_view help) {
    auto [it, added] = index_.emplace(name, families_.size());
    if (added) families_.push_back({name, std::string(type), std::string(help), ""});
    Entry& e = families_[it->second];
    if (e.help.empty()) e.help = help;  // series after the first of a family may have none
    return e.samples;
  }
  std::string Take() const {
    std::string out;
    for (const Entry& e : families_) {
      out +=
          fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", e.name, e.help, e.name, e.type, e.samples);
    }
    return out;
  }

 private:
  struct Entry {
    std::string name, type, help, samples;
  };
  std::vector<Entry> families_;
  std::map<std::string, size_t> index_;
};

std::string Braced(const std::string& labels) { return labels.empty() ? "" : "{" + labels + "}"; }

std::string Join(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + "," + b;
}

void AddHistogram(const std::string& name, const std::string& help, const std::string& labels,
                  const v1::Histogram& h, Exposition* out) {
  std::string& s = out->Family(name, "histogram", help);
  uint64_t cumulative = 0;
  for (int i = 0; i < h.counts_size(); ++i) {
    cumulative += h.counts(i);
    std::string le = i < h.bounds_seconds_size() ? fmt::format("{}", h.bounds_seconds(i)) : "+Inf";
    s += fmt::format("{}_bucket{{{}}} {}\n", name, Join(labels, "le=\"" + le + "\""), cumulative);
  }
  s += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, Braced(labels), h.sum_seconds(), name,
                   Braced(labels), h.count());
}

void AddNumber(const Message& m, const FieldDescriptor* f, const std::string& prefix,
               const std::string& labels, Exposition* out) {
  const v1::Metric& opt = f->options().GetExtension(v1::metric);
  const bool counter = opt.type() == v1::Metric::COUNTER;
  const std::string name = (opt.standard() ? "" : "perch_") +
                           (opt.name().empty() ? prefix + f->name() : opt.name()) +
                           (counter ? "_total" : "");
  const Reflection* r = m.GetReflection();
  std::string value;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT64:
      value = fmt::format("{}", r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      value = fmt::format("{}", r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      value = fmt::format("{}", r->GetInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      value = r->GetBool(m, f) ? "1" : "0";
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      value = fmt::format("{}", r->GetDouble(m, f));
      break;
    default:
      return;  // strings are labels or nothing
  }
  std::string series;
  if (!opt.series().empty()) {
    const size_t eq = opt.series().find('=');
    series = opt.series().substr(0, eq) + "=\"" + Escape(opt.series().substr(eq + 1)) + "\"";
  }
  out->Family(name, counter ? "counter" : "gauge", opt.help()) +=
      fmt::format("{}{} {}\n", name, Braced(Join(labels, series)), value);
}

void Walk(const Message& m, const std::string& prefix, const std::string& labels, Exposition* out);

// The label fields of `elements` (messages of one repeated field), for element `i`.
std::string ElementLabels(const std::vector<const Message*>& elements, size_t i) {
  std::string labels;
  const auto* d = elements[i]->GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (!f->options().HasExtension(v1::label)) continue;
    const v1::Label& l = f->options().GetExtension(v1::label);
    const std::string v = elements[i]->GetReflection()->GetString(*elements[i], f);
    bool varies = false;
    for (const Message* e : elements) varies |= e->GetReflection()->GetString(*e, f) != v;
    if (l.only_if_varies() && !varies) continue;
    labels = Join(labels, l.name() + "=\"" + Escape(v) + "\"");
  }
  return labels;
}

void WalkMessageField(const Message& m, const FieldDescriptor* f, const std::string& prefix,
                      const std::string& labels, Exposition* out) {
  const v1::Metric& opt = f->options().GetExtension(v1::metric);
  const Reflection* r = m.GetReflection();
  if (f->message_type() == v1::Histogram::descriptor()) {
    const std::string name = "perch_" + (opt.name().empty() ? prefix + f->name() : opt.name());
    if (f->is_repeated()) return;  // not a shape Stats uses
    AddHistogram(name, opt.help(), labels, static_cast<const v1::Histogram&>(r->GetMessage(m, f)),
                 out);
    return;
  }
  const std::string sub_prefix =
      opt.flatten() ? prefix : (opt.name().empty() ? prefix + f->name() : opt.name()) + "_";
  if (!f->is_repeated()) {
    Walk(r->GetMessage(m, f), sub_prefix, labels, out);
    return;
  }
  std::vector<const Message*> elements;
  for (int i = 0; i < r->FieldSize(m, f); ++i) elements.push_back(&r->GetRepeatedMessage(m, f, i));
  for (size_t i = 0; i < elements.size(); ++i) {
    Walk(*elements[i], sub_prefix, Join(labels, ElementLabels(elements, i)), out);
  }
}

void Walk(const Message& m, const std::string& prefix, const std::string& labels, Exposition* out) {
  const auto* d = m.GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->options().GetExtension(v1::metric).omit()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      WalkMessageField(m, f, prefix, labels, out);
    } else if (!f->is_repeated()) {
      AddNumber(m, f, prefix, labels, out);
    }
  }
}

}  // namespace

std::string RenderPrometheus(const Message& stats) {
  Exposition out;
  Walk(stats, "", "", &out);
  return out.Take();
}

}  // namespace perch::control

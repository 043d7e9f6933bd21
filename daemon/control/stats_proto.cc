#include "daemon/control/stats_proto.h"

#include <cstdio>
#include <string>

#include "daemon/core/utf8.h"

namespace perch::control {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Collects the names that SetNumber refused, for one error at the end.
class Setter {
 public:
  explicit Setter(Message* message) : message_(message) {}
  template <typename T>
  void operator()(std::string_view name, const T& value) {
    core::Status st = SetNumber(message_, name, static_cast<uint64_t>(value));
    if (!st.ok()) missing_ += (missing_.empty() ? "" : ", ") + std::string(name);
  }
  core::Status status() const {
    if (missing_.empty()) return core::Status::Ok();
    return core::InternalError(message_->GetDescriptor()->full_name() +
                               " has no number field for " + missing_);
  }

 private:
  Message* message_;
  std::string missing_;
};

template <typename Struct>
core::Status FillFields(const Struct& s, Message* out) {
  Setter set(out);
  for (const auto& [name, field] : Struct::Fields()) set(name, s.*field);
  return set.status();
}

void Fill(const core::LatencyHistogram::Snapshot& h, v1::Histogram* out) {
  for (double b : h.bounds) out->add_bounds_seconds(b);
  for (uint64_t c : h.counts) out->add_counts(c);
  out->set_count(h.count);
  out->set_sum_seconds(h.sum_seconds);
}

}  // namespace

core::Status SetNumber(Message* message, std::string_view name, uint64_t value) {
  const size_t dot = name.find('.');
  const std::string field_name(name.substr(0, dot));
  const FieldDescriptor* f = message->GetDescriptor()->FindFieldByName(field_name);
  if (f == nullptr || f->is_repeated()) {
    return core::InternalError(message->GetDescriptor()->full_name() + " has no field " +
                               field_name);
  }
  const auto* r = message->GetReflection();
  if (dot != std::string_view::npos) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return core::InternalError(f->full_name() + " is not a message");
    }
    return SetNumber(r->MutableMessage(message, f), name.substr(dot + 1), value);
  }
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(message, f, value);
      return core::Status::Ok();
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(message, f, value != 0);
      return core::Status::Ok();
    default:
      return core::InternalError(f->full_name() + " is not a uint64 or bool field");
  }
}

std::string ProtoText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const int len = core::Utf8CharLength(text.substr(i), &cp);
    if (len <= 0) {  // not UTF-8, or cut short by the end
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(text[i]));
      out += hex;
      ++i;
      continue;
    }
    out.append(text.substr(i, static_cast<size_t>(len)));
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string PageToken(std::string_view last_path) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : last_path) {
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  }
  return out;
}

bool PathOfPageToken(std::string_view token, std::string* path) {
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  if (token.size() % 2 != 0) return false;
  path->clear();
  for (size_t i = 0; i < token.size(); i += 2) {
    int hi = nibble(token[i]), lo = nibble(token[i + 1]);
    if (hi < 0 || lo < 0) return false;
    path->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

void ToProto(const core::WarmProgress& p, v1::WarmProgress* out) {
  out->set_job_id(p.id);
  for (const std::string& path : p.paths) out->add_paths(ProtoText(path));  // federation paths
  out->set_files_total(p.files_total);
  out->set_files_done(p.files_done);
  out->set_files_failed(p.files_failed);
  out->set_bytes_total(p.bytes_total);
  out->set_bytes_done(p.bytes_done);
  out->set_listing_done(p.listing_done);
  out->set_finished(p.finished);
  out->set_cancelled(p.cancelled);
  for (const std::string& e : p.errors) out->add_errors(ProtoText(e));
}

void ToProto(const core::ScrubProgress& p, v1::VerifyProgress* out) {
  out->set_job_id(p.id);
  out->set_path(ProtoText(p.path));
  out->set_blocks_total(p.blocks_total);
  out->set_bytes_total(p.bytes_total);
  out->set_counted(p.counted);
  out->set_blocks_done(p.blocks_done);
  out->set_bytes_done(p.bytes_done);
  out->set_objects_done(p.objects_done);
  out->set_missing_blocks(p.missing_blocks);
  out->set_unreadable_blocks(p.unreadable_blocks);
  out->set_corrupt_blocks(p.corrupt_blocks);
  out->set_digests_verified(p.digests_verified);
  out->set_digest_mismatches(p.digest_mismatches);
  out->set_finished(p.finished);
  out->set_cancelled(p.cancelled);
  for (const std::string& c : p.corrupt) out->add_corrupt(ProtoText(c));
  out->set_objects_unverified(p.objects_unverified);
  for (const core::FileVerdict& f : p.files) {
    auto* v = out->add_files();
    v->set_path(ProtoText(f.path));
    v->set_verdict(core::ToString(f.verdict.kind));
    v->set_detail(ProtoText(f.verdict.detail));
  }
  out->set_files_not_listed(p.files_not_listed);
}

core::Status ToProto(const core::StatsSnapshot& s, v1::Stats* out) {
  Setter set(out);
  core::StatsSnapshot::ForEachNumber(s, set);
  core::Status status = set.status();
  auto keep = [&status](core::Status st) {
    if (status.ok()) status = std::move(st);
  };
  for (const auto& [cls, n] : s.errors) {
    auto* e = out->add_errors();
    e->set_error_class(cls);
    e->set_count(n);
  }
  for (const core::NamespaceCounters& n : s.namespaces) {
    auto* ns = out->add_namespaces();
    ns->set_path(n.path);
    ns->set_federation(n.federation);
    keep(FillFields(n.values, ns->mutable_counters()));
  }
  for (const auto& [op, h] : s.fuse_ops) {
    auto* o = out->add_fuse_ops();
    o->set_op(op);
    Fill(h, o->mutable_latency());
  }
  for (const core::ClientStats& c : s.http_clients) {
    auto* h = out->add_http_clients();
    h->set_client(c.client);
    keep(FillFields(c, h));
  }
  for (const core::ServerStats& server : s.network.servers) {
    auto* v = out->add_servers();
    v->set_server(server.server);
    keep(FillFields(server, v));
  }
  Fill(s.origin_get, out->mutable_origin_get());
  for (const auto& w : s.warm_jobs) ToProto(w, out->add_warm_jobs());
  return status;
}

}  // namespace perch::control

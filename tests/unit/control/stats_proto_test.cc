// The stats mapping end to end without a daemon: every number core's
// snapshot names reaches the Stats message, the Prometheus text and
// perchctl's JSON; every field of Stats is filled; a name with no field is
// an error, never a silent drop.
#include "daemon/control/stats_proto.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "daemon/control/prometheus.h"
#include "perchctl/format.h"

namespace perch::control {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// A snapshot in which every number is set, each to a value no other has
// (1000, 1001, ...; bools true), with one element in every list.
core::StatsSnapshot Numbered() {
  core::StatsSnapshot s;
  uint64_t next = 1000;
  core::StatsSnapshot::ForEachNumber(s, [&next](std::string_view, auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) {
      v = true;
    } else {
      v = next++;
    }
  });
  core::NamespaceCounters ns{"pelican://fed.example/", "/ns/a", {}};
  for (const auto& [name, field] : core::ReadCounters::Values::Fields()) ns.values.*field = next++;
  s.namespaces.push_back(ns);
  core::ClientStats client{"curl"};
  for (const auto& [name, field] : core::ClientStats::Fields()) client.*field = next++;
  s.http_clients.push_back(client);
  core::ServerStats server{"https://cache.example:8443"};
  for (const auto& [name, field] : core::ServerStats::Fields()) server.*field = next++;
  s.network.servers.push_back(server);
  s.errors.emplace_back("NotFound", next++);
  core::LatencyHistogram h;
  h.Observe(std::chrono::milliseconds(3));
  s.fuse_ops.emplace_back("read", h.Take());
  s.origin_get = h.Take();
  core::WarmProgress w;
  w.id = 7;
  w.paths = {"/ns/a"};
  w.files_total = w.files_done = w.files_failed = w.bytes_total = w.bytes_done = 1;
  w.listing_done = w.finished = w.cancelled = true;
  w.errors = {"/ns/a/x: gone"};
  s.warm_jobs.push_back(w);
  return s;
}

// (name, value) of every number ForEachNumber gives, bools as 0/1.
std::vector<std::pair<std::string, uint64_t>> Names(const core::StatsSnapshot& s) {
  std::vector<std::pair<std::string, uint64_t>> out;
  core::StatsSnapshot::ForEachNumber(
      s, [&out](std::string_view name, const auto& v) { out.emplace_back(name, uint64_t(v)); });
  return out;
}

// The field `name` ("a.b") of `m` as a number; -1 when there is none.
int64_t Get(const Message& m, std::string_view name) {
  const size_t dot = name.find('.');
  const FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(std::string(name.substr(0, dot)));
  if (f == nullptr || f->is_repeated()) return -1;
  if (dot != std::string_view::npos)
    return Get(m.GetReflection()->GetMessage(m, f), name.substr(dot + 1));
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) return m.GetReflection()->GetBool(m, f);
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
    return static_cast<int64_t>(m.GetReflection()->GetUInt64(m, f));
  }
  return -1;
}

// Paths of the fields of `m` left at their default, through every message
// and every element of a repeated message.
void Unset(const Message& m, const std::string& path, std::vector<std::string>* out) {
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    const std::string p = path + f->name();
    if (f->is_repeated()) {
      if (r->FieldSize(m, f) == 0) out->push_back(p);
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        Unset(r->GetRepeatedMessage(m, f, i), p + "[" + std::to_string(i) + "].", out);
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!r->HasField(m, f)) out->push_back(p);
      Unset(r->GetMessage(m, f), p + ".", out);
    } else if (!r->HasField(m, f)) {  // proto3 scalars: "has" means not the default
      out->push_back(p);
    }
  }
}

TEST(StatsProto, EveryCoreNumberReachesItsField) {
  const core::StatsSnapshot s = Numbered();
  v1::Stats stats;
  ASSERT_TRUE(ToProto(s, &stats).ok());
  for (const auto& [name, value] : Names(s)) {
    EXPECT_EQ(Get(stats, name), static_cast<int64_t>(value)) << name;
  }
  const auto& ns = stats.namespaces(0);
  EXPECT_EQ(ns.path(), "/ns/a");
  for (const auto& [name, field] : core::ReadCounters::Values::Fields()) {
    EXPECT_EQ(Get(ns.counters(), name), static_cast<int64_t>(s.namespaces[0].values.*field))
        << name;
  }
  for (const auto& [name, field] : core::ClientStats::Fields()) {
    EXPECT_EQ(Get(stats.http_clients(0), name), static_cast<int64_t>(s.http_clients[0].*field))
        << name;
  }
  EXPECT_EQ(stats.servers(0).server(), "https://cache.example:8443");
  for (const auto& [name, field] : core::ServerStats::Fields()) {
    EXPECT_EQ(Get(stats.servers(0), name), static_cast<int64_t>(s.network.servers[0].*field))
        << name;
  }
}

TEST(StatsProto, EveryFieldOfStatsIsFilled) {
  v1::Stats stats;
  ASSERT_TRUE(ToProto(Numbered(), &stats).ok());
  std::vector<std::string> unset;
  Unset(stats, "", &unset);
  // The process's own figures come from the kernel, not from core (StatsNow,
  // process_stats_test.cc).
  std::erase_if(unset, [](const std::string& path) { return path.starts_with("process"); });
  // A field here has nothing in core's snapshot that names it.
  EXPECT_TRUE(unset.empty()) << ::testing::PrintToString(unset);
}

TEST(StatsProto, ANameWithoutAFieldIsAnError) {
  v1::Stats stats;
  EXPECT_TRUE(SetNumber(&stats, "hits", 3).ok());
  EXPECT_EQ(stats.hits(), 3u);
  EXPECT_TRUE(SetNumber(&stats, "prefetch.boosted", 4).ok());
  EXPECT_EQ(stats.prefetch().boosted(), 4u);
  EXPECT_TRUE(SetNumber(&stats, "offline", 1).ok());
  EXPECT_TRUE(stats.offline());
  for (const char* bad : {"no_such_counter", "prefetch.no_such_counter", "hits.x", "prefetch",
                          "namespaces", "namespaces.hits", "warm_jobs", ""}) {
    core::Status st = SetNumber(&stats, bad, 1);
    EXPECT_EQ(st.code(), core::StatusCode::kInternal) << bad;
  }
}

// The sample lines of `text`, by value.
std::multiset<std::string> SampleValues(const std::string& text) {
  std::multiset<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    out.insert(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

TEST(StatsProto, EveryNumberReachesPrometheus) {
  const core::StatsSnapshot s = Numbered();
  v1::Stats stats;
  ASSERT_TRUE(ToProto(s, &stats).ok());
  const std::string text = RenderPrometheus(stats);
  const auto values = SampleValues(text);
  for (const auto& [name, value] : Names(s)) {
    if (name == "offline") continue;  // 1, like a histogram bucket
    EXPECT_EQ(values.count(std::to_string(value)), 1u) << name << "\n" << text;
  }
  for (const auto& [name, field] : core::ReadCounters::Values::Fields()) {
    EXPECT_EQ(values.count(std::to_string(s.namespaces[0].values.*field)), 1u) << name;
  }
  for (const auto& [name, field] : core::ClientStats::Fields()) {
    EXPECT_EQ(values.count(std::to_string(s.http_clients[0].*field)), 1u) << name;
  }
  for (const auto& [name, field] : core::ServerStats::Fields()) {
    EXPECT_EQ(values.count(std::to_string(s.network.servers[0].*field)), 1u) << name;
  }
  // Names the README, dashboards and the integration tests use.
  for (const std::string& line : std::vector<std::string>{
           "\nperch_hits_total " + std::to_string(s.totals.hits) + "\n",
           "\nperch_offline 1\n",
           "\nperch_namespace_misses_total{namespace=\"/ns/a\"} ",
           "\nperch_http_requests_total{client=\"curl\"} ",
           "\nperch_server_digest_mismatches_total{server=\"https://cache.example:8443\"} ",
           "\nperch_fuse_errors_total{class=\"NotFound\"} ",
           "\nperch_fetches_queued{class=\"demand\"} ",
           "\nperch_fetches_started_total{class=\"speculative\"} ",
           "\nperch_prefetch_hinted_files_total ",
           "\nperch_fuse_op_duration_seconds_bucket{op=\"read\",le=\"0.005\"} 1\n",
           "\nperch_origin_get_duration_seconds_count 1\n",
           "\n# TYPE perch_cached_bytes gauge\n",
           "\n# TYPE perch_evictions_total counter\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  // Every family has its help, once.
  std::istringstream in(text);
  std::set<std::string> families;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("# HELP ")) continue;
    std::string rest = line.substr(7);
    const size_t space = rest.find(' ');
    EXPECT_NE(space, std::string::npos) << line;
    EXPECT_GT(rest.size(), space + 1) << line;
    EXPECT_TRUE(families.insert(rest.substr(0, space)).second) << line;
  }
  EXPECT_EQ(text.find("job"), std::string::npos);  // warm jobs are omitted
}

TEST(StatsProto, TheFederationLabelOnlyWhenNamespacesDiffer) {
  core::StatsSnapshot s = Numbered();
  s.namespaces.push_back({"pelican://fed.example/", "/ns/b", {}});
  v1::Stats one;
  ASSERT_TRUE(ToProto(s, &one).ok());
  EXPECT_EQ(RenderPrometheus(one).find("federation="), std::string::npos);
  s.namespaces.push_back({"pelican://other.example/", "/ns/b", {}});
  v1::Stats two;
  ASSERT_TRUE(ToProto(s, &two).ok());
  EXPECT_NE(RenderPrometheus(two).find(
                "perch_namespace_hits_total{namespace=\"/ns/b\",federation=\"pelican://"
                "other.example/\"} 0\n"),
            std::string::npos)
      << RenderPrometheus(two);
}

TEST(StatsProto, EveryNumberReachesJsonAsANumber) {
  const core::StatsSnapshot s = Numbered();
  v1::Stats stats;
  ASSERT_TRUE(ToProto(s, &stats).ok());
  const nlohmann::json j = ctl::ProtoJson(stats);
  for (const auto& [name, value] : Names(s)) {
    const nlohmann::json* at = &j;
    for (size_t from = 0;;) {
      const size_t dot = name.find('.', from);
      ASSERT_TRUE(at->contains(name.substr(from, dot - from))) << name << "\n" << j.dump(2);
      at = &(*at)[name.substr(from, dot - from)];
      if (dot == std::string::npos) break;
      from = dot + 1;
    }
    if (name == "offline") {
      EXPECT_EQ(*at, true);
    } else {
      EXPECT_TRUE(at->is_number_unsigned()) << name << " " << at->dump();
      EXPECT_EQ(*at, value) << name;
    }
  }
  EXPECT_EQ(j["namespaces"][0]["path"], "/ns/a");
  EXPECT_EQ(j["namespaces"][0]["counters"]["hits"], s.namespaces[0].values.hits);
  EXPECT_EQ(j["http_clients"][0]["client"], "curl");
  EXPECT_EQ(j["errors"][0]["error_class"], "NotFound");
  EXPECT_EQ(j["fuse_ops"][0]["latency"]["count"], 1u);
  EXPECT_EQ(j["warm_jobs"][0]["job_id"], 7u);
  // A zero is printed, not left out.
  EXPECT_EQ(ctl::ProtoJson(v1::Stats())["hits"], 0u);
}

// Numbers outside repeated messages go on a line of `perchctl stats`: each
// needs a group, its own or its message field's.
void Ungrouped(const google::protobuf::Descriptor* d, const std::string& group,
               std::vector<std::string>* out) {
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    const v1::Metric& opt = f->options().GetExtension(v1::metric);
    const std::string g = opt.group().empty() ? group : opt.group();
    if (f->is_repeated() || f->message_type() == v1::Histogram::descriptor()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Ungrouped(f->message_type(), g, out);
    } else if (g.empty()) {
      out->push_back(f->full_name());
    }
  }
}

TEST(StatsProto, EveryNumberHasAGroupForPeople) {
  std::vector<std::string> ungrouped;
  Ungrouped(v1::Stats::descriptor(), "", &ungrouped);
  EXPECT_TRUE(ungrouped.empty()) << ::testing::PrintToString(ungrouped);
}

TEST(StatsProto, TheHumanFormShowsEveryGroupAndTable) {
  v1::Stats stats;
  ASSERT_TRUE(ToProto(Numbered(), &stats).ok());
  ::testing::internal::CaptureStdout();
  ctl::PrintStats(stats);
  const std::string text = ::testing::internal::GetCapturedStdout();
  for (const char* part :
       {"reads     hits 1,000, misses 1,001, hit ratio 50.0 %, bytes from cache 1002 B",
        "cache     ", "network   ", "errors    ", "NotFound ", "prefetch  sequential blocks ",
        "perchd    uptime 16m",
        "LATENCY     COUNT     P50     P99    MEAN\nread            1  5.0 ms  5.0 ms  3.0 "
        "ms\norigin_get      1  5.0 ms  5.0 ms  3.0 ms\n",
        "NAMESPACE   HITS  MISSES  HIT RATIO", "CLIENT  REQUESTS", "WARM"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
  EXPECT_EQ(text.find("FEDERATION"), std::string::npos) << text;  // one federation
}

// Issue 28: a name that is not UTF-8 made every reply that carried it fail
// to parse in perchctl ("No message returned for unary request").
TEST(ProtoTextTest, PathsThatAreNotUtf8AreShownEscapedAndPagedExactly) {
  EXPECT_EQ(ProtoText("/ns/caf\xc3\xa9 100%"), "/ns/caf\xc3\xa9 100%");
  EXPECT_EQ(ProtoText("/ns/a\xff\xfe"
                      "b"),
            "/ns/a\\xff\\xfeb");
  EXPECT_EQ(ProtoText("cut\xe2\x82"), "cut\\xe2\\x82");
  EXPECT_EQ(ProtoText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  v1::CachedObject o;
  o.set_path(
      ProtoText("/ns/a\xff\xfe"
                "b"));
  std::string wire;
  ASSERT_TRUE(o.SerializeToString(&wire));
  v1::CachedObject back;
  EXPECT_TRUE(back.ParseFromString(wire));
  const std::string path("/ns/a\xff\x00z", 8);
  std::string again;
  ASSERT_TRUE(PathOfPageToken(PageToken(path), &again));
  EXPECT_EQ(again, path);
  EXPECT_FALSE(PathOfPageToken("/ns/plain", &again));
  EXPECT_FALSE(PathOfPageToken("abc", &again));
}

}  // namespace
}  // namespace perch::control

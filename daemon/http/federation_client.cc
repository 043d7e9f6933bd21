#include "daemon/http/federation_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "daemon/http/discovery.h"
#include "daemon/http/pelican_headers.h"
#include "daemon/http/propfind.h"

namespace perch::http {

using core::Clock;
using core::Deadline;
using core::FailureSite;
using core::ObjectPath;
using core::Result;
using core::Status;
using core::StatusCode;

namespace {

std::string JsonMessage(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (!doc.is_discarded() && doc.is_object() && doc.contains("msg") && doc["msg"].is_string()) {
    return doc["msg"].get<std::string>();
  }
  std::string s = body.substr(0, 200);
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// Maps an unexpected HTTP status from a data server to a Status.
Status StatusFromHttp(long code, const std::string& what, FailureSite site, const std::string& body) {
  std::string msg = what + ": HTTP " + std::to_string(code);
  if (!body.empty()) msg += " (" + JsonMessage(body) + ")";
  switch (code) {
    case 404:
      return core::NotFoundError(msg, site);
    case 401:
    case 403:
      return core::PermissionDeniedError(msg, site);
    case 416:
      return core::CorruptError(msg + ": range not satisfiable (object changed?)", site);
    default:
      return core::UnavailableError(msg, site);
  }
}

bool IsRedirect(long code) { return code == 301 || code == 302 || code == 303 || code == 307 || code == 308; }

}  // namespace

// One director answer, valid for every object below `prefix`.
struct FederationClient::NamespaceEntry {
  ObjectPath prefix;                     // federation path of the namespace
  bool require_token = false;
  std::string collections_url;           // origin base for PROPFIND ("" = no listings)
  std::vector<std::string> server_bases; // URL of the namespace root on each server, best first
  std::vector<std::string> issuers;
  Clock::time_point expires;
  bool cacheable = true;                 // false when the Link URLs could not be generalised

  // URL of federation object `path` (below prefix) on server i.
  std::string ServerUrl(size_t i, const ObjectPath& path) const {
    std::string rel = path.str().substr(prefix.IsRoot() ? 0 : prefix.str().size());
    auto p = ObjectPath::Parse(rel.empty() ? "/" : rel);
    return server_bases[i] + (rel.empty() ? "" : PercentEncodePath(*p));
  }
};

class FederationClient::State : public std::enable_shared_from_this<FederationClient::State> {
 public:
  State(CurlLoop& loop, FederationUrl url, FederationClientOptions options)
      : loop_(loop), url_(std::move(url)), options_(std::move(options)), tokens_(options_.token_file) {}

  using NsCallback = std::function<void(Result<std::shared_ptr<const NamespaceEntry>>)>;

  ObjectPath ToFederation(const ObjectPath& rel) const {
    if (url_.path.IsRoot()) return rel;
    if (rel.IsRoot()) return url_.path;
    return *ObjectPath::Parse(url_.path.str() + rel.str());
  }

  // ---- discovery ----
  void WithDirector(Deadline deadline, std::function<void(Result<std::string>)> done) {
    auto now = Clock::now();
    if (!director_.empty() && now < director_expires_) {
      done(director_);
      return;
    }
    if (!discovery_error_.ok() && now < discovery_error_expires_) {
      done(discovery_error_);
      return;
    }
    discovery_waiters_.push_back(std::move(done));
    if (discovery_waiters_.size() > 1) return;
    Discover(deadline, 1);
  }

  void Discover(Deadline deadline, int attempt) {
    counters_.discovery_queries++;
    HttpRequest req;
    req.url = url_.discovery_url + std::string(kDiscoveryPath);
    req.deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    req.connect_timeout = options_.connect_timeout;
    req.max_body = 1 << 20;
    auto self = shared_from_this();
    loop_.Submit(std::move(req), [self, deadline, attempt](Result<HttpResponse> r) {
      Result<std::string> result = core::InternalError("unset");
      if (!r.ok()) {
        if (r.status().retryable() && attempt < 3 && Clock::now() + std::chrono::seconds(1) < deadline) {
          self->loop_.PostAfter(std::chrono::seconds(1),
                                [self, deadline, attempt] { self->Discover(deadline, attempt + 1); });
          return;
        }
        result = core::UnavailableError("federation discovery at " + self->url_.discovery_url +
                                            " failed: " + r.status().message(),
                                        FailureSite::kDirector);
      } else if (r->head.status != 200) {
        result = Status(r->head.status >= 500 ? StatusCode::kUnavailable : StatusCode::kNotFound,
                        "federation discovery at " + self->url_.discovery_url + " answered HTTP " +
                            std::to_string(r->head.status),
                        FailureSite::kDirector, r->head.status >= 500);
      } else {
        auto info = ParseDiscoveryDocument(r->body);
        if (info.ok()) {
          result = info->director_endpoint;
        } else {
          result = info.status().WithContext("federation discovery at " + self->url_.discovery_url);
        }
      }
      if (result.ok()) {
        self->director_ = *result;
        self->director_expires_ = Clock::now() + self->options_.discovery_ttl;
        spdlog::info("federation {}: director is {}", self->url_.ToString(), self->director_);
      } else {
        self->discovery_error_ = result.status();
        self->discovery_error_expires_ = Clock::now() + self->options_.discovery_failure_ttl;
        spdlog::warn("{}", result.status().ToString());
      }
      auto waiters = std::move(self->discovery_waiters_);
      self->discovery_waiters_.clear();
      for (auto& w : waiters) w(result);
    });
  }

  // ---- director ----
  std::shared_ptr<const NamespaceEntry> LookupNamespace(const ObjectPath& fed_path) {
    std::shared_ptr<const NamespaceEntry> best;
    auto now = Clock::now();
    for (auto it = namespaces_.begin(); it != namespaces_.end();) {
      if (now >= it->second->expires) {
        it = namespaces_.erase(it);
        continue;
      }
      if (fed_path.HasPrefix(it->second->prefix) &&
          (!best || it->second->prefix.str().size() > best->prefix.str().size())) {
        best = it->second;
      }
      ++it;
    }
    return best;
  }

  void Resolve(const ObjectPath& fed_path, Deadline deadline, NsCallback done) {
    if (auto hit = LookupNamespace(fed_path)) {
      done(hit);
      return;
    }
    auto& waiters = director_waiters_[fed_path.str()];
    waiters.push_back(std::move(done));
    if (waiters.size() > 1) return;
    auto self = shared_from_this();
    WithDirector(deadline, [self, fed_path, deadline](Result<std::string> director) {
      if (!director.ok()) {
        self->FinishResolve(fed_path, director.status());
        return;
      }
      self->QueryDirector(*director, fed_path, deadline, 0);
    });
  }

  void FinishResolve(const ObjectPath& fed_path, Result<std::shared_ptr<const NamespaceEntry>> r) {
    auto it = director_waiters_.find(fed_path.str());
    if (it == director_waiters_.end()) return;
    auto waiters = std::move(it->second);
    director_waiters_.erase(it);
    for (auto& w : waiters) w(r);
  }

  void QueryDirector(const std::string& director, const ObjectPath& fed_path, Deadline deadline,
                     int attempt) {
    counters_.director_queries++;
    HttpRequest req;
    req.url = director + PercentEncodePath(fed_path);
    req.deadline = deadline;
    req.connect_timeout = options_.connect_timeout;
    req.max_body = 1 << 20;
    auto self = shared_from_this();
    loop_.Submit(std::move(req), [self, director, fed_path, deadline, attempt](Result<HttpResponse> r) {
      if (!r.ok()) {
        self->FinishResolve(fed_path, r.status().code() == StatusCode::kDeadlineExceeded
                                          ? r.status()
                                          : core::UnavailableError("director " + director + ": " +
                                                                       r.status().message(),
                                                                   FailureSite::kDirector));
        return;
      }
      long code = r->head.status;
      bool from_pelican = r->head.Get("server").value_or("").starts_with("pelican/");
      bool retry = code == 429 || (!from_pelican && (code == 502 || code == 500 || code == 503));
      auto backoff = self->options_.director_backoff * (attempt + 1) + self->options_.director_backoff;
      if (retry && attempt + 1 < self->options_.director_attempts && Clock::now() + backoff < deadline) {
        self->loop_.PostAfter(std::chrono::duration_cast<std::chrono::milliseconds>(backoff),
                              [self, director, fed_path, deadline, attempt] {
                                self->QueryDirector(director, fed_path, deadline, attempt + 1);
                              });
        return;
      }
      self->FinishResolve(fed_path, self->ParseDirectorAnswer(fed_path, *r));
    });
  }

  Result<std::shared_ptr<const NamespaceEntry>> ParseDirectorAnswer(const ObjectPath& fed_path,
                                                                    const HttpResponse& r) {
    long code = r.head.status;
    std::string what = "director answer for " + fed_path.str();
    if (code == 404) {
      return core::NotFoundError(what + ": " + JsonMessage(r.body), FailureSite::kDirector);
    }
    if (code == 401 || code == 403 || code == 405) {
      return core::PermissionDeniedError(what + ": HTTP " + std::to_string(code) + " " +
                                             JsonMessage(r.body),
                                         FailureSite::kDirector);
    }
    if (!IsRedirect(code) && code != 200) {
      return Status(StatusCode::kUnavailable, what + ": HTTP " + std::to_string(code) + " " +
                                                  JsonMessage(r.body),
                    FailureSite::kDirector, code >= 500 || code == 429);
    }
    auto entry = std::make_shared<NamespaceEntry>();
    entry->expires = Clock::now() + options_.namespace_ttl;
    // Namespace.
    if (auto ns = r.head.Get("x-pelican-namespace")) {
      auto parsed = ParseNamespaceHeader(*ns);
      if (!parsed.ok()) return core::CorruptError(what + ": " + parsed.status().message(), FailureSite::kDirector);
      auto prefix = ObjectPath::Parse(parsed->prefix);
      if (!prefix.ok() || !fed_path.HasPrefix(*prefix)) {
        return core::CorruptError(what + ": namespace '" + parsed->prefix +
                                      "' does not contain the object",
                                  FailureSite::kDirector);
      }
      entry->prefix = *prefix;
      entry->require_token = parsed->require_token;
      entry->collections_url = parsed->collections_url;
    } else {
      entry->prefix = fed_path;  // no namespace: valid for this object only
      entry->cacheable = false;
    }
    auto issuers = ParseAuthorizationHeaders(r.head.GetAll("x-pelican-authorization"));
    if (!issuers.ok()) return core::CorruptError(what + ": " + issuers.status().message(), FailureSite::kDirector);
    entry->issuers = *issuers;
    // Servers: all Link lines joined, or Location alone.
    std::vector<LinkEntry> links;
    std::vector<std::string> link_lines = r.head.GetAll("link");
    if (!link_lines.empty()) {
      std::string joined;
      for (const auto& l : link_lines) joined += (joined.empty() ? "" : ", ") + l;
      auto parsed = ParseLinkHeader(joined);
      if (!parsed.ok()) return core::CorruptError(what + ": " + parsed.status().message(), FailureSite::kDirector);
      links = *parsed;
    } else if (auto loc = r.head.Get("location")) {
      std::string l = loc->substr(0, loc->find('?'));  // drop authz= and other params
      links.push_back(LinkEntry{l, 1, -1});
    } else {
      return core::CorruptError(what + ": neither Link nor Location header", FailureSite::kDirector);
    }
    std::string rel = fed_path.str().substr(entry->prefix.IsRoot() ? 0 : entry->prefix.str().size());
    std::string encoded_rel = rel.empty() ? "" : PercentEncodePath(*ObjectPath::Parse(rel));
    int rel_depth = static_cast<int>(ObjectPath::Parse(rel.empty() ? "/" : rel)->Segments().size());
    for (const LinkEntry& link : links) {
      if (entry->server_bases.size() >= options_.max_servers) break;
      auto split = SplitHttpUrl(link.url);
      if (!split.ok()) continue;
      std::string path = split->path;
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      // The Link URL is server base + object path; strip the part below the
      // namespace (its depth) to get the namespace root on that server.
      if (link.depth >= 0 && link.depth != rel_depth) {
        entry->cacheable = false;
      }
      if (!encoded_rel.empty()) {
        if (path.size() >= encoded_rel.size() &&
            path.compare(path.size() - encoded_rel.size(), encoded_rel.size(), encoded_rel) == 0) {
          path.resize(path.size() - encoded_rel.size());
        } else {
          // Could not generalise (unexpected encoding): use the URL for this object only.
          entry->cacheable = false;
          entry->prefix = fed_path;
          entry->server_bases.push_back(split->base + split->path);
          continue;
        }
      }
      entry->server_bases.push_back(split->base + path);
    }
    if (entry->server_bases.empty()) {
      return core::CorruptError(what + ": no usable server URL", FailureSite::kDirector);
    }
    if (!entry->cacheable) entry->prefix = fed_path;
    if (entry->cacheable) namespaces_[entry->prefix.str()] = entry;
    return std::shared_ptr<const NamespaceEntry>(entry);
  }

  void Invalidate(const std::shared_ptr<const NamespaceEntry>& entry) {
    auto it = namespaces_.find(entry->prefix.str());
    if (it != namespaces_.end() && it->second == entry) namespaces_.erase(it);
  }

  // ---- tokens ----
  Result<std::vector<std::string>> AuthHeaders(const NamespaceEntry& ns, const ObjectPath& fed_path) {
    if (!ns.require_token) return std::vector<std::string>{};
    auto now = Clock::now();
    auto cached = token_cache_.find(ns.prefix.str());
    if (cached != token_cache_.end() && now < cached->second.second) {
      return std::vector<std::string>{"Authorization: Bearer " + cached->second.first};
    }
    auto found = tokens_.Find(TokenRequest{fed_path.str(), ns.prefix.str(), ns.issuers, url_.token_name});
    if (!found.ok()) {
      return core::PermissionDeniedError("namespace " + ns.prefix.str() + " requires a token: " +
                                             found.status().message(),
                                         FailureSite::kLocal);
    }
    if (!found->acceptable) {
      spdlog::warn("namespace {}: no token found is acceptable for it; using the one from {}",
                   ns.prefix.str(), found->source);
    } else {
      spdlog::debug("namespace {}: using token from {}", ns.prefix.str(), found->source);
    }
    token_cache_[ns.prefix.str()] = {found->token, now + options_.token_ttl};
    return std::vector<std::string>{"Authorization: Bearer " + found->token};
  }

  // ---- PROPFIND ----
  void Propfind(const ObjectPath& rel, int depth, Deadline deadline,
                std::function<void(Result<std::vector<DavResponse>>, std::string request_path)> done) {
    ObjectPath fed = ToFederation(rel);
    auto self = shared_from_this();
    Resolve(fed, deadline, [self, fed, depth, deadline, done = std::move(done)](
                               Result<std::shared_ptr<const NamespaceEntry>> ns) mutable {
      if (!ns.ok()) {
        done(ns.status(), "");
        return;
      }
      const NamespaceEntry& entry = **ns;
      if (entry.collections_url.empty()) {
        done(core::PermissionDeniedError("namespace " + entry.prefix.str() +
                                             " offers no listings (the director sent no collections-url)",
                                         FailureSite::kDirector),
             "");
        return;
      }
      auto auth = self->AuthHeaders(entry, fed);
      if (!auth.ok()) {
        done(auth.status(), "");
        return;
      }
      auto split = SplitHttpUrl(entry.collections_url);
      std::string base_path = split.ok() ? split->path : "";
      std::string request_path = base_path + PercentEncodePath(fed);
      HttpRequest req;
      req.method = "PROPFIND";
      req.url = entry.collections_url + PercentEncodePath(fed) + (depth == 1 && !fed.IsRoot() ? "/" : "");
      req.headers = *auth;
      req.headers.push_back("Depth: " + std::to_string(depth));
      req.headers.push_back("Content-Type: application/xml; charset=utf-8");
      req.body = kPropfindBody;
      req.deadline = deadline;
      req.connect_timeout = self->options_.connect_timeout;
      req.max_body = 256 << 20;
      self->counters_.propfinds++;
      std::string what = "PROPFIND " + fed.str();
      self->loop_.Submit(std::move(req), [what, request_path, done = std::move(done)](Result<HttpResponse> r) {
        if (!r.ok()) {
          done(r.status().WithContext(what), request_path);
          return;
        }
        if (r->head.status != 207) {
          done(StatusFromHttp(r->head.status, what, FailureSite::kOrigin, r->body), request_path);
          return;
        }
        HrefStyle style;
        style.prefer_raw = r->head.Get("server").value_or("").starts_with("XrootD");
        style.request_path = request_path;
        auto parsed = ParseMultistatus(r->body, style);
        if (!parsed.ok()) {
          done(Status(StatusCode::kCorrupt, what + ": " + parsed.status().message(), FailureSite::kOrigin, true),
               request_path);
          return;
        }
        done(std::move(*parsed), request_path);
      });
    });
  }

  // ---- range reads ----
  void StartRead(std::shared_ptr<ReadOp> op);
  void Attempt(std::shared_ptr<ReadOp> op);
  void AttemptDone(std::shared_ptr<ReadOp> op, Result<HttpResponse> r);
  void FinishRead(std::shared_ptr<ReadOp> op, Result<core::Bytes> r);

  // Remembers which server last delivered bytes of `fed_path` (for xattrs);
  // a bounded map, cleared when full. Any thread.
  void NoteServer(const std::string& fed_path, const std::string& server) {
    std::lock_guard<std::mutex> l(served_mu_);
    if (served_by_.size() >= 100000) served_by_.clear();
    served_by_[fed_path] = server;
  }
  std::string ServedBy(const std::string& fed_path) {
    std::lock_guard<std::mutex> l(served_mu_);
    auto it = served_by_.find(fed_path);
    return it == served_by_.end() ? std::string() : it->second;
  }

  CurlLoop& loop_;
  FederationUrl url_;
  FederationClientOptions options_;
  FederationCounters counters_;
  std::mutex served_mu_;
  std::unordered_map<std::string, std::string> served_by_;  // Protected by served_mu_
  TokenFinder tokens_;
  std::function<void(const std::string&, uint64_t)> progress_hook_;

  // Loop-thread state.
  std::string director_;
  Clock::time_point director_expires_;
  Status discovery_error_;
  Clock::time_point discovery_error_expires_;
  std::vector<std::function<void(Result<std::string>)>> discovery_waiters_;
  std::map<std::string, std::shared_ptr<const NamespaceEntry>> namespaces_;
  std::map<std::string, std::vector<NsCallback>> director_waiters_;
  std::map<std::string, Clock::time_point> penalized_until_;  // server base -> time
  std::map<std::string, std::pair<std::string, Clock::time_point>> token_cache_;
};

struct FederationClient::ReadOp {
  ObjectPath fed_path;
  core::ObjectVersion version;
  core::ByteRange range;
  Deadline deadline;
  std::function<void(Result<core::Bytes>)> done;

  std::shared_ptr<const NamespaceEntry> ns;
  std::vector<size_t> order;    // server indexes in the order to try
  size_t next = 0;              // position in `order`
  bool refreshed = false;       // asked the director again after exhausting the list
  std::string buffer;           // bytes of `range` received so far, in order
  std::vector<std::string> auth;
  std::map<std::string, std::string> etag_by_server;
  // Per attempt.
  std::string url;
  std::string server;
  uint64_t attempt_start = 0;
  bool head_checked = false;
  Status head_error;
  std::string error_body;
  // Outcome bookkeeping.
  int not_found = 0, denied = 0, attempts = 0;
  Status last_error;
};

void FederationClient::State::StartRead(std::shared_ptr<ReadOp> op) {
  auto self = shared_from_this();
  Resolve(op->fed_path, op->deadline, [self, op](Result<std::shared_ptr<const NamespaceEntry>> ns) {
    if (!ns.ok()) {
      self->FinishRead(op, ns.status());
      return;
    }
    op->ns = *ns;
    auto auth = self->AuthHeaders(*op->ns, op->fed_path);
    if (!auth.ok()) {
      self->FinishRead(op, auth.status());
      return;
    }
    op->auth = *auth;
    // Healthy servers first in the director's order, then penalised ones.
    op->order.clear();
    op->next = 0;
    auto now = Clock::now();
    std::vector<size_t> penalised;
    for (size_t i = 0; i < op->ns->server_bases.size(); ++i) {
      auto it = self->penalized_until_.find(op->ns->server_bases[i]);
      (it != self->penalized_until_.end() && now < it->second ? penalised : op->order).push_back(i);
    }
    op->order.insert(op->order.end(), penalised.begin(), penalised.end());
    self->Attempt(op);
  });
}

void FederationClient::State::Attempt(std::shared_ptr<ReadOp> op) {
  if (Clock::now() >= op->deadline) {
    FinishRead(op, core::DeadlineExceededError("read of " + op->fed_path.str() + " ran past its deadline" +
                                               (op->last_error.ok() ? "" : "; last error: " + op->last_error.message())));
    return;
  }
  if (op->next >= op->order.size()) {
    if (!op->refreshed && op->not_found == 0 && op->denied == 0) {
      // Every server failed: the director's list may be stale. Ask once more.
      op->refreshed = true;
      Invalidate(op->ns);
      StartRead(op);
      return;
    }
    Status final;
    if (op->not_found == op->attempts && op->attempts > 0) {
      final = core::NotFoundError(op->fed_path.str() + " not found on any server", FailureSite::kOrigin);
    } else if (op->denied > 0) {
      final = core::PermissionDeniedError("read of " + op->fed_path.str() + " refused: " +
                                              op->last_error.message(),
                                          FailureSite::kOrigin);
    } else {
      final = core::UnavailableError("read of " + op->fed_path.str() + " failed on all " +
                                         std::to_string(op->order.size()) +
                                         " servers; last error: " + op->last_error.message(),
                                     op->last_error.where());
    }
    FinishRead(op, final);
    return;
  }
  size_t server = op->order[op->next];
  op->server = op->ns->server_bases[server];
  op->url = op->ns->ServerUrl(server, op->fed_path);
  op->attempt_start = op->range.offset + op->buffer.size();
  op->head_checked = false;
  op->head_error = Status();
  op->error_body.clear();
  op->attempts++;
  if (op->buffer.size() > 0) counters_.resumes++;
  uint64_t last = op->range.end() - 1;

  HttpRequest req;
  req.url = op->url;
  req.headers = op->auth;
  req.headers.push_back("Range: bytes=" + std::to_string(op->attempt_start) + "-" + std::to_string(last));
  req.deadline = op->deadline;
  req.connect_timeout = options_.connect_timeout;
  req.low_speed_bytes = options_.low_speed_bytes;
  req.low_speed_time = options_.low_speed_time;
  auto self = shared_from_this();
  req.on_data = [self, op, last](const HttpHead& head, std::string_view chunk) -> bool {
    if (!op->head_checked) {
      op->head_checked = true;
      if (head.status == 206) {
        auto cr = ParseContentRange(head.Get("content-range").value_or(""));
        if (!cr.ok()) {
          op->head_error = core::CorruptError(op->server + ": " + cr.status().message());
        } else if (cr->first != op->attempt_start || cr->last > last) {
          op->head_error = core::CorruptError(
              op->server + ": asked for bytes " + std::to_string(op->attempt_start) + "-" +
              std::to_string(last) + ", got Content-Range " + head.Get("content-range").value_or(""));
        } else if (op->version.size > 0 && cr->total >= 0 &&
                   static_cast<uint64_t>(cr->total) != op->version.size) {
          op->head_error = core::CorruptError(op->server + ": object size is " + std::to_string(cr->total) +
                                              ", expected " + std::to_string(op->version.size));
        }
        if (auto etag = head.Get("etag")) {
          auto [it, inserted] = op->etag_by_server.emplace(op->server, *etag);
          if (!inserted && it->second != *etag) {
            op->head_error = core::CorruptError(op->server + ": ETag changed from " + it->second +
                                                " to " + *etag + " (object modified?)");
          }
        }
      } else if (head.status == 200) {
        if (op->attempt_start != 0 || !op->version.size || op->range.length != op->version.size) {
          op->head_error = core::CorruptError(op->server + ": ignored the Range header (HTTP 200)");
        }
      }
      if (!op->head_error.ok()) return false;
    }
    if (head.status != 206 && head.status != 200) {
      if (op->error_body.size() < 4096) op->error_body.append(chunk.substr(0, 4096));
      return true;
    }
    self->counters_.body_bytes += chunk.size();
    if (op->buffer.size() + chunk.size() > op->range.length) {
      op->head_error = core::CorruptError(op->server + ": sent more bytes than the range");
      return false;
    }
    op->buffer.append(chunk);
    if (self->progress_hook_) self->progress_hook_(op->url, op->buffer.size());
    return true;
  };
  counters_.range_gets++;
  loop_.Submit(std::move(req), [self, op](Result<HttpResponse> r) { self->AttemptDone(op, std::move(r)); });
}

void FederationClient::State::AttemptDone(std::shared_ptr<ReadOp> op, Result<HttpResponse> r) {
  Status failure;
  if (!op->head_error.ok()) {
    failure = op->head_error;
  } else if (!r.ok()) {
    if (r.status().code() == StatusCode::kCancelled) {
      FinishRead(op, r.status());  // shutting down: no failover
      return;
    }
    if (r.status().code() == StatusCode::kDeadlineExceeded) {
      op->last_error = r.status();
      Attempt(op);  // reports the deadline
      return;
    }
    failure = r.status();
  } else if (r->head.status == 206 || r->head.status == 200) {
    if (op->buffer.size() == op->range.length) {
      FinishRead(op, std::move(op->buffer));
      return;
    }
    if (op->buffer.size() > op->attempt_start - op->range.offset) {
      Attempt(op);  // the server sent a shorter range than asked: continue from it
      return;
    }
    failure = core::CorruptError(op->server + ": empty body for a range request");
  } else {
    long code = r->head.status;
    failure = StatusFromHttp(code, "GET " + op->url, FailureSite::kCache, op->error_body);
    if (code == 404) op->not_found++;
    if (code == 401 || code == 403) op->denied++;
  }
  op->last_error = failure;
  bool server_fault = failure.code() != StatusCode::kNotFound && failure.code() != StatusCode::kPermissionDenied;
  if (server_fault) {
    penalized_until_[op->server] = Clock::now() + options_.server_penalty;
    spdlog::warn("read of {}: {} failed ({}); {} bytes kept, trying the next server",
                 op->fed_path.str(), op->server, failure.ToString(), op->buffer.size());
  }
  counters_.failovers++;
  op->next++;
  Attempt(op);
}

void FederationClient::State::FinishRead(std::shared_ptr<ReadOp> op, Result<core::Bytes> r) {
  if (r.ok()) {
    counters_.bytes_delivered += r->size();
    if (!op->server.empty()) NoteServer(op->fed_path.str(), op->server);
  }
  auto done = std::move(op->done);
  op->done = nullptr;
  if (done) done(std::move(r));
}

FederationClient::FederationClient(CurlLoop& loop, FederationUrl url, FederationClientOptions options)
    : url_(url), loop_(loop),
      state_(std::make_shared<State>(loop, std::move(url), std::move(options))) {}

FederationClient::~FederationClient() = default;

const FederationCounters& FederationClient::counters() const { return state_->counters_; }

std::string FederationClient::LastServer(const ObjectPath& path) const {
  return state_->ServedBy(state_->ToFederation(path).str());
}

void FederationClient::Stat(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<core::FileAttr>)> done) {
  auto state = state_;
  loop_.Post([state, path, deadline, done = std::move(done)]() mutable {
    ObjectPath fed = state->ToFederation(path);
    state->Propfind(path, 0, deadline, [fed, done = std::move(done)](
                                           Result<std::vector<DavResponse>> r, std::string) {
      if (!r.ok()) {
        done(r.status());
        return;
      }
      for (const DavResponse& resp : *r) {
        if (resp.href_path.ends_with(fed.str())) {
          done(resp.attr);
          return;
        }
      }
      if (r->size() == 1) {
        done(r->front().attr);
        return;
      }
      done(core::CorruptError("PROPFIND of " + fed.str() + " does not describe it", FailureSite::kOrigin));
    });
  });
}

void FederationClient::List(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  auto state = state_;
  loop_.Post([state, path, deadline, done = std::move(done)]() mutable {
    state->Propfind(path, 1, deadline, [state, path, deadline, done = std::move(done)](
                                           Result<std::vector<DavResponse>> r,
                                           std::string request_path) mutable {
      if (!r.ok()) {
        // XRootD answers a Depth-1 PROPFIND on a file with 500: tell the caller plainly.
        if (r.status().code() == StatusCode::kUnavailable) {
          state->Propfind(path, 0, deadline, [done = std::move(done), first = r.status()](
                                                 Result<std::vector<DavResponse>> r0, std::string) {
            if (r0.ok() && r0->size() == 1 && !r0->front().attr.is_dir) {
              done(core::InvalidArgumentError("not a directory"));
            } else {
              done(first);
            }
          });
          return;
        }
        done(r.status());
        return;
      }
      auto listing = InterpretListing(*r, request_path);
      if (!listing.ok()) {
        done(listing.status());
        return;
      }
      done(std::move(listing->children));
    });
  });
}

void FederationClient::ReadRange(const ObjectPath& path, const core::ObjectVersion& version,
                                 core::ByteRange range, Deadline deadline,
                                 std::function<void(Result<core::Bytes>)> done) {
  if (version.size > 0) {
    if (range.offset >= version.size) range.length = 0;
    range.length = std::min(range.length, version.size - std::min(range.offset, version.size));
  }
  if (range.length == 0) {
    loop_.Post([done = std::move(done)] { done(core::Bytes()); });
    return;
  }
  auto op = std::make_shared<ReadOp>();
  op->version = version;
  op->range = range;
  op->deadline = deadline;
  op->done = std::move(done);
  op->buffer.reserve(range.length);
  auto state = state_;
  loop_.Post([state, op, path] {
    op->fed_path = state->ToFederation(path);
    state->StartRead(op);
  });
}

void FederationClient::SetProgressHookForTest(std::function<void(const std::string&, uint64_t)> hook) {
  auto state = state_;
  loop_.Post([state, hook = std::move(hook)]() mutable { state->progress_hook_ = std::move(hook); });
}

void FederationClient::InvalidateForTest() {
  auto state = state_;
  loop_.Post([state] {
    state->namespaces_.clear();
    state->director_.clear();
    state->discovery_error_ = Status();
  });
}

}  // namespace perch::http

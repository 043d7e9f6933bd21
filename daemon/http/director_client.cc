#include "daemon/http/director_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "daemon/core/check.h"
#include "daemon/core/log_escape.h"
#include "daemon/http/discovery.h"
#include "daemon/http/pelican_headers.h"

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
    return core::EscapeForLog(doc["msg"].get<std::string>(), 512);
  }
  return core::EscapeForLog(body, 200);
}

bool IsRedirect(long code) {
  return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

// The part of `encoded` (a URL path, escaped in any consistent way) before
// its last segments when they decode to the segments of `suffix`; nullopt if
// they do not. Directors escape differently (Go's url.URL leaves `$&+,:;=@`
// raw, perch escapes them), so segments are compared decoded; a %2F inside a
// segment is no boundary.
std::optional<std::string> StripDecodedSuffix(const std::string& encoded,
                                              const ObjectPath& suffix) {
  size_t end = encoded.size();
  auto want = suffix.Segments();
  for (auto it = want.rbegin(); it != want.rend(); ++it) {
    size_t slash = end == 0 ? std::string::npos : encoded.rfind('/', end - 1);
    if (slash == std::string::npos) return std::nullopt;
    auto segment = uri::PercentDecode(std::string_view(encoded).substr(slash + 1, end - slash - 1));
    if (!segment.ok() || *segment != *it) return std::nullopt;
    end = slash;
  }
  return encoded.substr(0, end);
}

}  // namespace

Status StatusFromHttp(long code, const std::string& what, FailureSite site,
                      const std::string& body) {
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

std::string NamespaceEntry::ServerUrl(size_t i, const ObjectPath& path) const {
  std::string rel = path.str().substr(prefix.IsRoot() ? 0 : prefix.str().size());
  auto p = ObjectPath::Parse(rel.empty() ? "/" : rel);
  return server_bases[i] + (rel.empty() ? "" : uri::PercentEncodePath(*p));
}

Result<std::shared_ptr<const NamespaceEntry>> ParseDirectorAnswer(const ObjectPath& fed_path,
                                                                  const HttpResponse& r,
                                                                  size_t max_servers,
                                                                  Clock::time_point expires) {
  long code = r.head.status;
  std::string what = "director answer for " + fed_path.str();
  if (code == 404) {
    return core::NotFoundError(what + ": " + JsonMessage(r.body), FailureSite::kDirector);
  }
  if (code == 401 || code == 403 || code == 405) {
    return core::PermissionDeniedError(
        what + ": HTTP " + std::to_string(code) + " " + JsonMessage(r.body),
        FailureSite::kDirector);
  }
  if (!IsRedirect(code) && code != 200) {
    return Status(StatusCode::kUnavailable,
                  what + ": HTTP " + std::to_string(code) + " " + JsonMessage(r.body),
                  FailureSite::kDirector, code >= 500 || code == 429);
  }
  auto entry = std::make_shared<NamespaceEntry>();
  entry->expires = expires;
  if (auto ns = r.head.Get("x-pelican-namespace")) {
    auto parsed = ParseNamespaceHeader(*ns);
    if (!parsed.ok()) {
      return core::CorruptError(what + ": " + parsed.status().message(), FailureSite::kDirector);
    }
    auto prefix = ObjectPath::Parse(parsed->prefix);
    if (!prefix.ok() || !fed_path.HasPrefix(*prefix)) {
      return core::CorruptError(
          what + ": namespace '" + parsed->prefix + "' does not contain the object",
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
  if (!issuers.ok()) {
    return core::CorruptError(what + ": " + issuers.status().message(), FailureSite::kDirector);
  }
  entry->issuers = *issuers;
  // Servers: all Link lines joined, or Location alone.
  std::vector<LinkEntry> links;
  std::vector<std::string> link_lines = r.head.GetAll("link");
  if (!link_lines.empty()) {
    std::string joined;
    for (const auto& l : link_lines) joined += (joined.empty() ? "" : ", ") + l;
    auto parsed = ParseLinkHeader(joined);
    if (!parsed.ok()) {
      return core::CorruptError(what + ": " + parsed.status().message(), FailureSite::kDirector);
    }
    links = *parsed;
  } else if (auto loc = r.head.Get("location")) {
    std::string l = loc->substr(0, loc->find('?'));  // drop authz= and other params
    links.push_back(LinkEntry{l, 1, -1});
  } else {
    return core::CorruptError(what + ": neither Link nor Location header", FailureSite::kDirector);
  }
  std::string rel = fed_path.str().substr(entry->prefix.IsRoot() ? 0 : entry->prefix.str().size());
  const ObjectPath rel_path = PERCH_CHECKED(ObjectPath::Parse(rel.empty() ? "/" : rel));
  int rel_depth = static_cast<int>(rel_path.Segments().size());
  // The Link URL is server base + object path: with the part below the
  // namespace (its depth) stripped, it is the namespace root on that server,
  // and the answer serves every object of the namespace. If any URL does not
  // generalise (a depth that disagrees, a path that does not end in the
  // object's), the answer is for this object only and every URL is used as
  // it came: a base stripped for some servers and not others would send the
  // others' reads to the namespace root.
  struct Server {
    std::string url;   // the Link URL, without a trailing slash
    std::string root;  // the namespace root on that server ("" if it does not generalise)
  };
  std::vector<Server> servers;
  for (const LinkEntry& link : links) {
    if (servers.size() >= max_servers) break;
    auto split = SplitHttpUrl(link.url);
    if (!split.ok()) continue;
    std::string path = split->path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    Server server{split->base + path, ""};
    if (link.depth < 0 || link.depth == rel_depth) {
      if (rel.empty()) {
        server.root = server.url;
      } else if (auto base = StripDecodedSuffix(path, rel_path)) {
        server.root = split->base + *base;
      }
    }
    if (server.root.empty()) entry->cacheable = false;
    servers.push_back(std::move(server));
  }
  if (servers.empty()) {
    return core::CorruptError(what + ": no usable server URL", FailureSite::kDirector);
  }
  if (!entry->cacheable) entry->prefix = fed_path;
  for (const Server& server : servers) {
    entry->server_bases.push_back(entry->cacheable ? server.root : server.url);
  }
  return std::shared_ptr<const NamespaceEntry>(entry);
}

// ---- discovery ----

void DirectorClient::WithDirector(Deadline deadline,
                                  std::function<void(Result<std::string>)> done) {
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

void DirectorClient::Discover(Deadline deadline, int attempt) {
  ctx_->counters.discovery_queries++;
  const std::string& where = ctx_->url.discovery_url;
  HttpRequest req;
  req.url = where + std::string(kDiscoveryPath);
  req.deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 1 << 20;
  auto self = shared_from_this();
  ctx_->loop.Submit(std::move(req), [self, deadline, attempt, where](Result<HttpResponse> r) {
    if (!r.ok()) {
      if (r.status().retryable() && attempt < 3 &&
          Clock::now() + std::chrono::seconds(1) < deadline) {
        self->ctx_->loop.PostAfter(std::chrono::seconds(1), [self, deadline, attempt] {
          self->Discover(deadline, attempt + 1);
        });
        return;
      }
      self->FinishDiscovery(core::UnavailableError(
          "federation discovery at " + where + " failed: " + r.status().message(),
          FailureSite::kDirector));
    } else if (r->head.status != 200) {
      self->FinishDiscovery(Status(
          r->head.status >= 500 ? StatusCode::kUnavailable : StatusCode::kNotFound,
          "federation discovery at " + where + " answered HTTP " + std::to_string(r->head.status),
          FailureSite::kDirector, r->head.status >= 500));
    } else if (auto info = ParseDiscoveryDocument(r->body); info.ok()) {
      self->FinishDiscovery(info->director_endpoint);
    } else {
      self->FinishDiscovery(info.status().WithContext("federation discovery at " + where));
    }
  });
}

void DirectorClient::FinishDiscovery(Result<std::string> result) {
  if (result.ok()) {
    director_ = *result;
    director_expires_ = Clock::now() + ctx_->options.discovery_ttl;
    spdlog::info("federation {}: director is {}", ctx_->url.ToString(),
                 core::EscapeForLog(director_));
  } else {
    discovery_error_ = result.status();
    discovery_error_expires_ = Clock::now() + ctx_->options.discovery_failure_ttl;
    spdlog::warn("{}", core::EscapeForLog(result.status().ToString()));
  }
  auto waiters = std::move(discovery_waiters_);
  discovery_waiters_.clear();
  for (auto& w : waiters) w(result);
}

// ---- director ----

std::shared_ptr<const NamespaceEntry> NamespaceAnswers::Longest(const ObjectPath& fed_path) {
  core::MutexLock l(mu_);
  std::shared_ptr<const NamespaceEntry> best;
  auto now = Clock::now();
  for (auto it = by_prefix_.begin(); it != by_prefix_.end();) {
    if (now >= it->second->expires) {
      it = by_prefix_.erase(it);
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

void NamespaceAnswers::Put(std::shared_ptr<const NamespaceEntry> entry) {
  core::MutexLock l(mu_);
  if (by_prefix_.size() >= NamespaceDirectory::kMaxPrefixes) by_prefix_.clear();
  if (named_.size() < NamespaceDirectory::kMaxPrefixes) named_.insert(entry->prefix.str());
  by_prefix_[entry->prefix.str()] = std::move(entry);
}

std::optional<core::ObjectPath> NamespaceAnswers::Named(const core::ObjectPath& fed_path) {
  core::MutexLock l(mu_);
  for (core::ObjectPath p = fed_path;; p = p.Parent()) {
    if (named_.contains(p.str())) return p;
    if (p.IsRoot()) return std::nullopt;
  }
}

void NamespaceAnswers::Erase(const std::shared_ptr<const NamespaceEntry>& entry) {
  core::MutexLock l(mu_);
  auto it = by_prefix_.find(entry->prefix.str());
  if (it != by_prefix_.end() && it->second == entry) by_prefix_.erase(it);
  auto direct = direct_.find(entry->prefix.str());
  if (direct != direct_.end() && direct->second.direct.entry == entry) direct_.erase(direct);
}

void NamespaceAnswers::Clear() {
  core::MutexLock l(mu_);
  by_prefix_.clear();
  direct_.clear();
}

NamespaceAnswers::Direct NamespaceAnswers::GetDirect(const std::string& prefix) {
  core::MutexLock l(mu_);
  auto it = direct_.find(prefix);
  if (it == direct_.end()) return {};
  if (Clock::now() >= it->second.expires) {
    direct_.erase(it);
    return {};
  }
  return it->second.direct;
}

bool NamespaceAnswers::PutDirect(const std::string& prefix, Direct direct,
                                 Clock::time_point expires) {
  core::MutexLock l(mu_);
  if (direct_.size() >= NamespaceDirectory::kMaxPrefixes) direct_.clear();
  auto [it, inserted] = direct_.try_emplace(prefix, KeptDirect{direct, expires});
  bool news = inserted || Clock::now() >= it->second.expires;
  it->second = KeptDirect{std::move(direct), expires};
  return news;
}

std::shared_ptr<const NamespaceEntry> DirectorClient::Lookup(const ObjectPath& fed_path) {
  std::shared_ptr<const NamespaceEntry> best = answers_->Longest(fed_path);
  // A nested namespace the director advertises but has not been asked about
  // yet must not be served by its parent's servers.
  if (best) {
    auto holder = directory_.Holder(fed_path);
    if (holder && holder->str().size() > best->prefix.str().size()) return nullptr;
  }
  return best;
}

void DirectorClient::Resolve(const ObjectPath& fed_path, Deadline deadline, NsCallback done,
                             bool fresh) {
  // The namespace list first (fresh at most every namespace_ttl): a table
  // hit for /a must not serve /a/b/x when /a/b is a namespace of its own.
  if (!fresh && Clock::now() >= list_expires_) {
    auto self = shared_from_this();
    WithNamespaces(deadline, [self, fed_path, deadline, done = std::move(done)](Status) mutable {
      self->Resolve(fed_path, deadline, std::move(done), false);
    });
    return;
  }
  if (!fresh) {
    if (auto hit = Lookup(fed_path)) {
      done(hit);
      return;
    }
  }
  auto& waiters = waiters_[fed_path.str()];
  waiters.push_back(std::move(done));
  if (waiters.size() > 1) return;
  auto self = shared_from_this();
  WithDirector(deadline, [self, fed_path, deadline](Result<std::string> director) {
    if (!director.ok()) {
      self->FinishResolve(fed_path, director.status());
      return;
    }
    self->Query(*director, fed_path, deadline, 0);
  });
}

void DirectorClient::FinishResolve(const ObjectPath& fed_path,
                                   Result<std::shared_ptr<const NamespaceEntry>> r) {
  if (r.ok() && (*r)->cacheable) {
    // A nested namespace's answer must not hide its parent's: both stay, the
    // longest prefix wins per path.
    answers_->Put(*r);
    directory_.AddSeen((*r)->prefix, (*r)->require_token);
  }
  auto it = waiters_.find(fed_path.str());
  if (it == waiters_.end()) return;
  auto waiters = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : waiters) w(r);
}

void DirectorClient::Query(const std::string& director, const ObjectPath& fed_path,
                           Deadline deadline, int attempt) {
  ctx_->counters.director_queries++;
  HttpRequest req;
  req.url = director + uri::PercentEncodePath(fed_path);
  req.deadline = deadline;
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 1 << 20;
  auto self = shared_from_this();
  ctx_->loop.Submit(std::move(req), [self, director, fed_path, deadline,
                                     attempt](Result<HttpResponse> r) {
    if (!r.ok()) {
      self->FinishResolve(fed_path, r.status().code() == StatusCode::kDeadlineExceeded
                                        ? r.status()
                                        : core::UnavailableError(
                                              "director " + director + ": " + r.status().message(),
                                              FailureSite::kDirector));
      return;
    }
    const FederationClientOptions& o = self->ctx_->options;
    long code = r->head.status;
    bool from_pelican = r->head.Get("server").value_or("").starts_with("pelican/");
    bool retry = code == 429 || (!from_pelican && (code == 502 || code == 500 || code == 503));
    auto backoff = o.director_backoff * (attempt + 1) + o.director_backoff;
    if (retry && attempt + 1 < o.director_attempts && Clock::now() + backoff < deadline) {
      self->ctx_->loop.PostAfter(std::chrono::duration_cast<std::chrono::milliseconds>(backoff),
                                 [self, director, fed_path, deadline, attempt] {
                                   self->Query(director, fed_path, deadline, attempt + 1);
                                 });
      return;
    }
    self->FinishResolve(
        fed_path, ParseDirectorAnswer(fed_path, *r, o.max_servers, Clock::now() + o.namespace_ttl));
  });
}

// ---- direct reads (the origin as the last resort) ----

void DirectorClient::ResolveDirect(const std::shared_ptr<const NamespaceEntry>& ns,
                                   const ObjectPath& fed_path, Deadline deadline, NsCallback done) {
  const std::string prefix = ns->prefix.str();
  NamespaceAnswers::Direct kept = answers_->GetDirect(prefix);
  if (kept.entry) {
    done(kept.entry);
    return;
  }
  if (!kept.refusal.ok()) {
    done(kept.refusal);
    return;
  }
  // One question per namespace at a time: its answer is kept per namespace.
  auto& waiters = direct_waiters_[prefix];
  waiters.push_back(std::move(done));
  if (waiters.size() > 1) return;
  auto self = shared_from_this();
  WithDirector(deadline, [self, prefix, fed_path, deadline](Result<std::string> director) {
    if (!director.ok()) {
      self->FinishDirect(prefix, fed_path, director.status());
      return;
    }
    self->QueryDirect(*director, prefix, fed_path, deadline);
  });
}

// Pelican's director takes `?directread` on the plain object path
// (ShortcutMiddleware) and answers like any object request, with origins.
// No retry on 429: the read that asks has little time left.
void DirectorClient::QueryDirect(const std::string& director, const std::string& prefix,
                                 const ObjectPath& fed_path, Deadline deadline) {
  ctx_->counters.director_queries++;
  HttpRequest req;
  req.url = director + uri::PercentEncodePath(fed_path) + "?directread";
  req.deadline = deadline;
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 1 << 20;
  auto self = shared_from_this();
  ctx_->loop.Submit(std::move(req), [self, director, prefix, fed_path](Result<HttpResponse> r) {
    if (!r.ok()) {
      self->FinishDirect(prefix, fed_path,
                         r.status().code() == StatusCode::kDeadlineExceeded
                             ? r.status()
                             : core::UnavailableError("director " + director +
                                                          " (directread): " + r.status().message(),
                                                      FailureSite::kDirector));
      return;
    }
    const FederationClientOptions& o = self->ctx_->options;
    auto expires = Clock::now() + o.namespace_ttl;
    auto answer = ParseDirectorAnswer(fed_path, *r, o.max_servers, expires);
    if (r->head.status == 405) {
      Status refusal =
          core::PermissionDeniedError("the director refuses direct reads of namespace " + prefix +
                                          ": HTTP 405 " + JsonMessage(r->body),
                                      FailureSite::kDirector);
      if (self->answers_->PutDirect(prefix, {nullptr, refusal}, expires)) {
        spdlog::warn(
            "federation {}: the director refuses direct reads of namespace {} (HTTP 405: it or "
            "its origins lack DirectReads); its reads fail when every cache it names does",
            self->ctx_->url.ToString(), core::EscapeForLog(prefix));
      }
      self->FinishDirect(prefix, fed_path, refusal);
      return;
    }
    if (answer.ok() && (*answer)->cacheable && (*answer)->prefix.str() == prefix &&
        self->answers_->PutDirect(prefix, {*answer, Status()}, expires)) {
      spdlog::warn(
          "federation {}: every server the director named for namespace {} failed; its reads "
          "fall back to {} (?directread) while they do",
          self->ctx_->url.ToString(), core::EscapeForLog(prefix),
          core::EscapeForLog((*answer)->server_bases.front()));
    }
    self->FinishDirect(prefix, fed_path, std::move(answer));
  });
}

void DirectorClient::FinishDirect(const std::string& prefix, const ObjectPath& fed_path,
                                  Result<std::shared_ptr<const NamespaceEntry>> r) {
  if (!r.ok()) {
    spdlog::debug("federation {}: direct read of {} in {}: {}", ctx_->url.ToString(),
                  core::EscapeForLog(fed_path.str()), core::EscapeForLog(prefix),
                  core::EscapeForLog(r.status().ToString()));
  }
  auto it = direct_waiters_.find(prefix);
  if (it == direct_waiters_.end()) return;
  auto waiters = std::move(it->second);
  direct_waiters_.erase(it);
  for (auto& w : waiters) w(r);
}

void DirectorClient::Invalidate(const std::shared_ptr<const NamespaceEntry>& entry) {
  answers_->Erase(entry);
}

void DirectorClient::InvalidateAll() {
  answers_->Clear();
  director_.clear();
  discovery_error_ = Status();
  list_expires_ = Clock::time_point();
}

void DirectorClient::WithNamespaces(Deadline deadline, std::function<void(Status)> done) {
  if (Clock::now() < list_expires_) {
    done(list_status_);
    return;
  }
  list_waiters_.push_back(std::move(done));
  if (list_waiters_.size() > 1) return;
  auto self = shared_from_this();
  auto finish = [self](Status s) {
    const FederationClientOptions& o = self->ctx_->options;
    if (!s.ok()) {
      // Once at warning level: a director without the endpoint is not an error per read.
      spdlog::log(self->list_warned_ ? spdlog::level::debug : spdlog::level::warn,
                  "federation {}: {}", self->ctx_->url.ToString(), s.ToString());
      self->list_warned_ = true;
    }
    self->list_status_ = s;
    self->list_expires_ = Clock::now() + (s.ok() ? o.namespace_ttl : o.discovery_failure_ttl);
    auto waiters = std::move(self->list_waiters_);
    self->list_waiters_.clear();
    for (auto& w : waiters) w(s);
  };
  WithDirector(deadline, [self, deadline, finish](Result<std::string> director) {
    if (!director.ok()) {
      finish(director.status());
      return;
    }
    self->FetchNamespaceList(*director, 2, deadline, finish);
  });
}

// Pelican 7.x answers v2 (v1 answers 299 without data there); older
// directors only v1.
void DirectorClient::FetchNamespaceList(const std::string& director, int version, Deadline deadline,
                                        std::function<void(Status)> finish) {
  HttpRequest req;
  req.url = director + "/api/v" + std::to_string(version) + ".0/director/listNamespaces";
  req.deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 16 << 20;
  auto self = shared_from_this();
  ctx_->loop.Submit(
      std::move(req), [self, director, version, deadline, finish](Result<HttpResponse> r) {
        std::string what = "listing the director's namespaces";
        if (!r.ok()) {
          finish(r.status().WithContext(what));
          return;
        }
        if (r->head.status != 200) {
          if (version == 2) {
            self->FetchNamespaceList(director, 1, deadline, finish);
          } else {
            finish(StatusFromHttp(r->head.status, what, FailureSite::kDirector, r->body));
          }
          return;
        }
        auto list = ParseNamespaceList(r->body);
        if (!list.ok()) {
          finish(list.status());
          return;
        }
        self->directory_.SetAdvertised(*list);
        finish(Status::Ok());
      });
}

}  // namespace perch::http

#include "daemon/http/lister.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/core/log_escape.h"
#include "daemon/http/failover.h"

namespace perch::http {

using core::FailureSite;
using core::ObjectPath;
using core::Result;
using core::Status;
using core::StatusCode;

namespace {

core::FileAttr DirAttr(bool partial = false) {
  core::FileAttr a;
  a.is_dir = true;
  a.partial_listing = partial;
  return a;
}

// `listing` plus each entry of `extra` (ways to nested namespaces) whose name
// it lacks.
std::vector<core::DirEntry> Merge(std::vector<core::DirEntry> listing,
                                  const std::vector<core::DirEntry>& extra) {
  for (const core::DirEntry& x : extra) {
    bool present = std::any_of(listing.begin(), listing.end(),
                               [&](const core::DirEntry& e) { return e.name == x.name; });
    if (!present) listing.push_back(x);
  }
  return listing;
}

// Is the federation itself unreachable (rather than merely without a list)?
bool Unreachable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace

void Lister::Propfind(EntryPtr entry, const ObjectPath& fed, int depth, core::Deadline deadline,
                      bool retried, PropfindCallback done) {
  auto auth = auth_->Headers(entry->require_token, entry->prefix.str(), entry->issuers, fed.str());
  if (!auth.ok()) {
    done(auth.status(), "");
    return;
  }
  auto split = SplitHttpUrl(entry->collections_url);
  std::string base_path = split.ok() ? split->path : "";
  std::string request_path = base_path + PercentEncodePath(fed);
  HttpRequest req;
  req.method = "PROPFIND";
  req.url =
      entry->collections_url + PercentEncodePath(fed) + (depth == 1 && !fed.IsRoot() ? "/" : "");
  req.headers = *auth;
  req.headers.push_back("Depth: " + std::to_string(depth));
  req.headers.push_back("Content-Type: application/xml; charset=utf-8");
  req.body = kPropfindBody;
  req.deadline = deadline;
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 256 << 20;
  ctx_->counters.propfinds++;
  std::string what = "PROPFIND " + fed.str();
  auto self = shared_from_this();
  ctx_->loop.Submit(std::move(req), [self, entry, fed, depth, deadline, retried, what, request_path,
                                     done = std::move(done)](Result<HttpResponse> r) mutable {
    Status failure;
    if (!r.ok()) {
      failure = r.status().WithContext(what);
    } else if (r->head.status != 207) {
      failure = StatusFromHttp(r->head.status, what, FailureSite::kOrigin, r->body);
    }
    if (!failure.ok()) {
      // Reads re-ask the director when servers fail; listings do the same,
      // once, so that an origin that moved is found without waiting for the
      // namespace entry to expire.
      if (!retried && Classify(failure) == FailureClass::kServer &&
          r.status().code() != StatusCode::kCancelled) {
        self->director_->Invalidate(entry);
        self->director_->Resolve(fed, deadline,
                                 [self, fed, depth, deadline, failure,
                                  done = std::move(done)](Result<EntryPtr> again) mutable {
                                   if (!again.ok() || (*again)->collections_url.empty()) {
                                     done(failure, "");
                                     return;
                                   }
                                   self->Propfind(*again, fed, depth, deadline, true,
                                                  std::move(done));
                                 });
        return;
      }
      done(failure, request_path);
      return;
    }
    HrefStyle style;
    style.prefer_raw = r->head.Get("server").value_or("").starts_with("XrootD");
    style.request_path = request_path;
    auto parsed = ParseMultistatus(r->body, style);
    if (!parsed.ok()) {
      done(Status(StatusCode::kCorrupt, what + ": " + parsed.status().message(),
                  FailureSite::kOrigin, true),
           request_path);
      return;
    }
    done(std::move(*parsed), request_path);
  });
}

// Answers `fed` from the namespace directory when it lies above the
// namespaces (`above`), else from inside its namespace (`inside`).
template <typename T>
void Lister::Route(const ObjectPath& fed, core::Deadline deadline,
                   std::function<T(const NamespaceDirectory&)> above, Inside<T> inside,
                   std::function<void(Result<T>)> done) {
  auto self = shared_from_this();
  director_->WithNamespaces(deadline, [self, fed, deadline, above = std::move(above), inside,
                                       done = std::move(done)](Status listed) mutable {
    const NamespaceDirectory& dir = self->director_->directory();
    if (fed.IsRoot() || dir.IsAboveNamespaces(fed)) {
      // The federation root is there if its director is; without a director
      // nothing below it can be read either.
      if (fed.IsRoot() && Unreachable(listed) && dir.size() == 0) {
        done(listed);
      } else {
        done(above(dir));
      }
      return;
    }
    self->director_->Resolve(
        fed, deadline,
        [self, fed, deadline, inside, done = std::move(done)](Result<EntryPtr> entry) mutable {
          if (!entry.ok()) {
            done(entry.status());
            return;
          }
          ((*self).*inside)(*entry, fed, deadline, std::move(done));
        });
  });
}

void Lister::Stat(const ObjectPath& fed, core::Deadline deadline,
                  std::function<void(Result<core::FileAttr>)> done) {
  // Above the namespaces: lists the namespaces known so far; the director knows more.
  Route<core::FileAttr>(
      fed, deadline, [](const NamespaceDirectory&) { return DirAttr(true); }, &Lister::StatIn,
      std::move(done));
}

void Lister::StatIn(EntryPtr entry, const ObjectPath& fed, core::Deadline deadline,
                    std::function<void(Result<core::FileAttr>)> done) {
  bool restricted = entry->require_token;
  done = [restricted, done = std::move(done)](Result<core::FileAttr> r) {
    if (r.ok()) r->restricted = restricted;
    done(std::move(r));
  };
  if (entry->collections_url.empty()) {
    if (entry->prefix == fed || director_->directory().IsPrefix(fed)) {
      done(DirAttr(true));  // a namespace's root is a directory by definition
    } else {
      reader_->Head(fed, deadline, std::move(done));
    }
    return;
  }
  Propfind(entry, fed, 0, deadline, false,
           [fed, done = std::move(done)](Result<std::vector<DavResponse>> r, std::string) {
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
             done(core::CorruptError("PROPFIND of " + fed.str() + " does not describe it",
                                     FailureSite::kOrigin));
           });
}

void Lister::List(const ObjectPath& fed, core::Deadline deadline,
                  std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  Route<std::vector<core::DirEntry>>(
      fed, deadline,
      [fed](const NamespaceDirectory& dir) { return Merge({}, dir.ChildrenToward(fed)); },
      &Lister::ListIn, std::move(done));
}

void Lister::ListIn(EntryPtr entry, const ObjectPath& fed, core::Deadline deadline,
                    std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  std::vector<core::DirEntry> nested = director_->directory().ChildrenToward(fed);
  if (entry->collections_url.empty()) {
    if (warned_unlisted_.insert(entry->prefix.str()).second) {
      spdlog::warn(
          "namespace {} offers no listings (the director sent no collections-url): its "
          "directories list as empty; files are still read by path",
          core::EscapeForLog(entry->prefix.str()));
    }
    done(Merge({}, nested));
    return;
  }
  auto self = shared_from_this();
  Propfind(entry, fed, 1, deadline, false,
           [self, entry, fed, deadline, nested, done = std::move(done)](
               Result<std::vector<DavResponse>> r, std::string request_path) mutable {
             if (!r.ok()) {
               // XRootD answers a Depth-1 PROPFIND on a file with 500: tell
               // the caller plainly.
               if (r.status().code() == StatusCode::kUnavailable) {
                 self->Propfind(entry, fed, 0, deadline, true,
                                [done = std::move(done), first = r.status()](
                                    Result<std::vector<DavResponse>> r0, std::string) {
                                  if (r0.ok() && r0->size() == 1 && !r0->front().attr.is_dir) {
                                    done(core::InvalidArgumentError("not a directory"));
                                  } else {
                                    done(first);
                                  }
                                });
                 return;
               }
               if (r.status().code() == StatusCode::kNotFound && !nested.empty()) {
                 done(Merge({}, nested));  // only there as the way to a nested namespace
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
             for (core::DirEntry& e : listing->children) e.attr.restricted = entry->require_token;
             done(Merge(std::move(listing->children), nested));
           });
}

}  // namespace perch::http

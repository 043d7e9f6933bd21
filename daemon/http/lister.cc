#include "daemon/http/lister.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/http/failover.h"
#include "daemon/http/pelican_headers.h"

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

// The length XRootD cuts a 255-byte name to in its listings.
constexpr size_t kCutLength = core::kMaxNameBytes - 1;

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
  std::string request_path = base_path + uri::PercentEncodePath(fed);
  HttpRequest req;
  req.method = "PROPFIND";
  req.url = entry->collections_url + uri::PercentEncodePath(fed) +
            (depth == 1 && !fed.IsRoot() ? "/" : "");
  req.headers = *auth;
  req.headers.push_back("Depth: " + std::to_string(depth));
  req.headers.push_back("Content-Type: application/xml; charset=utf-8");
  req.body = kPropfindBody;
  req.deadline = deadline;
  req.connect_timeout = ctx_->options.connect_timeout;
  // The answer is parsed as it arrives: a directory of a million entries
  // costs its entries, never the document (MultistatusParser).
  struct Stream {
    std::unique_ptr<MultistatusParser> parser;  // made at the first chunk of a 207
    std::string error_body;                     // the start of any other answer
    bool stopped = false;                       // the parser found the answer unusable
  };
  auto stream = std::make_shared<Stream>();
  req.on_data = [stream, request_path](const HttpHead& head, std::string_view chunk) {
    if (head.status != 207) {
      constexpr size_t kKeep = 64 << 10;  // enough for StatusFromHttp's message
      stream->error_body.append(
          chunk.substr(0, kKeep - std::min(kKeep, stream->error_body.size())));
      return true;
    }
    if (!stream->parser) {
      HrefStyle style;
      style.prefer_raw = head.Get("server").value_or("").starts_with("XrootD");
      style.request_path = request_path;
      stream->parser = std::make_unique<MultistatusParser>(style);
    }
    stream->stopped = !stream->parser->Feed(chunk);  // unusable: stop the transfer
    return !stream->stopped;
  };
  ctx_->counters.propfinds++;
  std::string what = "PROPFIND " + fed.str();
  auto self = shared_from_this();
  ctx_->loop.Submit(
      std::move(req), [self, entry, fed, depth, deadline, retried, what, request_path, stream,
                       done = std::move(done)](Result<HttpResponse> r) mutable {
        // A transfer the parser stopped ends kCancelled: the parser's reason counts.
        const bool parser_stopped = !r.ok() && stream->stopped;
        Status failure;
        if (!r.ok() && !parser_stopped) {
          failure = r.status().WithContext(what);
        } else if (r.ok() && r->head.status != 207) {
          failure = StatusFromHttp(r->head.status, what, FailureSite::kOrigin, stream->error_body);
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
        auto parsed = stream->parser ? stream->parser->Finish() : ParseMultistatus("");
        stream->parser.reset();
        if (!parsed.ok()) {
          done(Status(StatusCode::kCorrupt, what + ": " + parsed.status().message(),
                      FailureSite::kOrigin, true),
               request_path);
          return;
        }
        // The answer's Cache-Control is of every file it describes (a
        // namespace's policy: Pelican sets it per namespace).
        if (auto cc = CacheControlOf(r->head.GetAll("cache-control")); cc && cc->max_age) {
          for (DavResponse& resp : *parsed) {
            if (!resp.attr.is_dir) resp.attr.max_age = *cc->max_age;
          }
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
  if (fed.Name().find('?') != std::string_view::npos && entry->prefix != fed) {
    // XRootD (5.5) answers a PROPFIND of "d/?x" with d's own attributes (it
    // takes "?x" for a query): the name is described by its directory's
    // listing instead, which names it as it is.
    ListIn(entry, fed.Parent(), deadline,
           [fed, done = std::move(done)](Result<std::vector<core::DirEntry>> r) {
             if (!r.ok()) {
               done(r.status());
               return;
             }
             for (const core::DirEntry& e : *r) {
               if (e.name == fed.Name()) {
                 done(e.attr);
                 return;
               }
             }
             done(core::NotFoundError(core::EscapeForLog(fed.str()) +
                                      " is not in its directory's listing"));
           });
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
             auto listing = InterpretListing(std::move(*r), request_path);
             if (!listing.ok()) {
               done(listing.status());
               return;
             }
             for (core::DirEntry& e : listing->children) e.attr.restricted = entry->require_token;
             self->DropCutNames(
                 entry, fed, deadline, std::move(listing->children),
                 [nested, done = std::move(done)](std::vector<core::DirEntry> children) mutable {
                   done(Merge(std::move(children), nested));
                 });
           });
}

void Lister::DropCutNames(EntryPtr entry, const ObjectPath& dir, core::Deadline deadline,
                          std::vector<core::DirEntry> children,
                          std::function<void(std::vector<core::DirEntry>)> done) {
  struct Check {
    std::vector<core::DirEntry> children;
    std::vector<size_t> suspects;  // indexes of names of kCutLength bytes
    std::vector<bool> cut;
    size_t pending = 0;
    std::function<void(std::vector<core::DirEntry>)> done;
  };
  auto check = std::make_shared<Check>();
  for (size_t i = 0; i < children.size(); ++i) {
    // A name with '?' cannot be asked about by itself (Lister::StatIn).
    if (children[i].name.size() == kCutLength && children[i].name.find('?') == std::string::npos) {
      check->suspects.push_back(i);
    }
  }
  if (check->suspects.empty()) {
    done(std::move(children));
    return;
  }
  check->children = std::move(children);
  check->cut.assign(check->suspects.size(), false);
  check->pending = check->suspects.size();
  check->done = std::move(done);
  auto finish = [check, dir] {
    std::vector<core::DirEntry> kept;
    kept.reserve(check->children.size());
    size_t k = 0, cut = 0;
    for (size_t i = 0; i < check->children.size(); ++i) {
      if (k < check->suspects.size() && check->suspects[k] == i && check->cut[k++]) {
        ++cut;
        continue;
      }
      kept.push_back(std::move(check->children[i]));
    }
    if (cut > 0) {
      spdlog::warn(
          "listing of {}: the origin names {} entr{} of {} bytes that it does not have (XRootD "
          "cuts 255-byte names to 254 in listings); left out of the listing, the full names "
          "still open",
          core::EscapeForLog(dir.str()), cut, cut == 1 ? "y" : "ies", kCutLength);
    }
    check->done(std::move(kept));
  };
  for (size_t k = 0; k < check->suspects.size(); ++k) {
    auto path = dir.Child(check->children[check->suspects[k]].name);
    if (!path.ok()) {
      if (--check->pending == 0) finish();
      continue;
    }
    Propfind(entry, *path, 0, deadline, true,
             [check, k, finish](Result<std::vector<DavResponse>> r, std::string) {
               check->cut[k] = !r.ok() && r.status().code() == StatusCode::kNotFound;
               if (r.ok() && r->size() == 1) {
                 // The name's own attributes: a cut name repeating it may have
                 // given the listing another file's.
                 core::DirEntry& e = check->children[check->suspects[k]];
                 bool restricted = e.attr.restricted;
                 e.attr = r->front().attr;
                 e.attr.restricted = restricted;
               }
               if (--check->pending == 0) finish();
             });
  }
}

}  // namespace perch::http

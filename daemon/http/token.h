// Bearer-token discovery in Pelican's order (docs/protocol.md §5):
//   0. an explicit token file from perch's configuration
//   1. $BEARER_TOKEN            (contents)
//   2. $BEARER_TOKEN_FILE       (path)
//   3. $XDG_RUNTIME_DIR/bt_u<uid>
//   4. /tmp/bt_u<uid>
//   5. $TOKEN                   (path; legacy)
//   6. $_CONDOR_CREDS (default ./.condor_creds): <name>.use for a NAME+ URL
//      (a '.' in NAME tried as '_' first), else scitokens.use, then every
//      other non-dot file.
// A file holds the raw token or JSON with "access_token". The first token
// that is acceptable for the object (unexpired JWT whose issuer and scope
// fit) wins; if none is acceptable the first one found is used with a
// warning, as Pelican's client does (tokens such as macaroons are opaque).
//
// Token contents are secrets: they are never logged, only their source.
// Thread-safety: TokenFinder is immutable after construction; Find() is safe
// from any thread. Environment access goes through the injected lookup.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace perch::http {

struct TokenRequest {
  std::string object_path;           // federation path being read
  std::string namespace_prefix;      // from X-Pelican-Namespace
  std::vector<std::string> issuers;  // from X-Pelican-Authorization; empty = any
  std::string token_name;            // from a NAME+scheme:// URL, or ""
};

struct FoundToken {
  std::string token;
  std::string source;  // "$BEARER_TOKEN_FILE (/path)", for logs
  bool acceptable = false;
};

class TokenFinder {
 public:
  using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

  // `explicit_file` may be "". `env` defaults to getenv; `uid` to getuid().
  explicit TokenFinder(std::string explicit_file, EnvLookup env = {}, int uid = -1);

  // kPermissionDenied if no token is found anywhere; the message lists the
  // places searched.
  core::Result<FoundToken> Find(const TokenRequest& request) const;

  // True if `token` is an unexpired JWT acceptable for `request`. Exposed for tests.
  static bool IsAcceptable(const std::string& token, const TokenRequest& request, int64_t now);

 private:
  std::string explicit_file_;
  EnvLookup env_;
  int uid_;
};

// The Authorization header for reads in one namespace: nothing for a public
// namespace; a found token, reused for `ttl`, for a namespace that requires
// one; kPermissionDenied (kLocal, naming the namespace) when none is found.
// Thread-safety: none (the federation client's loop thread).
//
// Configured per-prefix token files (`by_prefix`: federation path prefix ->
// file) come first: the longest prefix that holds the namespace wins, and its
// token is never used for a namespace outside that prefix. A namespace
// without a token is logged once (naming it), then refused quietly.
class NamespaceAuth {
 public:
  NamespaceAuth(TokenFinder finder, std::string token_name, std::chrono::seconds ttl,
                std::map<std::string, std::string> by_prefix = {})
      : finder_(std::move(finder)),
        token_name_(std::move(token_name)),
        ttl_(ttl),
        by_prefix_(std::move(by_prefix)) {}

  core::Result<std::vector<std::string>> Headers(bool require_token, const std::string& prefix,
                                                 const std::vector<std::string>& issuers,
                                                 const std::string& object_path);

 private:
  TokenFinder finder_;
  std::string token_name_;
  std::chrono::seconds ttl_;
  std::map<std::string, std::string> by_prefix_;
  std::map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> cache_;
  std::set<std::string> warned_;  // namespaces whose missing token was logged
};

// Reads a token file: raw token text or JSON {"access_token": ...}; trimmed.
core::Result<std::string> ReadTokenFile(const std::string& path);

}  // namespace perch::http

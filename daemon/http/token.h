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
// A file holds the raw token or JSON with "access_token".
//
// Where a token may go (docs/security.md, "Tokens"): a credential is sent only
// to a server the federation named for it, never to whichever namespace asks.
//   - A JWT only to a namespace whose issuers (the director's
//     X-Pelican-Authorization lines) include the token's `iss`. A namespace
//     that names no issuer gets no JWT.
//   - An opaque token (a macaroon: anything that is not a JWT) only where
//     someone named it for the namespace: a [tokens] prefix, or — for a client
//     that runs as the job, as Pelican's plugin does (perch-transfer) — found
//     in the job's own environment (OpaqueTokens::kSendDiscovered).
// Among the tokens that may go, the first acceptable one (unexpired, scope
// covers the object) wins; if none is acceptable the first that may go is
// used with a warning (its server decides), as Pelican's client does.
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
  std::vector<std::string> issuers;  // from X-Pelican-Authorization; empty: no JWT may go
  std::string token_name;            // from a NAME+scheme:// URL, or ""
};

struct FoundToken {
  std::string token;
  std::string source;  // "$BEARER_TOKEN_FILE (/path)", for logs
  bool acceptable = false;
};

// Whether a discovered opaque token may be sent (see above).
enum class OpaqueTokens { kRefuse, kSendDiscovered };

// The `iss` claim of a JWT; nullopt for a token that is not a JWT (opaque).
// A JWT without `iss` gives "".
std::optional<std::string> JwtIssuer(const std::string& token);

// Whether `token` may be sent to a namespace with `issuers`, given whether an
// opaque token may go there (named for it). "" if it may, else why not
// (naming the token's issuer, never its contents).
std::string WhyNotSent(const std::string& token, const std::vector<std::string>& issuers,
                       bool opaque_named);

class TokenFinder {
 public:
  using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

  // `explicit_file` may be "". `env` defaults to getenv; `uid` to getuid().
  explicit TokenFinder(std::string explicit_file, OpaqueTokens opaque = OpaqueTokens::kRefuse,
                       EnvLookup env = {}, int uid = -1);

  // kPermissionDenied if no token that may go to the request's namespace is
  // found; the message lists the places searched and, for each token found
  // that may not go, its source and why (never its contents).
  core::Result<FoundToken> Find(const TokenRequest& request) const;

  // True if `token` is an unexpired JWT acceptable for `request`. Exposed for tests.
  static bool IsAcceptable(const std::string& token, const TokenRequest& request, int64_t now);

 private:
  std::string explicit_file_;
  OpaqueTokens opaque_;
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
// token is never used for a namespace outside that prefix; a JWT there still
// goes only to a namespace whose issuers include its `iss`. A namespace
// without a token that may go to it is logged once (naming it), then refused
// quietly. A found token is reused for `ttl` for the same prefix and issuers.
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
  // (prefix, issuers) -> token and until when it is reused.
  std::map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> cache_;
  std::set<std::string> warned_;  // namespaces whose missing token was logged
};

// Reads a token file: raw token text or JSON {"access_token": ...}; trimmed.
core::Result<std::string> ReadTokenFile(const std::string& path);

}  // namespace perch::http

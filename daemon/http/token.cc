#include "daemon/http/token.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/core/log_escape.h"

namespace perch::http {
namespace {

namespace fs = std::filesystem;

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Decodes base64url without padding (JWT segments).
std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string s(in);
  std::replace(s.begin(), s.end(), '-', '+');
  std::replace(s.begin(), s.end(), '_', '/');
  while (s.size() % 4) s += '=';
  std::string out(s.size() / 4 * 3, '\0');
  int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  size_t pad = s.size() - s.find_last_not_of('=') - 1;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// True if `scope_path` (a "read:/x" path) covers `resource`.
bool PathCovers(std::string_view scope_path, std::string_view resource) {
  if (scope_path.empty() || scope_path == "/") return true;
  std::string sp(scope_path);
  while (sp.size() > 1 && sp.back() == '/') sp.pop_back();
  return resource == sp ||
         (resource.starts_with(sp) && resource.size() > sp.size() && resource[sp.size()] == '/');
}

// The claims of a JWT (unverified: servers verify); nullopt if `token` is not
// three dot-separated parts whose middle one is a JSON object.
std::optional<nlohmann::json> JwtClaims(const std::string& token) {
  size_t d1 = token.find('.');
  size_t d2 = d1 == std::string::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string::npos) return std::nullopt;
  auto payload = Base64UrlDecode(std::string_view(token).substr(d1 + 1, d2 - d1 - 1));
  if (!payload) return std::nullopt;
  auto claims = nlohmann::json::parse(*payload, nullptr, false);
  if (claims.is_discarded() || !claims.is_object()) return std::nullopt;
  return claims;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::optional<std::string> JwtIssuer(const std::string& token) {
  std::optional<nlohmann::json> claims = JwtClaims(token);
  if (!claims) return std::nullopt;
  auto iss = claims->find("iss");
  return iss != claims->end() && iss->is_string() ? iss->get<std::string>() : std::string();
}

std::string WhyNotSent(const std::string& token, const std::vector<std::string>& issuers,
                       bool opaque_named) {
  std::optional<std::string> iss = JwtIssuer(token);
  if (!iss) {
    return opaque_named ? ""
                        : "an opaque token (not a JWT) goes only to namespaces a [tokens] "
                          "prefix names it for";
  }
  if (std::find(issuers.begin(), issuers.end(), *iss) != issuers.end()) return "";
  return "its issuer '" + core::EscapeForLog(*iss) + "' is not one the namespace names (" +
         (issuers.empty() ? std::string("none") : core::EscapeForLog(Join(issuers, ", "))) + ")";
}

core::Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return core::PermissionDeniedError("cannot read token file " + path, core::FailureSite::kLocal);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = Trim(ss.str());
  if (!text.empty() && text.front() == '{') {
    auto doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.contains("access_token") || !doc["access_token"].is_string()) {
      return core::PermissionDeniedError(
          "token file " + path + " is JSON without a string access_token",
          core::FailureSite::kLocal);
    }
    text = Trim(doc["access_token"].get<std::string>());
  }
  if (text.empty()) {
    return core::PermissionDeniedError("token file " + path + " is empty",
                                       core::FailureSite::kLocal);
  }
  return text;
}

TokenFinder::TokenFinder(std::string explicit_file, OpaqueTokens opaque, EnvLookup env, int uid)
    : explicit_file_(std::move(explicit_file)),
      opaque_(opaque),
      env_(env ? std::move(env)
               : EnvLookup([](const std::string& name) -> std::optional<std::string> {
                   const char* v = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe)
                   return v ? std::optional<std::string>(v) : std::nullopt;
                 })),
      uid_(uid >= 0 ? uid : static_cast<int>(getuid())) {}

bool TokenFinder::IsAcceptable(const std::string& token, const TokenRequest& request, int64_t now) {
  std::optional<nlohmann::json> jwt = JwtClaims(token);
  if (!jwt) return false;
  const nlohmann::json& claims = *jwt;
  bool wlcg = claims.contains("wlcg.ver");
  bool scitoken = claims.contains("ver") && claims["ver"].is_string() &&
                  (claims["ver"].get<std::string>().starts_with("scitoken:2.0") ||
                   claims["ver"].get<std::string>().starts_with("scitokens:2.0"));
  if (!wlcg && !scitoken) return false;
  if (claims.contains("exp") && claims["exp"].is_number() && claims["exp"].get<int64_t>() <= now) {
    return false;
  }
  if (claims.contains("nbf") && claims["nbf"].is_number() && claims["nbf"].get<int64_t>() > now) {
    return false;
  }
  if (!request.issuers.empty()) {
    std::string iss =
        claims.contains("iss") && claims["iss"].is_string() ? claims["iss"].get<std::string>() : "";
    if (std::find(request.issuers.begin(), request.issuers.end(), iss) == request.issuers.end()) {
      return false;
    }
  }
  // Scope check relative to the namespace prefix.
  std::string resource = request.object_path;
  if (!request.namespace_prefix.empty() && request.namespace_prefix != "/" &&
      resource.starts_with(request.namespace_prefix)) {
    resource = resource.substr(request.namespace_prefix.size());
    if (resource.empty()) resource = "/";
  }
  std::string scope = claims.contains("scope") && claims["scope"].is_string()
                          ? claims["scope"].get<std::string>()
                          : "";
  std::istringstream words(scope);
  for (std::string w; words >> w;) {
    std::string_view sv(w);
    std::string_view kind = sv.substr(0, sv.find(':'));
    if (kind != "storage.read" && kind != "read") continue;
    std::string_view path =
        sv.find(':') == std::string_view::npos ? "" : sv.substr(sv.find(':') + 1);
    if (PathCovers(path, resource)) return true;
  }
  return false;
}

core::Result<FoundToken> TokenFinder::Find(const TokenRequest& request) const {
  std::vector<FoundToken> found;     // tokens that may go to the namespace
  std::vector<std::string> refused;  // "source: why not"
  std::vector<std::string> searched;
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto consider = [&](core::Result<std::string> token, std::string source) -> bool {
    if (!token.ok()) return false;
    std::string why = WhyNotSent(*token, request.issuers, opaque_ == OpaqueTokens::kSendDiscovered);
    if (!why.empty()) {
      refused.push_back(source + ": " + why);
      return false;
    }
    FoundToken t{*std::move(token), std::move(source), false};
    t.acceptable = IsAcceptable(t.token, request, now);
    found.push_back(std::move(t));
    return found.back().acceptable;
  };
  auto file = [&](const std::string& path, const std::string& label) -> bool {
    std::error_code ec;
    if (path.empty() || !fs::is_regular_file(path, ec)) return false;
    return consider(ReadTokenFile(path), label);
  };

  searched = {"$BEARER_TOKEN", "$BEARER_TOKEN_FILE", "$XDG_RUNTIME_DIR/bt_u" + std::to_string(uid_),
              "/tmp/bt_u" + std::to_string(uid_), "$TOKEN"};
  if (!explicit_file_.empty()) searched.insert(searched.begin(), "token file " + explicit_file_);
  if (!explicit_file_.empty() && file(explicit_file_, "token file " + explicit_file_)) {
    return found.back();
  }
  if (auto v = env_("BEARER_TOKEN");
      v && !Trim(*v).empty() && consider(Trim(*v), "$BEARER_TOKEN")) {
    return found.back();
  }
  if (auto v = env_("BEARER_TOKEN_FILE"); v && file(*v, "$BEARER_TOKEN_FILE (" + *v + ")")) {
    return found.back();
  }
  std::string bt = "bt_u" + std::to_string(uid_);
  if (auto v = env_("XDG_RUNTIME_DIR"); v && file(*v + "/" + bt, "$XDG_RUNTIME_DIR/" + bt)) {
    return found.back();
  }
  if (file("/tmp/" + bt, "/tmp/" + bt)) return found.back();
  if (auto v = env_("TOKEN"); v && file(*v, "$TOKEN (" + *v + ")")) return found.back();

  std::string creds = env_("_CONDOR_CREDS").value_or(".condor_creds");
  std::vector<std::string> names;
  if (!request.token_name.empty()) {
    std::string underscored = request.token_name;
    std::replace(underscored.begin(), underscored.end(), '.', '_');
    names.push_back(underscored + ".use");
    if (underscored != request.token_name) names.push_back(request.token_name + ".use");
  } else {
    names.push_back("scitokens.use");
    std::error_code ec;
    std::vector<std::string> others;
    for (const auto& e : fs::directory_iterator(creds, ec)) {
      std::string n = e.path().filename().string();
      if (!n.starts_with(".") && n != "scitokens.use") others.push_back(n);
    }
    std::sort(others.begin(), others.end());
    names.insert(names.end(), others.begin(), others.end());
  }
  for (const std::string& n : names) {
    searched.push_back("$_CONDOR_CREDS/" + n);
    if (file(creds + "/" + n, "$_CONDOR_CREDS/" + n)) return found.back();
  }
  if (!found.empty()) {
    return found.front();  // none acceptable: the first that may go, as Pelican does
  }
  if (!refused.empty()) {
    return core::PermissionDeniedError(
        "no token found may be sent to it (" + Join(refused, "; ") + ")",
        core::FailureSite::kLocal);
  }
  return core::PermissionDeniedError(
      "no bearer token found (searched " + Join(searched, ", ") + ")", core::FailureSite::kLocal);
}

core::Result<std::vector<std::string>> NamespaceAuth::Headers(
    bool require_token, const std::string& prefix, const std::vector<std::string>& issuers,
    const std::string& object_path) {
  if (!require_token) return std::vector<std::string>{};
  auto now = std::chrono::steady_clock::now();
  const std::string key = prefix + "\n" + Join(issuers, "\n");
  if (auto cached = cache_.find(key); cached != cache_.end() && now < cached->second.second) {
    return std::vector<std::string>{"Authorization: Bearer " + cached->second.first};
  }
  // The configured file of the longest prefix that holds this namespace.
  const std::string* configured = nullptr;
  size_t best = 0;
  for (const auto& [p, file] : by_prefix_) {
    bool holds = p == "/" || prefix == p || (prefix.starts_with(p) && prefix[p.size()] == '/');
    if (holds && p.size() >= best) {
      configured = &file;
      best = p.size();
    }
  }
  core::Result<FoundToken> found = core::PermissionDeniedError("no token");
  if (configured != nullptr) {
    auto token = ReadTokenFile(*configured);
    std::string source = "[tokens] file " + *configured;
    if (!token.ok()) {
      found = token.status();
    } else if (std::string why = WhyNotSent(*token, issuers, /*opaque_named=*/true); !why.empty()) {
      found = core::PermissionDeniedError(source + ": " + why, core::FailureSite::kLocal);
    } else {
      found = FoundToken{*token, source, true};
    }
  } else {
    found = finder_.Find(TokenRequest{object_path, prefix, issuers, token_name_});
  }
  if (!found.ok()) {
    if (warned_.size() >= 4096) warned_.clear();
    if (warned_.insert(prefix).second) {
      spdlog::warn("namespace {} requires a token and none is usable ({}): its files are EACCES",
                   core::EscapeForLog(prefix), core::EscapeForLog(found.status().message()));
    }
    return core::PermissionDeniedError(
        "namespace " + prefix + " requires a token: " + found.status().message(),
        core::FailureSite::kLocal);
  }
  warned_.erase(prefix);
  if (!found->acceptable) {
    spdlog::warn("namespace {}: no token found is acceptable for it; using the one from {}",
                 core::EscapeForLog(prefix), found->source);
  } else {
    spdlog::debug("namespace {}: using token from {}", prefix, found->source);
  }
  if (cache_.size() >= 1024) cache_.clear();
  cache_[key] = {found->token, now + ttl_};
  return std::vector<std::string>{"Authorization: Bearer " + found->token};
}

}  // namespace perch::http

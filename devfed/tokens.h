// TokenIssuer: bearer tokens for perch-devfed's protected exports, enforced by
// XRootD itself through its macaroons plugin (libXrdMacaroons): the origin is
// configured with a shared secret, and perch-devfed mints macaroons with
// libmacaroons carrying the caveats XrdMacaroons checks (activity, path,
// expiry). Clients send them as "Authorization: Bearer <macaroon>", as they
// would a SciToken; perch treats them as opaque tokens.
//
// Thread-safety: used by perch-devfed's main thread only.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace perch::devfed {

class TokenIssuer {
 public:
  // Creates the secret (64 random bytes, base64) in `dir`. "" or an error.
  std::string Init(const std::filesystem::path& dir);
  // Config lines that make an XRootD origin require a token for `ns`.
  std::string XrootdConfig(const std::string& ns);
  // Writes a token valid for reading every protected namespace (mode 0600).
  std::string WriteToken(const std::string& path);

 private:
  std::filesystem::path secret_file_;
  std::string secret_;  // raw bytes
  std::vector<std::string> namespaces_;
};

}  // namespace perch::devfed

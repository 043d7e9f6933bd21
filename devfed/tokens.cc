#include "devfed/tokens.h"

#include <macaroons.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <ctime>
#include <fstream>

namespace perch::devfed {

namespace fs = std::filesystem;

std::string TokenIssuer::Init(const fs::path& dir) {
  fs::create_directories(dir);
  unsigned char raw[64];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return "cannot generate a random secret";
  secret_.assign(reinterpret_cast<char*>(raw), sizeof(raw));
  std::string b64(4 * ((sizeof(raw) + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw, sizeof(raw));
  b64.resize(static_cast<size_t>(n));
  secret_file_ = dir / "macaroon-secret";
  std::ofstream(secret_file_) << b64 << "\n";
  return "";
}

std::string TokenIssuer::XrootdConfig(const std::string& ns) {
  namespaces_.push_back(ns);
  return "ofs.authorize 1\n"
         "ofs.authlib libXrdMacaroons.so\n"
         "http.exthandler xrdmacaroons libXrdMacaroons.so\n"
         "http.header2cgi Authorization authz\n"
         "macaroons.secretkey " +
         secret_file_.string() +
         "\n"
         "macaroons.onmissing deny\n";
}

std::string TokenIssuer::WriteToken(const std::string& path) {
  macaroon_returncode err = MACAROON_SUCCESS;
  const std::string location = "perch-devfed";  // matches all.sitename
  const std::string id = "perch-devfed-token-" + std::to_string(std::time(nullptr));
  macaroon* m =
      macaroon_create(reinterpret_cast<const unsigned char*>(location.data()), location.size(),
                      reinterpret_cast<const unsigned char*>(secret_.data()), secret_.size(),
                      reinterpret_cast<const unsigned char*>(id.data()), id.size(), &err);
  if (m == nullptr) return "macaroon_create failed";
  char before[64];
  std::time_t expiry = std::time(nullptr) + 12 * 3600;  // XrdMacaroons caps lifetimes at 24 h
  std::strftime(before, sizeof(before), "before:%Y-%m-%dT%H:%M:%SZ", std::gmtime(&expiry));
  std::vector<std::string> caveats = {"activity:DOWNLOAD,READ_METADATA,LIST", before};
  // One path caveat per namespace would require all of them; XrdMacaroons
  // checks each path caveat, so a token names the common root of them.
  std::string common = namespaces_.size() == 1 ? namespaces_[0] : "/";
  caveats.push_back("path:" + common);
  for (const std::string& c : caveats) {
    macaroon* next = macaroon_add_first_party_caveat(
        m, reinterpret_cast<const unsigned char*>(c.data()), c.size(), &err);
    macaroon_destroy(m);
    if (next == nullptr) return "macaroon caveat failed";
    m = next;
  }
  std::string out(macaroon_serialize_size_hint(m), '\0');
  if (macaroon_serialize(m, out.data(), out.size(), &err) < 0) {
    macaroon_destroy(m);
    return "macaroon_serialize failed";
  }
  macaroon_destroy(m);
  out.resize(std::strlen(out.c_str()));
  {
    std::ofstream f(path);
    f << out << "\n";
    if (!f) return "cannot write token file " + path;
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return "";
}

}  // namespace perch::devfed

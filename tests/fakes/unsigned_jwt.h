// UnsignedJwt: a JWT with the given claims and a dummy signature, for tests of
// which token perch sends where (perch never verifies signatures: servers do;
// it only reads the claims). Link OpenSSL::Crypto.
#pragma once

#include <openssl/evp.h>

#include <string>

namespace perch::testing {

// Base64url without padding, as JWT segments are written.
inline std::string Base64Url(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

// header.claims.signature, `claims` a JSON object such as
// {"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/"}.
inline std::string UnsignedJwt(const std::string& claims) {
  return Base64Url(R"({"alg":"ES256","typ":"JWT"})") + "." + Base64Url(claims) + ".c2ln";
}

}  // namespace perch::testing

#include "runtime/input_identity.hpp"

#include <openssl/sha.h>

namespace sluice {

std::string input_identity(const std::string& input, const std::string& options) {
  std::string identity = input;
  identity.push_back('\0');  // a path holds no NUL: the split is unambiguous
  identity += options;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(identity.data()), identity.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) out += {kHex[b >> 4], kHex[b & 15]};
  return out;
}

}  // namespace sluice

// SHA-256 (FIPS 180-4), for API keys: the config stores hashes, never keys, and a request's
// bearer token is hashed and looked up. Small and self-contained so the server needs no
// crypto library; tested against the NIST example vectors.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ts::server {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
// 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

}  // namespace ts::server

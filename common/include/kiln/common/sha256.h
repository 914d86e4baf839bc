// SHA-256 (OpenSSL) as lowercase hex: the content addresses of the cache, action keys and
// model digests.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kiln {

std::string Sha256Hex(std::string_view bytes);

// Whether every character is 0-9 or a-f, the alphabet of Sha256Hex (a digest is 64 of them).
bool IsLowercaseHex(std::string_view text);

// Incremental form, for bytes that arrive in pieces (upload streams, large files).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view bytes);
  // The digest of everything given so far; the hasher starts over afterwards.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

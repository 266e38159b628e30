// Prints libodla's SHA-256 (src/sha256.cc, compiled in) of each length given: "<length>
// <digest>" of the bytes i * 167 + 13 (mod 256), i = 0..length-1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sha256.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    size_t length = std::strtoull(argv[i], nullptr, 10);
    std::string data(length, '\0');
    for (size_t at = 0; at < length; ++at) data[at] = static_cast<char>(at * 167 + 13);
    std::printf("%zu %s\n", length, odla_tvm::Sha256Hex(data).c_str());
  }
  return 0;
}

// SHA-256 (FIPS 180-4), to check a stored executable's sections before loading any of them.
#ifndef ODLA_TVM_SHA256_H_
#define ODLA_TVM_SHA256_H_

#include <string>
#include <string_view>

namespace odla_tvm {

// The digest of `data` as 64 lowercase hex digits (what Python's hexdigest() gives).
std::string Sha256Hex(std::string_view data);

}  // namespace odla_tvm

#endif  // ODLA_TVM_SHA256_H_

// The .npy format (NumPy's one-array file), read and written: the one reader of the stored
// executable's arrays, a bundle's and odla_runner's inputs.
#ifndef ODLA_TVM_NPY_H_
#define ODLA_TVM_NPY_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mapped_file.h"

namespace odla_tvm {

// Limits of what a header may declare.
constexpr size_t kNpyMaxHeader = 1 << 16;
constexpr size_t kNpyMaxRank = 32;

struct Array {  // an .npy array: its dtype, shape and data (a view of the stored bytes)
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::string_view data;
  std::shared_ptr<const MappedFile> file;  // where kept alive by a mapping: the one `data` is in
};

// The array in `bytes` (its data a view of them): a C-ordered, little-endian array of a type
// of dtypes.h, its header of version 1, 2 or 3 within kNpyMaxHeader, its shape of at most
// kNpyMaxRank dims whose product, in bytes, is the data's length exactly. Anything else
// throws Error(ODLA_INVALID_PARAM) with `what` and the reason.
Array ParseNpy(std::string_view bytes, const std::string& what);

// `data` (`dtype`, `shape`) as a version-1 .npy file's bytes.
std::string NpyBytes(DLDataType dtype, const std::vector<int64_t>& shape, std::string_view data);

}  // namespace odla_tvm

#endif  // ODLA_TVM_NPY_H_

// Reading odla-tvm's stored executable (what odla_tvm.store_executable writes) without Python:
//   "ODLATVM\0", u32 format version 1, u64 manifest length, the JSON manifest, then the
//   sections the manifest's "sections" place (offsets after the manifest): "library" (the
//   compiled shared library), "variables" and "weights" (NumPy .npz archives, entries
//   "v<i>" and "w<i>", stored uncompressed). Exported bundles are read too: a folder with
//   manifest.json (the same slots, and every file's sha256), model.so and .npy files.
#ifndef ODLA_TVM_STORED_EXECUTABLE_H_
#define ODLA_TVM_STORED_EXECUTABLE_H_

#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "internal.h"
#include "mapped_file.h"

namespace odla_tvm {

struct Slot {
  std::string id;
  odla_value_type type{};
};

struct Array {  // an .npy entry: its dtype, shape and data (a view of the stored bytes)
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::string_view data;
  std::shared_ptr<const MappedFile> file;  // (a bundle's) the mapping `data` lies in
};

struct StoredExecutable {
  std::vector<Slot> args, outputs, variables;
  std::string_view library;  // the library's bytes, or
  std::string library_path;  // (a bundle's) its file
  std::vector<Array> variable_data, weights;
  bool vendor_regions = false;  // its main calls a vendor plugin's regions (oneDNN's)
};

// Parses `blob` (kept alive by the caller); a malformed one throws Error naming `what`.
StoredExecutable ParseStoredExecutable(const std::string& blob, const std::string& what);

// Parses the exported bundle (odla_tvm.export) in the folder `root`, checking its files' sha256
// unless its caller has (`check_digests`); its arrays view their files, mapped.
StoredExecutable ParseBundle(const std::string& root, bool check_digests = true);

DLDataType DataType(odla_element_type type);

}  // namespace odla_tvm

#endif  // ODLA_TVM_STORED_EXECUTABLE_H_

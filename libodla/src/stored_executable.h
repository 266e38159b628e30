// Reading odla-tvm's stored executable (what odla_tvm.store_executable writes) and exported
// bundle without Python: the one reader of both, for libodla_tvm.so and odla_runner. The
// format, every field and its limits, is docs/formats.md's. A stored file is untrusted input:
// each length, offset, name and shape is bounded before it is used, and a malformed file
// throws Error (ODLA_INVALID_PARAM, or ODLA_UNSUPPORTED_DEVICE_TYPE for another machine's).
#ifndef ODLA_TVM_STORED_EXECUTABLE_H_
#define ODLA_TVM_STORED_EXECUTABLE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtypes.h"
#include "internal.h"
#include "mapped_file.h"
#include "npy.h"

namespace odla_tvm {

// Limits of what a manifest may hold (docs/formats.md).
constexpr uint64_t kMaxManifestBytes = 64 << 20;
constexpr int kMaxManifestDepth = 32;  // of nested lists and objects
constexpr size_t kMaxManifestEntries = 1 << 16;  // slots, weights, files

struct Slot {
  std::string id;
  std::string name;  // (a bundle's) its file-safe name, a plain name without '/'
  odla_value_type type{};
};

struct StoredExecutable {
  std::vector<Slot> args, outputs, variables;
  std::string device_kind;   // "cpu", or (a bundle read for odla_runner) "cuda"
  std::string_view library;  // the library's bytes, or
  std::string library_path;  // (a bundle's) its file
  std::vector<Array> variable_data, weights;
  bool vendor_regions = false;  // its main calls a vendor plugin's regions (oneDNN's)
};

// Parses `blob` (kept alive by the caller); a malformed one throws Error naming `what`.
StoredExecutable ParseStoredExecutable(std::string_view blob, const std::string& what);

// Parses the exported bundle (odla_tvm.export) in the folder `root`, checking its manifest's
// and its files' sha256 unless its caller has (`check_digests`); its arrays view their files,
// mapped. `gpu`: a bundle for a CUDA device is read too (odla_runner runs it).
StoredExecutable ParseBundle(const std::string& root, bool check_digests = true,
                             bool gpu = false);

// Whether `name` is a plain relative file name a bundle may hold: '/'-separated parts of
// [A-Za-z0-9_.-], none empty, "." or "..".
bool PlainName(std::string_view name);

}  // namespace odla_tvm

#endif  // ODLA_TVM_STORED_EXECUTABLE_H_

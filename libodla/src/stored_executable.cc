// The stored executable's and the bundle's format, read in C++ (see stored_executable.h).
#include "stored_executable.h"

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/string.h>

#include <cstring>
#include <set>
#include <unordered_map>

#include "sha256.h"

namespace ffi = tvm::ffi;

namespace odla_tvm {

namespace {

const char kMagic[8] = {'O', 'D', 'L', 'A', 'T', 'V', 'M', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 20;
const char kBundleFormat[] = "odla-tvm-bundle/1";
const char kManifest[] = "manifest.json";
const char kManifestDigest[] = "manifest.sha256";
const char kLibrary[] = "model.so";

struct Reader {
  const std::string& what;
  [[noreturn]] void Fail(const std::string& message) const {
    throw Error(ODLA_INVALID_PARAM, "not a valid odla-tvm executable: " + what + ": " + message);
  }
  std::string Where(const std::string& part) const {
    return "not a valid odla-tvm executable: " + what + ": " + part;
  }
};

template <typename T>
T Load(std::string_view bytes, uint64_t at) {  // `at` + sizeof(T) is checked by the caller
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

// Refuses a manifest larger than kMaxManifestBytes or nested deeper than kMaxManifestDepth
// before TVM-FFI's parser (which recurses without a limit) sees it.
void CheckJsonBounds(std::string_view text, const Reader& r) {
  if (text.size() > kMaxManifestBytes)
    r.Fail("its manifest is " + std::to_string(text.size()) + " bytes; at most " +
           std::to_string(kMaxManifestBytes));
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxManifestDepth)
        r.Fail("its manifest nests deeper than " + std::to_string(kMaxManifestDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

ffi::json::Object ParseJson(std::string_view text, const Reader& r) {
  ffi::String error;
  ffi::json::Value parsed = ffi::json::Parse(ffi::String(std::string(text)), &error);
  auto manifest = parsed.try_cast<ffi::json::Object>();
  if (!manifest || !error.empty()) r.Fail("its manifest is unreadable");
  return *manifest;
}

std::optional<ffi::Any> Find(const ffi::json::Object& object, const char* key) {
  auto found = object.find(ffi::String(key));
  if (found == object.end()) return std::nullopt;
  return (*found).second;
}

ffi::json::Object Field(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto value = Find(object, key);
  if (!value) r.Fail(std::string("its manifest lacks ") + key);
  auto cast = value->try_cast<ffi::json::Object>();
  if (!cast) r.Fail(std::string("its manifest's ") + key + " is not an object");
  return *cast;
}

ffi::json::Array List(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto value = Find(object, key);
  if (!value) return {};
  auto cast = value->try_cast<ffi::json::Array>();
  if (!cast) r.Fail(std::string("its manifest's ") + key + " is not a list");
  if (cast->size() > kMaxManifestEntries)
    r.Fail(std::string("its manifest's ") + key + " has more than " +
           std::to_string(kMaxManifestEntries) + " entries");
  return *cast;
}

int64_t Integer(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto value = Find(object, key);
  auto cast = value ? value->try_cast<int64_t>() : std::nullopt;
  if (!cast || *cast < 0) r.Fail(std::string("its manifest's ") + key + " is not a byte count");
  return *cast;
}

std::string Text(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto value = Find(object, key);
  auto cast = value ? value->try_cast<ffi::String>() : std::nullopt;
  if (!cast) r.Fail(std::string("its manifest's ") + key + " is not a string");
  return std::string(*cast);
}

// `dims` of a slot or weight: at most `rank` non-negative integers (-1 too where `dynamic`),
// whose product in bytes of `bits` elements fits 63 bits.
std::vector<int64_t> Dims(const ffi::json::Array& dims, size_t rank, bool dynamic, int bits,
                          const std::string& what, const Reader& r) {
  if (dims.size() > rank) r.Fail(what + " has more than " + std::to_string(rank) + " dims");
  std::vector<int64_t> out;
  int64_t bytes = (bits + 7) / 8;
  for (const ffi::Any& item : dims) {
    auto d = item.try_cast<int64_t>();
    if (!d || *d < (dynamic ? -1 : 0)) r.Fail(what + " has a dim that is not a size");
    if (*d > 0 && __builtin_mul_overflow(bytes, *d, &bytes)) r.Fail(what + "'s size overflows");
    out.push_back(*d);
  }
  return out;
}

Slot ParseSlot(const ffi::Any& entry, const Reader& r) {
  auto object = entry.try_cast<ffi::json::Object>();
  if (!object) r.Fail("a slot of its manifest is not an object");
  Slot slot;
  slot.id = Text(*object, "id", r);
  if (Find(*object, "name")) {
    slot.name = Text(*object, "name", r);
    if (!PlainName(slot.name) || slot.name.find('/') != std::string::npos)
      r.Fail("slot " + slot.id + " has the name \"" + slot.name + "\", not a plain file name");
  }
  ffi::json::Object type = Field(*object, "type", r);
  std::string element = Text(type, "element_type", r);
  const Dtype* dtype = DtypeOfOdlaName(element);
  if (dtype == nullptr) r.Fail("slot " + slot.id + " has element type " + element);
  slot.type.element_type = dtype->element;
  std::vector<int64_t> dims = Dims(List(type, "dims", r), ODLA_MAX_DIMENSION, true,
                                   dtype->dl.bits, "slot " + slot.id, r);
  slot.type.shape.size = static_cast<odla_int32>(dims.size());
  std::copy(dims.begin(), dims.end(), slot.type.shape.dims);
  return slot;
}

std::vector<Slot> Slots(const ffi::json::Object& manifest, const char* key, const Reader& r) {
  std::vector<Slot> slots;
  std::set<std::string> ids;
  for (const ffi::Any& entry : List(manifest, key, r)) {
    slots.push_back(ParseSlot(entry, r));
    if (!ids.insert(slots.back().id).second)
      r.Fail(std::string("its manifest's ") + key + " name " + slots.back().id + " twice");
  }
  return slots;
}

// Refuses `array` unless of `dtype` and `dims` (-1: any size).
void CheckArray(const Array& array, DLDataType dtype, const std::vector<int64_t>& dims,
                const std::string& what, const Reader& r) {
  bool same = SameDL(array.dtype, dtype) && array.shape.size() == dims.size();
  for (size_t i = 0; same && i < dims.size(); ++i) same = dims[i] < 0 || dims[i] == array.shape[i];
  if (!same) r.Fail(what + "'s data differs from the type its manifest declares");
}

void CheckVariables(const StoredExecutable& stored, const Reader& r) {
  for (size_t i = 0; i < stored.variables.size(); ++i) {
    const odla_value_type& type = stored.variables[i].type;
    CheckArray(stored.variable_data[i], DataType(type.element_type),
               std::vector<int64_t>(type.shape.dims, type.shape.dims + type.shape.size),
               "variable " + stored.variables[i].id, r);
  }
}

// The weights' declared types (a manifest's "weights": dtype and dims of each).
void CheckWeights(const ffi::json::Array& declared, const std::vector<Array>& weights,
                  const Reader& r) {
  for (size_t i = 0; i < declared.size(); ++i) {
    auto object = declared[i].try_cast<ffi::json::Object>();
    if (!object) r.Fail("a weight of its manifest is not an object");
    std::string name = "weight " + std::to_string(i);
    const Dtype* dtype = DtypeOfNumpyName(Text(*object, "dtype", r));
    if (dtype == nullptr) r.Fail(name + " has a dtype this library does not read");
    CheckArray(weights[i], dtype->dl,
               Dims(List(*object, "dims", r), kNpyMaxRank, false, dtype->dl.bits, name, r), name,
               r);
  }
}

// The index `name` gives an entry "<prefix><index>.npy" of an .npz, or -1 for another name.
int64_t EntryIndex(std::string_view name, std::string_view prefix, size_t count) {
  if (name.size() <= prefix.size() + 4 || name.substr(0, prefix.size()) != prefix ||
      name.substr(name.size() - 4) != ".npy")
    return -1;
  std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return -1;
  int64_t index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    index = index * 10 + (c - '0');
  }
  return static_cast<size_t>(index) < count ? index : -1;
}

// The entries "<prefix><i>.npy", i = 0 .. expected - 1, of an uncompressed .npz (a zip
// archive); every offset and length is checked against the archive before it is followed.
std::vector<Array> ParseNpz(std::string_view zip, const char* prefix, size_t expected,
                            const Reader& r) {
  std::vector<Array> arrays(expected);
  std::vector<bool> found(expected, false);
  if (zip.size() < 22) r.Fail("an array archive is truncated");
  uint64_t end = zip.size() - 22;  // the end-of-central-directory record, before any comment
  while (Load<uint32_t>(zip, end) != 0x06054b50) {
    if (end == 0 || zip.size() - end > 22 + 65535) r.Fail("an array archive has no directory");
    --end;
  }
  uint64_t entries = Load<uint16_t>(zip, end + 10);
  uint64_t at = Load<uint32_t>(zip, end + 16);
  for (uint64_t e = 0; e < entries; ++e) {
    if (at > zip.size() - 46 || Load<uint32_t>(zip, at) != 0x02014b50)
      r.Fail("an array archive's directory is damaged");
    uint16_t method = Load<uint16_t>(zip, at + 10);
    uint64_t packed = Load<uint32_t>(zip, at + 20), size = Load<uint32_t>(zip, at + 24);
    uint64_t name_len = Load<uint16_t>(zip, at + 28), extra_len = Load<uint16_t>(zip, at + 30),
             comment_len = Load<uint16_t>(zip, at + 32);
    uint64_t local = Load<uint32_t>(zip, at + 42);
    uint64_t extra_at = at + 46 + name_len, next = extra_at + extra_len + comment_len;
    if (next > zip.size()) r.Fail("an array archive's directory is truncated");
    std::string_view name = zip.substr(at + 46, name_len);
    // ZIP64: the sizes and offset too large for 32 bits follow in an extra field (id 1), in
    // this order, each present only where its 32-bit field is 0xffffffff
    for (uint64_t x = extra_at; x + 4 <= extra_at + extra_len;) {
      uint64_t id = Load<uint16_t>(zip, x), len = Load<uint16_t>(zip, x + 2);
      uint64_t field = x + 4, field_end = field + len;
      if (field_end > extra_at + extra_len) r.Fail("an array archive's extra field is truncated");
      if (id == 1) {
        for (uint64_t* value : {&size, &packed, &local}) {
          if (*value != 0xffffffffu) continue;
          if (field + 8 > field_end) r.Fail("an array archive's ZIP64 field is truncated");
          *value = Load<uint64_t>(zip, field);
          field += 8;
        }
      }
      x = field_end;
    }
    if (method != 0 || packed != size) r.Fail("an array archive is compressed");
    if (local > zip.size() - 30 || Load<uint32_t>(zip, local) != 0x04034b50)
      r.Fail("an array archive's entry is damaged");
    uint64_t data = local + 30 + Load<uint16_t>(zip, local + 26) + Load<uint16_t>(zip, local + 28);
    if (data > zip.size() || size > zip.size() - data)
      r.Fail("an array archive's entry is truncated");
    int64_t index = EntryIndex(name, prefix, expected);
    if (index >= 0) {
      if (found[index]) r.Fail("an array archive holds " + std::string(name) + " twice");
      arrays[index] = ParseNpy(zip.substr(data, size), r.Where(std::string(name)));
      found[index] = true;
    }
    at = next;
  }
  for (size_t i = 0; i < expected; ++i)
    if (!found[i]) r.Fail("an array archive lacks " + std::string(prefix) + std::to_string(i));
  return arrays;
}

// What a stored executable's and a bundle's manifests share: the machine and the slots.
StoredExecutable ParseManifest(const ffi::json::Object& manifest, const std::string& what,
                               bool gpu, const Reader& r) {
  std::string arch = Text(manifest, "arch", r), kind = Text(manifest, "device_kind", r);
#if defined(__x86_64__)
  const char* here = "x86_64";
#elif defined(__aarch64__)
  const char* here = "aarch64";
#else
  const char* here = "";
#endif
  if (arch != here || (kind != "cpu" && !(gpu && kind == "cuda")))
    throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, what + " holds code for a " + arch + " " + kind +
                                                  "; this library runs " + here + " CPU code");
  std::string tvm = Text(manifest, "tvm_version", r);
  if (tvm != ODLA_TVM_TVM_VERSION && *ODLA_TVM_TVM_VERSION)
    throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, what + " was built by TVM " + tvm + "; this "
                                              "library runs TVM " ODLA_TVM_TVM_VERSION
                                              "; recompile it from its computation");
  StoredExecutable stored;
  stored.device_kind = kind;
  stored.args = Slots(manifest, "args", r);
  stored.outputs = Slots(manifest, "outputs", r);
  stored.variables = Slots(manifest, "variables", r);
  stored.vendor_regions = !List(manifest, "vendor_regions", r).empty();
  return stored;
}

bool IsDigest(std::string_view text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

using MappedFiles = std::unordered_map<std::string, std::shared_ptr<const MappedFile>>;

// The bundle file `name` (a plain name, listed in its manifest's `files`), mapped.
std::shared_ptr<const MappedFile> BundleFile(const std::string& root, const std::string& name,
                                             const MappedFiles& mapped, bool populate,
                                             const Reader& r) {
  auto found = mapped.find(name);
  if (found != mapped.end()) return found->second;
  std::shared_ptr<const MappedFile> file = MappedFile::OpenBeneath(root, name, populate);
  if (!file) r.Fail(name + " is missing, or not a regular file inside the bundle");
  return file;
}

// The .npy file a manifest entry names (listed in `files`), a view of its mapping.
Array BundleArray(const std::string& root, const ffi::Any& entry, const ffi::json::Object& files,
                  const MappedFiles& mapped, const Reader& r) {
  auto object = entry.try_cast<ffi::json::Object>();
  if (!object) r.Fail("an entry of its manifest is not an object");
  std::string name = Text(*object, "file", r);
  if (!PlainName(name)) r.Fail("its manifest names the file \"" + name + "\", not a plain "
                               "relative name inside the bundle");
  if (files.find(ffi::String(name)) == files.end())
    r.Fail("its manifest names " + name + ", which its files (with their sha256) do not list");
  std::shared_ptr<const MappedFile> file = BundleFile(root, name, mapped, false, r);
  Array array = ParseNpy(file->bytes(), r.Where(name));
  array.file = std::move(file);
  return array;
}

}  // namespace

bool PlainName(std::string_view name) {
  if (name.empty() || name.size() > 4096) return false;
  for (size_t at = 0; at <= name.size();) {
    size_t slash = std::min(name.find('/', at), name.size());
    std::string_view part = name.substr(at, slash - at);
    if (part.empty() || part == "." || part == ".." ||
        part.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789_.-") != std::string_view::npos)
      return false;
    at = slash + 1;
  }
  return true;
}

StoredExecutable ParseBundle(const std::string& root, bool check_digests, bool gpu) {
  Reader r{root};
  std::shared_ptr<const MappedFile> text = MappedFile::OpenBeneath(root, kManifest);
  if (!text)
    throw Error(ODLA_FILE_NOT_EXIST, root + " has no " + kManifest + ": not an odla-tvm bundle");
  CheckJsonBounds(text->bytes(), r);  // before it is hashed
  if (check_digests) {
    std::shared_ptr<const MappedFile> digest = MappedFile::OpenBeneath(root, kManifestDigest);
    std::string_view expected = digest ? digest->bytes() : std::string_view();
    if (!expected.empty() && expected.back() == '\n') expected.remove_suffix(1);
    if (!IsDigest(expected))
      r.Fail(std::string(kManifestDigest) + " is missing or is not a sha256 in hex");
    if (Sha256Hex(text->bytes()) != expected)
      r.Fail(std::string(kManifest) + " was altered: its sha256 differs from " +
             kManifestDigest + "'s");
  }
  ffi::json::Object manifest = ParseJson(text->bytes(), r);
  if (!Find(manifest, "format") || Text(manifest, "format", r) != kBundleFormat)
    r.Fail(std::string("its manifest.json is not of format ") + kBundleFormat);
  StoredExecutable stored = ParseManifest(manifest, root, gpu, r);
  ffi::json::Object files = Field(manifest, "files", r);
  if (files.size() > kMaxManifestEntries) r.Fail("its manifest lists too many files");
  MappedFiles mapped;
  for (const auto& [key, digest] : files) {
    auto name = key.try_cast<ffi::String>();
    auto expected = digest.try_cast<ffi::String>();
    if (!name || !PlainName(std::string(*name)))
      r.Fail("its manifest lists a file that is not a plain relative name inside the bundle");
    if (!expected || !IsDigest(std::string(*expected)))
      r.Fail("its manifest gives " + std::string(*name) + " no sha256 in hex");
    if (!check_digests) continue;
    std::shared_ptr<const MappedFile> file = BundleFile(root, std::string(*name), mapped, true, r);
    if (Sha256Hex(file->bytes()) != std::string(*expected))
      r.Fail(std::string(*name) + " was altered: its sha256 differs from the manifest's");
    mapped.emplace(std::string(*name), std::move(file));
  }
  if (files.find(ffi::String(kLibrary)) == files.end()) r.Fail("its manifest lacks model.so");
  BundleFile(root, kLibrary, mapped, false, r);  // a regular file inside, not a link out
  stored.library_path = root + "/" + kLibrary;
  for (const ffi::Any& slot : List(manifest, "variables", r))
    stored.variable_data.push_back(BundleArray(root, slot, files, mapped, r));
  ffi::json::Array weights = List(manifest, "weights", r);
  for (const ffi::Any& weight : weights)
    stored.weights.push_back(BundleArray(root, weight, files, mapped, r));
  CheckVariables(stored, r);
  CheckWeights(weights, stored.weights, r);
  return stored;
}

StoredExecutable ParseStoredExecutable(std::string_view bytes, const std::string& what) {
  Reader r{what};
  if (bytes.size() < kHeaderSize)
    r.Fail(std::to_string(bytes.size()) + " bytes is shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) r.Fail("it does not start with ODLATVM");
  if (Load<uint32_t>(bytes, 8) != kFormatVersion)
    r.Fail("format version " + std::to_string(Load<uint32_t>(bytes, 8)) + "; this library reads 1");
  uint64_t manifest_len = Load<uint64_t>(bytes, 12);
  if (manifest_len > bytes.size() - kHeaderSize) r.Fail("its manifest is truncated");
  CheckJsonBounds(bytes.substr(kHeaderSize, manifest_len), r);
  ffi::json::Object manifest = ParseJson(bytes.substr(kHeaderSize, manifest_len), r);
  StoredExecutable stored = ParseManifest(manifest, what, false, r);
  ffi::json::Object sections = Field(manifest, "sections", r);
  uint64_t body = kHeaderSize + manifest_len;
  auto section = [&](const char* name) -> std::string_view {
    if (!Find(sections, name)) return {};
    ffi::json::Object entry = Field(sections, name, r);
    uint64_t offset = Integer(entry, "offset", r), size = Integer(entry, "size", r);
    if (offset > bytes.size() - body || size > bytes.size() - body - offset)
      r.Fail(std::string("section ") + name + " is truncated");
    std::string_view chunk = bytes.substr(body + offset, size);
    if (Sha256Hex(chunk) != Text(entry, "sha256", r))  // before any of it is loaded
      r.Fail(std::string("section ") + name + " fails its sha256 checksum (altered or damaged)");
    return chunk;
  };
  stored.library = section("library");
  if (stored.library.empty()) r.Fail("it has no library");
  stored.variable_data = ParseNpz(section("variables"), "v", stored.variables.size(), r);
  CheckVariables(stored, r);
  ffi::json::Array weights = List(manifest, "weights", r);
  std::string_view archive = section("weights");
  if (!archive.empty()) {
    stored.weights = ParseNpz(archive, "w", weights.size(), r);
    CheckWeights(weights, stored.weights, r);
  } else if (!weights.empty()) {
    r.Fail("its manifest declares weights; it has no weights section");
  }
  return stored;
}

}  // namespace odla_tvm

// The stored executable's format, read in C++ (see stored_executable.h).
#include "stored_executable.h"

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/string.h>

#include <cstring>
#include <unordered_map>

#include "sha256.h"

namespace ffi = tvm::ffi;

namespace odla_tvm {

namespace {

const char kMagic[8] = {'O', 'D', 'L', 'A', 'T', 'V', 'M', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 20;

struct Reader {
  const std::string& what;
  [[noreturn]] void Fail(const std::string& message) const {
    throw Error(ODLA_INVALID_PARAM, "not a valid odla-tvm executable: " + what + ": " + message);
  }
};

template <typename T>
T Load(std::string_view bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

const char* const kElementNames[] = {
    "INT8",   "INT16",   "INT32",   "INT64",   "UINT8",   "UINT16",  "UINT32",  "UINT64",
    "QINT8",  "QINT16",  "QINT32",  "QINT64",  "QUINT8",  "QUINT16", "QUINT32", "QUINT64",
    "FLOAT16", "BFLOAT16", "FLOAT32", "FLOAT64", "BOOL",  "STRING"};

ffi::json::Object Field(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto found = object.find(ffi::String(key));
  if (found == object.end()) r.Fail(std::string("its manifest lacks ") + key);
  auto value = (*found).second.try_cast<ffi::json::Object>();
  if (!value) r.Fail(std::string("its manifest's ") + key + " is not an object");
  return *value;
}

ffi::json::Array List(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto found = object.find(ffi::String(key));
  if (found == object.end()) return {};
  auto value = (*found).second.try_cast<ffi::json::Array>();
  if (!value) r.Fail(std::string("its manifest's ") + key + " is not a list");
  return *value;
}

int64_t Integer(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto found = object.find(ffi::String(key));
  auto value = found == object.end() ? std::nullopt : (*found).second.try_cast<int64_t>();
  if (!value || *value < 0) r.Fail(std::string("its manifest's ") + key + " is not a byte count");
  return *value;
}

std::string Text(const ffi::json::Object& object, const char* key, const Reader& r) {
  auto found = object.find(ffi::String(key));
  auto value = found == object.end() ? std::nullopt : (*found).second.try_cast<ffi::String>();
  if (!value) r.Fail(std::string("its manifest's ") + key + " is not a string");
  return std::string(*value);
}

Slot ParseSlot(const ffi::Any& entry, const Reader& r) {
  auto object = entry.try_cast<ffi::json::Object>();
  if (!object) r.Fail("a slot of its manifest is not an object");
  Slot slot;
  slot.id = Text(*object, "id", r);
  ffi::json::Object type = Field(*object, "type", r);
  std::string element = Text(type, "element_type", r);
  int code = -1;
  for (int i = 0; i <= ODLA_BOOL; ++i)
    if (element == kElementNames[i]) code = i;
  if (code < 0) r.Fail("slot " + slot.id + " has element type " + element);
  slot.type.element_type = static_cast<odla_element_type>(code);
  ffi::json::Array dims = List(type, "dims", r);
  if (dims.size() > ODLA_MAX_DIMENSION) r.Fail("slot " + slot.id + " has too many dims");
  slot.type.shape.size = static_cast<odla_int32>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    auto d = dims[i].try_cast<int64_t>();
    if (!d || *d < -1) r.Fail("slot " + slot.id + " has a bad dim");
    slot.type.shape.dims[i] = *d;
  }
  return slot;
}

std::vector<Slot> Slots(const ffi::json::Object& manifest, const char* key, const Reader& r) {
  std::vector<Slot> slots;
  for (const ffi::Any& entry : List(manifest, key, r)) slots.push_back(ParseSlot(entry, r));
  return slots;
}

DLDataType NpyType(const std::string& descr, const Reader& r) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
    r.Fail("an array has dtype " + descr + " (not little-endian)");
  char kind = descr[1];
  int bits = std::atoi(descr.c_str() + 2) * 8;
  switch (kind) {
    case 'f': return {kDLFloat, static_cast<uint8_t>(bits), 1};
    case 'i': return {kDLInt, static_cast<uint8_t>(bits), 1};
    case 'u': return {kDLUInt, static_cast<uint8_t>(bits), 1};
    case 'b': return {kDLBool, 8, 1};
    case 'V': if (bits == 16) return {kDLBfloat, 16, 1};  // ml_dtypes' bfloat16
  }
  r.Fail("an array has dtype " + descr);
}

// One .npy file's array, its data a view of `bytes`.
Array ParseNpy(std::string_view bytes, const Reader& r) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != "\x93NUMPY") r.Fail("an array is not .npy");
  size_t header_at = bytes[6] == 1 ? 10 : 12;
  size_t header_len = bytes[6] == 1 ? Load<uint16_t>(bytes, 8) : Load<uint32_t>(bytes, 8);
  if (header_at + header_len > bytes.size()) r.Fail("an array's header is truncated");
  std::string header(bytes.substr(header_at, header_len));
  auto after = [&](const char* key) {
    size_t at = header.find(key);
    if (at == std::string::npos) r.Fail(std::string("an array's header lacks ") + key);
    return header.substr(header.find(':', at) + 1);
  };
  std::string descr = after("'descr'");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  std::string order = after("'fortran_order'");
  if (order.find("True") < order.find(',')) r.Fail("an array is Fortran-ordered");
  std::string shape_text = after("'shape'");
  shape_text = shape_text.substr(shape_text.find('(') + 1);
  shape_text = shape_text.substr(0, shape_text.find(')'));
  Array array;
  array.dtype = descr.find("bfloat16") != std::string::npos ? DLDataType{kDLBfloat, 16, 1}
                                                            : NpyType(descr, r);
  int64_t count = 1;
  for (size_t at = 0; at < shape_text.size();) {
    size_t comma = shape_text.find(',', at);
    size_t length = comma == std::string::npos ? std::string::npos : comma - at;
    std::string item = shape_text.substr(at, length);
    if (item.find_first_of("0123456789") != std::string::npos) {
      array.shape.push_back(std::stoll(item));
      count *= array.shape.back();
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  size_t size = static_cast<size_t>(count) * ((array.dtype.bits + 7) / 8);
  array.data = bytes.substr(header_at + header_len);
  if (array.data.size() != size) r.Fail("an array's data is truncated");
  return array;
}

// The entries "<prefix><i>.npy", i = 0.., of an uncompressed .npz (a zip archive).
std::vector<Array> ParseNpz(std::string_view zip, const char* prefix, size_t expected,
                            const Reader& r) {
  std::vector<Array> arrays(expected);
  std::vector<bool> found(expected, false);
  if (zip.size() < 22) r.Fail("an array archive is truncated");
  size_t end = zip.size() - 22;  // the end-of-central-directory record, before any comment
  while (Load<uint32_t>(zip, end) != 0x06054b50) {
    if (end == 0 || zip.size() - end > 22 + 65535) r.Fail("an array archive has no directory");
    --end;
  }
  uint64_t entries = Load<uint16_t>(zip, end + 10);
  uint64_t at = Load<uint32_t>(zip, end + 16);
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > zip.size() || Load<uint32_t>(zip, at) != 0x02014b50)
      r.Fail("an array archive's directory is damaged");
    uint16_t method = Load<uint16_t>(zip, at + 10);
    uint64_t size = Load<uint32_t>(zip, at + 24);  // stored: the same as compressed
    uint16_t name_len = Load<uint16_t>(zip, at + 28), extra_len = Load<uint16_t>(zip, at + 30),
             comment_len = Load<uint16_t>(zip, at + 32);
    uint64_t local = Load<uint32_t>(zip, at + 42);
    if (at + 46 + name_len + extra_len > zip.size()) r.Fail("an array archive is truncated");
    std::string name(zip.substr(at + 46, name_len));
    // ZIP64: the sizes and offset too large for 32 bits follow in an extra field (id 1)
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      uint16_t id = Load<uint16_t>(zip, x), len = Load<uint16_t>(zip, x + 2);
      uint64_t field = x + 4;
      if (id == 1) {
        // in this order, each present only where its 32-bit field is 0xffffffff
        if (Load<uint32_t>(zip, at + 24) == 0xffffffffu) {
          size = Load<uint64_t>(zip, field);
          field += 8;
        }
        if (Load<uint32_t>(zip, at + 20) == 0xffffffffu) field += 8;
        if (local == 0xffffffffu) local = Load<uint64_t>(zip, field);
      }
      x += 4 + len;
    }
    if (method != 0) r.Fail("an array archive is compressed");
    if (local + 30 > zip.size() || Load<uint32_t>(zip, local) != 0x04034b50)
      r.Fail("an array archive's entry is damaged");
    uint64_t data = local + 30 + Load<uint16_t>(zip, local + 26) + Load<uint16_t>(zip, local + 28);
    if (data + size > zip.size()) r.Fail("an array archive's entry is truncated");
    size_t p = std::strlen(prefix);
    if (name.compare(0, p, prefix) == 0 && name.size() > p + 4) {
      size_t index = std::stoul(name.substr(p));
      if (index < expected) {
        arrays[index] = ParseNpy(zip.substr(data, size), r);
        found[index] = true;
      }
    }
    at += 46 + name_len + extra_len + comment_len;
  }
  for (size_t i = 0; i < expected; ++i)
    if (!found[i]) r.Fail("an array archive lacks " + std::string(prefix) + std::to_string(i));
  return arrays;
}

// What a stored executable's and a bundle's manifests share: the machine and the slots.
StoredExecutable ParseManifest(const ffi::json::Object& manifest, const std::string& what,
                               const Reader& r) {
  std::string arch = Text(manifest, "arch", r), kind = Text(manifest, "device_kind", r);
#if defined(__x86_64__)
  const char* here = "x86_64";
#elif defined(__aarch64__)
  const char* here = "aarch64";
#else
  const char* here = "";
#endif
  if (arch != here || kind != "cpu")
    throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, what + " holds code for a " + arch + " " + kind +
                                                  "; this library runs " + here + " CPU code");
  std::string tvm = Text(manifest, "tvm_version", r);
  if (tvm != ODLA_TVM_TVM_VERSION && *ODLA_TVM_TVM_VERSION)
    throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, what + " was built by TVM " + tvm + "; this "
                                              "library runs TVM " ODLA_TVM_TVM_VERSION
                                              "; recompile it from its computation");
  StoredExecutable stored;
  stored.args = Slots(manifest, "args", r);
  stored.outputs = Slots(manifest, "outputs", r);
  stored.variables = Slots(manifest, "variables", r);
  stored.vendor_regions = !List(manifest, "vendor_regions", r).empty();
  return stored;
}

std::shared_ptr<const MappedFile> Map(const std::string& path, const Reader& r,
                                      bool populate = true) {
  std::shared_ptr<const MappedFile> file = MappedFile::Open(path, populate);
  if (!file) r.Fail(path + " is missing");
  return file;
}

using MappedFiles = std::unordered_map<std::string, std::shared_ptr<const MappedFile>>;

// The .npy file a manifest entry names, a view of its mapping (of `files`, where checked).
Array BundleArray(const std::string& root, const ffi::Any& entry, const MappedFiles& files,
                  const Reader& r) {
  auto object = entry.try_cast<ffi::json::Object>();
  if (!object) r.Fail("an entry of its manifest is not an object");
  std::string name = Text(*object, "file", r);
  auto found = files.find(name);
  std::shared_ptr<const MappedFile> file =
      found == files.end() ? Map(root + "/" + name, r, false) : found->second;
  Array array = ParseNpy(file->bytes(), r);
  array.file = std::move(file);
  return array;
}

}  // namespace

StoredExecutable ParseBundle(const std::string& root, bool check_digests) {
  Reader r{root};
  std::string text(Map(root + "/manifest.json", r)->bytes());
  ffi::String error;
  auto manifest = ffi::json::Parse(ffi::String(text), &error).try_cast<ffi::json::Object>();
  if (!manifest || !error.empty()) r.Fail("its manifest.json is unreadable");
  if (Text(*manifest, "format", r) != "odla-tvm-bundle/1")
    r.Fail("its manifest.json is not of format odla-tvm-bundle/1");
  StoredExecutable stored = ParseManifest(*manifest, root, r);
  MappedFiles mapped;
  ffi::json::Object files = Field(*manifest, "files", r);
  for (const auto& [key, digest] : check_digests ? files : ffi::json::Object()) {
    std::string name(key.cast<ffi::String>()), path = root + "/" + name;
    std::shared_ptr<const MappedFile> file = Map(path, r);
    auto expected = digest.try_cast<ffi::String>();
    if (!expected || Sha256Hex(file->bytes()) != std::string(*expected))
      r.Fail(path + " was altered: its sha256 differs from the manifest's");
    mapped.emplace(name, std::move(file));
  }
  if (files.find(ffi::String("model.so")) == files.end()) r.Fail("its manifest lacks model.so");
  stored.library_path = root + "/model.so";
  for (const ffi::Any& slot : List(*manifest, "variables", r))
    stored.variable_data.push_back(BundleArray(root, slot, mapped, r));
  for (const ffi::Any& weight : List(*manifest, "weights", r))
    stored.weights.push_back(BundleArray(root, weight, mapped, r));
  return stored;
}

DLDataType DataType(odla_element_type type) {
  switch (type) {
    case ODLA_FLOAT16: return {kDLFloat, 16, 1};
    case ODLA_BFLOAT16: return {kDLBfloat, 16, 1};
    case ODLA_FLOAT32: return {kDLFloat, 32, 1};
    case ODLA_FLOAT64: return {kDLFloat, 64, 1};
    case ODLA_BOOL: return {kDLBool, 8, 1};
    case ODLA_INT8: case ODLA_QINT8: return {kDLInt, 8, 1};
    case ODLA_INT16: case ODLA_QINT16: return {kDLInt, 16, 1};
    case ODLA_INT32: case ODLA_QINT32: return {kDLInt, 32, 1};
    case ODLA_INT64: case ODLA_QINT64: return {kDLInt, 64, 1};
    case ODLA_UINT8: case ODLA_QUINT8: return {kDLUInt, 8, 1};
    case ODLA_UINT16: case ODLA_QUINT16: return {kDLUInt, 16, 1};
    case ODLA_UINT32: case ODLA_QUINT32: return {kDLUInt, 32, 1};
    case ODLA_UINT64: case ODLA_QUINT64: return {kDLUInt, 64, 1};
    default: throw Error(ODLA_UNSUPPORTED_DATATYPE, "element type " + std::to_string(type) +
                                                        " has no tensor form");
  }
}

StoredExecutable ParseStoredExecutable(const std::string& blob, const std::string& what) {
  Reader r{what};
  std::string_view bytes(blob);
  if (bytes.size() < kHeaderSize)
    r.Fail(std::to_string(bytes.size()) + " bytes is shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) r.Fail("it does not start with ODLATVM");
  if (Load<uint32_t>(bytes, 8) != kFormatVersion)
    r.Fail("format version " + std::to_string(Load<uint32_t>(bytes, 8)) + "; this library reads 1");
  uint64_t manifest_len = Load<uint64_t>(bytes, 12);
  if (manifest_len > bytes.size() - kHeaderSize) r.Fail("its manifest is truncated");
  ffi::String error;
  ffi::json::Value parsed =
      ffi::json::Parse(ffi::String(std::string(bytes.substr(kHeaderSize, manifest_len))), &error);
  auto manifest = parsed.try_cast<ffi::json::Object>();
  if (!manifest || !error.empty()) r.Fail("its manifest is unreadable");
  StoredExecutable stored = ParseManifest(*manifest, what, r);
  ffi::json::Object sections = Field(*manifest, "sections", r);
  size_t body = kHeaderSize + manifest_len;
  auto section = [&](const char* name) -> std::string_view {
    if (sections.find(ffi::String(name)) == sections.end()) return {};
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
  std::string_view weights = section("weights");
  if (!weights.empty())
    stored.weights = ParseNpz(weights, "w", List(*manifest, "weights", r).size(), r);
  return stored;
}

}  // namespace odla_tvm

// odla_runner: runs an odla-tvm bundle with TVM's C++ runtime only (no Python, no compiler).
//
//   odla_runner BUNDLE_DIR OUTPUT_DIR [--repeat N] INPUT.npy ...
//
// BUNDLE_DIR holds signature.txt (written by odla-tvm's export), the compiled library and the
// variables' data. Inputs are .npy files, one per argument in signature order; each output is
// written to OUTPUT_DIR/<output name>.npy. The median latency of N runs is printed.
// A bundle for a GPU (signature line "device cuda") has the runner load libtvm_runtime_cuda.so
// from its library path, copy the inputs and variables to GPU 0 once, and time each run to the
// device's synchronisation.
//
// signature.txt lines:  library FILE
//                       arg NAME DTYPE DIMS          (DIMS: comma-separated, -1 = any size)
//                       var NAME DTYPE DIMS FILE.npy
//                       out NAME DTYPE DIMS
//                       device cpu|cuda              (optional; default cpu)
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <dlfcn.h>

#include "odla_checks.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

struct HostAlloc {
  void AllocData(DLTensor* t) {
    size_t bytes = (ffi::GetDataSize(*t) + 63) / 64 * 64;
    t->data = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

struct DtypeName {
  const char* name;
  const char* npy;  // numpy descr, little-endian
  DLDataType dl;
};

const DtypeName kDtypes[] = {
    {"float32", "<f4", {kDLFloat, 32, 1}}, {"float64", "<f8", {kDLFloat, 64, 1}},
    {"float16", "<f2", {kDLFloat, 16, 1}}, {"int8", "|i1", {kDLInt, 8, 1}},
    {"int16", "<i2", {kDLInt, 16, 1}},     {"int32", "<i4", {kDLInt, 32, 1}},
    {"int64", "<i8", {kDLInt, 64, 1}},     {"uint8", "|u1", {kDLUInt, 8, 1}},
    {"uint16", "<u2", {kDLUInt, 16, 1}},   {"uint32", "<u4", {kDLUInt, 32, 1}},
    {"uint64", "<u8", {kDLUInt, 64, 1}},   {"bool", "|b1", {kDLBool, 8, 1}},
};

const DtypeName& DtypeByName(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d;
  throw std::runtime_error("unsupported dtype " + name);
}

const DtypeName& DtypeByDL(DLDataType dl) {
  for (const auto& d : kDtypes)
    if (d.dl.code == dl.code && d.dl.bits == dl.bits) return d;
  throw std::runtime_error("output has a dtype with no .npy form");
}

struct Slot {
  std::string kind, name, dtype;
  std::vector<int64_t> dims;
  std::string file;
};

std::vector<int64_t> ParseDims(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) dims.push_back(std::stoll(item));
  return dims;
}

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// Reads a C-ordered little-endian .npy file into a new host tensor.
ffi::Tensor ReadNpy(const std::string& path, std::string* dtype_name) {
  std::vector<char> bytes = ReadFile(path);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + " is not a .npy file");
  int major = bytes[6];
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    offset = 10;
  } else {
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    offset = 12;
  }
  if (offset + header_len > bytes.size()) throw std::runtime_error(path + ": truncated header");
  std::string header(bytes.data() + offset, header_len);
  auto field = [&](const std::string& key) {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos) throw std::runtime_error(path + ": header lacks " + key);
    return header.substr(header.find(':', at) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw std::runtime_error(path + ": Fortran-ordered arrays are not supported");
  std::string shape_text = field("shape");
  shape_text = shape_text.substr(shape_text.find('(') + 1);
  shape_text = shape_text.substr(0, shape_text.find(')'));
  std::vector<int64_t> shape = ParseDims(shape_text);
  const DtypeName* dtype = nullptr;
  for (const auto& d : kDtypes)
    if (descr == d.npy || (descr.size() == 3 && descr.substr(1) == std::string(d.npy).substr(1)))
      dtype = &d;
  if (!dtype) throw std::runtime_error(path + ": unsupported dtype " + descr);
  *dtype_name = dtype->name;
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(HostAlloc(), ffi::Shape(shape), dtype->dl,
                                           DLDevice{kDLCPU, 0});
  size_t size = ffi::GetDataSize(*t.GetDLTensorPtr());
  size_t data_at = offset + header_len;
  if (bytes.size() - data_at != size)
    throw std::runtime_error(path + ": holds " + std::to_string(bytes.size() - data_at) +
                             " data bytes; its header says " + std::to_string(size));
  std::memcpy(t.GetDLTensorPtr()->data, bytes.data() + data_at, size);
  return t;
}

void WriteNpy(const std::string& path, const DLTensor& t) {
  std::vector<int64_t> dims(t.shape, t.shape + t.ndim);
  std::string header = "{'descr': '" + std::string(DtypeByDL(t.dtype).npy) +
                       "', 'fortran_order': False, 'shape': " + ShapeText(dims) + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff));
  f.put(static_cast<char>(len >> 8));
  f.write(header.data(), header.size());
  f.write(static_cast<const char*>(t.data) + t.byte_offset, ffi::GetDataSize(t));
}

void CheckInput(const Slot& slot, const ffi::Tensor& t, const std::string& dtype,
                const std::string& path) {
  const DLTensor* dl = t.GetDLTensorPtr();
  std::vector<int64_t> shape(dl->shape, dl->shape + dl->ndim);
  bool fits = dtype == slot.dtype && shape.size() == slot.dims.size();
  for (size_t i = 0; fits && i < shape.size(); ++i)
    fits = slot.dims[i] == -1 || slot.dims[i] == shape[i];
  if (!fits)
    throw std::runtime_error(path + " holds " + dtype + ShapeText(shape) + "; argument " +
                             slot.name + " expects " + slot.dtype + ShapeText(slot.dims) +
                             " (-1: any size)");
}

// TVM's CUDA runtime registers the device and the loader of the library's GPU code; it is
// loaded only for a GPU bundle, so that CPU bundles run where no CUDA driver is installed.
DLDevice OpenDevice(const std::string& name) {
  if (name == "cpu") return DLDevice{kDLCPU, 0};
  if (name != "cuda") throw std::runtime_error("unknown device " + name + "; expected cpu or cuda");
  if (!dlopen("libtvm_runtime_cuda.so", RTLD_NOW | RTLD_GLOBAL))
    throw std::runtime_error(std::string("no CUDA device: cannot load TVM's CUDA runtime (") +
                             dlerror() + ")");
  DLDevice gpu{kDLCUDA, 0};
  int kExist = 0;  // tvm::runtime::DeviceAttrKind
  auto attr = ffi::Function::GetGlobal("runtime.GetDeviceAttr").value();
  if (attr(static_cast<int>(gpu.device_type), gpu.device_id, kExist).cast<int64_t>() == 0)
    throw std::runtime_error("no CUDA device: the driver is installed but reports no GPU");
  return gpu;
}

void Synchronize(DLDevice device) {
  if (device.device_type == kDLCPU) return;
  static auto sync = ffi::Function::GetGlobal("runtime.Device_StreamSync").value();
  sync(device, 0);  // TVM launches its kernels on the default stream
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) {
      std::cerr << "usage: " << argv[0] << " BUNDLE_DIR OUTPUT_DIR [--repeat N] INPUT.npy ...\n";
      return 2;
    }
    std::string bundle = argv[1], out_dir = argv[2];
    int repeat = 10;
    std::vector<std::string> inputs;
    for (int i = 3; i < argc; ++i) {
      if (std::string(argv[i]) == "--repeat" && i + 1 < argc)
        repeat = std::max(1, std::atoi(argv[++i]));
      else
        inputs.push_back(argv[i]);
    }

    std::error_code made;
    std::filesystem::create_directories(out_dir, made);  // like `mkdir -p`: outputs go there
    if (made) throw std::runtime_error("cannot create " + out_dir + ": " + made.message());

    std::ifstream sig(bundle + "/signature.txt");
    if (!sig) throw std::runtime_error(bundle + "/signature.txt is missing: not an odla-tvm bundle");
    std::string library, device_name = "cpu";
    std::vector<Slot> slots;
    for (std::string line; std::getline(sig, line);) {
      std::stringstream ss(line);
      Slot s;
      std::string dims;
      ss >> s.kind;
      if (s.kind == "library" || s.kind == "device") {
        ss >> (s.kind == "library" ? library : device_name);
        continue;
      }
      ss >> s.name >> s.dtype >> dims >> s.file;
      s.dims = ParseDims(dims);
      if (!s.kind.empty()) slots.push_back(s);
    }

    DLDevice device = OpenDevice(device_name);
    std::vector<ffi::Tensor> args;
    size_t next_input = 0;
    for (const Slot& s : slots) {
      if (s.kind == "out") continue;
      std::string path = s.kind == "arg" ? (next_input < inputs.size() ? inputs[next_input++] : "")
                                         : bundle + "/" + s.file;
      if (path.empty()) throw std::runtime_error("no input file given for argument " + s.name);
      std::string dtype;
      args.push_back(ReadNpy(path, &dtype));
      CheckInput(s, args.back(), dtype, path);
      args.back() = odla_checks::OnDevice(args.back(), device);
    }
    if (next_input != inputs.size())
      throw std::runtime_error(std::to_string(inputs.size()) + " input files given; the bundle has " +
                               std::to_string(next_input) + " arguments");

    odla_checks::RegisterChecks();
    ffi::Module lib = ffi::Module::LoadFromFile(bundle + "/" + library);
    ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    // device type, id, allocator (2: pooled) for the device, then the same for the host
    vm->GetFunction("vm_initialization").value()(static_cast<int>(device.device_type), 0, 2,
                                                 static_cast<int>(kDLCPU), 0, 2);
    ffi::Function run = vm->GetFunction("main").value();

    std::vector<ffi::AnyView> packed(args.begin(), args.end());
    ffi::Any result;
    std::vector<double> times;
    for (int i = 0; i < repeat; ++i) {
      auto start = std::chrono::steady_clock::now();
      run.CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
      Synchronize(device);
      times.push_back(std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start).count());
    }
    auto outputs = result.cast<ffi::Array<ffi::Any>>();
    size_t index = 0;
    for (const Slot& s : slots) {
      if (s.kind != "out") continue;
      ffi::Tensor t = odla_checks::OnHost(outputs[index++].cast<ffi::Tensor>());
      WriteNpy(out_dir + "/" + s.name + ".npy", *t.GetDLTensorPtr());
      std::cout << "output " << s.name << ": " << DtypeByDL(t.GetDLTensorPtr()->dtype).name
                << ShapeText(std::vector<int64_t>(t.GetDLTensorPtr()->shape,
                                                  t.GetDLTensorPtr()->shape + t.GetDLTensorPtr()->ndim))
                << " -> " << out_dir << "/" << s.name << ".npy\n";
    }
    std::sort(times.begin(), times.end());
    std::printf("latency: median %.3f ms, min %.3f ms over %d runs\n", times[times.size() / 2],
                times.front(), repeat);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "odla_runner: error: " << e.what() << "\n";
    return 1;
  }
}

// odla_runner: runs an odla-tvm bundle with TVM's C++ runtime only (no Python, no compiler).
//
//   odla_runner BUNDLE_DIR OUTPUT_DIR [--repeat N] INPUT.npy ...
//
// BUNDLE_DIR is an exported bundle: its manifest.json (docs/formats.md), read and checked by
// libodla's reader (its digest, every file's sha256, every name and shape), names the compiled
// library, the arguments, the variables' and weights' files and the outputs. Inputs are .npy
// files, one per argument in the manifest's order; each output is written to
// OUTPUT_DIR/<its manifest name>.npy. The median latency of N runs is printed.
// A bundle for a GPU (device_kind "cuda") has the runner load libtvm_runtime_cuda.so from its
// library path, copy the inputs and variables to GPU 0 once, and time each run to the
// device's synchronisation.
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "checks.h"
#include "stored_executable.h"

namespace ffi = tvm::ffi;
using odla_tvm::Array;

namespace {

struct HostAlloc {
  void AllocData(DLTensor* t) {
    size_t bytes = (ffi::GetDataSize(*t) + 63) / 64 * 64;
    t->data = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (t->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::string DtypeName(DLDataType dtype) {
  const odla_tvm::Dtype* known = odla_tvm::DtypeOfDL(dtype);
  return known ? known->numpy : "?";
}

// A host tensor holding a copy of `array`.
ffi::Tensor HostTensor(const Array& array) {
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(HostAlloc(), ffi::Shape(array.shape), array.dtype,
                                           DLDevice{kDLCPU, 0});
  std::memcpy(t.GetDLTensorPtr()->data, array.data.data(), array.data.size());
  return t;
}

// The input file at `path`, refused unless of the type of argument `slot`.
ffi::Tensor ReadInput(const std::string& path, const odla_tvm::Slot& slot) {
  std::shared_ptr<const odla_tvm::MappedFile> file = odla_tvm::MappedFile::Open(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  Array array = odla_tvm::ParseNpy(file->bytes(), path);
  const odla_value_shape& shape = slot.type.shape;
  std::vector<int64_t> dims(shape.dims, shape.dims + shape.size);
  DLDataType dtype = odla_tvm::DataType(slot.type.element_type);
  bool fits = odla_tvm::SameDL(array.dtype, dtype) && array.shape.size() == dims.size();
  for (size_t i = 0; fits && i < dims.size(); ++i) fits = dims[i] == -1 || dims[i] == array.shape[i];
  if (!fits)
    throw std::runtime_error(path + " holds " + DtypeName(array.dtype) + ShapeText(array.shape) +
                             "; argument " + slot.id + " expects " + DtypeName(dtype) +
                             ShapeText(dims) + " (-1: any size)");
  return HostTensor(array);
}

void WriteNpy(const std::string& path, const DLTensor& t) {
  std::string bytes = odla_tvm::NpyBytes(
      t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim),
      std::string_view(static_cast<const char*>(t.data) + t.byte_offset, ffi::GetDataSize(t)));
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(bytes.data(), bytes.size())) throw std::runtime_error("cannot write " + path);
}

// TVM's CUDA runtime registers the device and the loader of the library's GPU code; it is
// loaded only for a GPU bundle, so that CPU bundles run where no CUDA driver is installed.
DLDevice OpenDevice(const std::string& name) {
  if (name == "cpu") return DLDevice{kDLCPU, 0};
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

    odla_tvm::StoredExecutable stored = odla_tvm::ParseBundle(bundle, true, true);
    if (inputs.size() != stored.args.size())
      throw std::runtime_error(std::to_string(inputs.size()) + " input files given; the bundle "
                               "has " + std::to_string(stored.args.size()) + " arguments");
    DLDevice device = OpenDevice(stored.device_kind);
    std::vector<ffi::Tensor> args;
    for (size_t i = 0; i < inputs.size(); ++i) args.push_back(ReadInput(inputs[i], stored.args[i]));
    for (const Array& a : stored.variable_data) args.push_back(HostTensor(a));
    for (const Array& a : stored.weights) args.push_back(HostTensor(a));
    for (ffi::Tensor& t : args) t = odla_tvm::OnDevice(t, device);
    stored.variable_data.clear();  // (their mappings)
    stored.weights.clear();

    odla_tvm::RegisterChecks();
    ffi::Module lib = ffi::Module::LoadFromFile(stored.library_path);
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
    std::vector<ffi::Tensor> outputs;
    if (auto single = result.try_cast<ffi::Tensor>())
      outputs.push_back(*single);
    else
      for (const ffi::Any& o : result.cast<ffi::Array<ffi::Any>>())
        outputs.push_back(o.cast<ffi::Tensor>());
    if (outputs.size() != stored.outputs.size())
      throw std::runtime_error("the library returned " + std::to_string(outputs.size()) +
                               " outputs; its manifest declares " +
                               std::to_string(stored.outputs.size()));
    for (size_t i = 0; i < outputs.size(); ++i) {
      ffi::Tensor t = odla_tvm::OnHost(outputs[i]);
      const DLTensor& dl = *t.GetDLTensorPtr();
      const std::string& name = stored.outputs[i].name;
      std::string path = out_dir + "/" + (name.empty() ? "output" + std::to_string(i) : name) +
                         ".npy";
      WriteNpy(path, dl);
      std::cout << "output " << stored.outputs[i].id << ": " << DtypeName(dl.dtype)
                << ShapeText(std::vector<int64_t>(dl.shape, dl.shape + dl.ndim)) << " -> "
                << path << "\n";
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

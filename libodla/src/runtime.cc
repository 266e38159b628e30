// The run path: loading a stored executable into TVM's runtime, running it on a context's
// bindings, and the executable and context entry points of odla_compute.h.
#include "runtime.h"

#include <tvm/ffi/container/array.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "checks.h"

namespace ffi = tvm::ffi;

namespace odla_tvm {

namespace {

constexpr size_t kAlignment = 64;  // what TVM's kernels assume of their operands

struct AlignedAlloc {
  void AllocData(DLTensor* t) {
    size_t bytes = (ffi::GetDataSize(*t) + kAlignment - 1) / kAlignment * kAlignment;
    t->data = std::aligned_alloc(kAlignment, bytes == 0 ? kAlignment : bytes);
    if (t->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

struct Borrowed {  // memory used in place: the caller's, or a mapped file's, which `owner` keeps
  void* data;
  std::shared_ptr<const void> owner;
  void AllocData(DLTensor* t) { t->data = data; }
  void FreeData(DLTensor*) {}
};

ffi::Shape Dims(const odla_value_shape& shape) {
  return ffi::Shape(std::vector<int64_t>(shape.dims, shape.dims + shape.size));
}

// A weight or variable as main takes it: a view of its bundle file's mapping where aligned as
// TVM's kernels assume (main never writes its parameters), else a copy.
ffi::Tensor ArrayTensor(const Array& array) {
  const char* data = array.data.data();
  if (array.file && reinterpret_cast<uintptr_t>(data) % kAlignment == 0)
    return ffi::Tensor::FromNDAlloc(Borrowed{const_cast<char*>(data), array.file},
                                    ffi::Shape(array.shape), array.dtype, DLDevice{kDLCPU, 0});
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(AlignedAlloc(), ffi::Shape(array.shape), array.dtype,
                                           DLDevice{kDLCPU, 0});
  std::memcpy(t.GetDLTensorPtr()->data, data, array.data.size());
  return t;
}

std::unique_ptr<_odla_value> SlotValue(const Slot& slot) {
  auto value = std::make_unique<_odla_value>();
  value->id = slot.id;
  value->type = slot.type;
  return value;
}

// The compiled library in `bytes`, written to a private file, loaded, and unlinked.
ffi::Module LoadLibrary(std::string_view bytes) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/odla-tvm-XXXXXX.so";
  int fd = mkstemps(path.data(), 3);
  if (fd < 0) throw Error(ODLA_FILE_NOT_EXIST, "cannot write a temporary file in " + path);
  bool written = write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  close(fd);
  struct Unlink {
    std::string path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_after{path};
  if (!written) throw Error(ODLA_MEM_ERROR, "cannot write the compiled library to " + path);
  return ffi::Module::LoadFromFile(path);
}

// Takes an idle VM of `exe` or makes one; gives it back when destroyed.
class VmLease {
 public:
  explicit VmLease(_odla_executable& exe) : exe_(exe) {
    {
      std::lock_guard<std::mutex> lock(exe.pool_mutex);
      if (!exe.idle.empty()) {
        vm_ = std::move(exe.idle.back());
        exe.idle.pop_back();
        return;
      }
    }
    vm_.module = (*exe.library)->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    // device type, id, allocator (2: pooled) for the device, then the same for the host
    (*vm_.module)->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, 2,
                                                         static_cast<int>(kDLCPU), 0, 2);
    vm_.main = (*vm_.module)->GetFunction("main").value();
    // main takes the arguments, then the variables and the weights: a manifest that declares
    // others would have main read what is not there
    int64_t arity = (*vm_.module)->GetFunction("get_function_arity").value()("main").cast<int64_t>();
    if (static_cast<size_t>(arity) != exe.args.size() + exe.extra.size())
      throw Error(ODLA_INVALID_PARAM, "its compiled main takes " + std::to_string(arity) +
                                          " tensors; its manifest declares " +
                                          std::to_string(exe.args.size() + exe.extra.size()));
  }
  ~VmLease() {
    std::lock_guard<std::mutex> lock(exe_.pool_mutex);
    exe_.idle.push_back(std::move(vm_));
  }
  const ffi::Function& main() const { return vm_.main; }

 private:
  _odla_executable& exe_;
  _odla_executable::Vm vm_;
};

// The shape argument `slot` runs with: its own, or the context's run-time shape where dynamic.
// The shape argument `slot` runs with: its own; where dynamic, the run-time shape the context
// gives it, or its own with the context's RUN_BATCH_SIZE where only its batch is dynamic.
odla_value_shape ArgumentShape(const _odla_value& slot, const _odla_context& ctx) {
  int dynamic = 0;
  for (int i = 0; i < slot.type.shape.size; ++i) dynamic += slot.type.shape.dims[i] < 0;
  if (dynamic == 0) return slot.type.shape;
  auto found = ctx.shapes.find(slot.id);
  if (found == ctx.shapes.end() && ctx.run_batch > 0 && dynamic == 1 &&
      slot.type.shape.dims[0] < 0) {
    odla_value_shape batch = slot.type.shape;
    batch.dims[0] = ctx.run_batch;
    return batch;
  }
  if (found == ctx.shapes.end())
    throw Error(ODLA_INVALID_PARAM, "argument " + slot.id + " has the dynamic shape " +
                                        ShapeText(slot.type.shape) +
                                        "; give its run-time shape with odla_SetRuntimeShape "
                                        "(or the batch with the context's RUN_BATCH_SIZE)");
  const odla_value_shape& shape = found->second;
  if (ctx.run_batch > 0 && slot.type.shape.dims[0] < 0 && shape.size > 0 &&
      shape.dims[0] != ctx.run_batch)
    throw Error(ODLA_INVALID_PARAM, "argument " + slot.id + " has batch " +
                                        std::to_string(shape.dims[0]) + "; the context's "
                                        "RUN_BATCH_SIZE is " + std::to_string(ctx.run_batch));
  bool fits = shape.size == slot.type.shape.size;
  for (int i = 0; fits && i < shape.size; ++i)
    fits = shape.dims[i] >= 0 &&
           (slot.type.shape.dims[i] < 0 || slot.type.shape.dims[i] == shape.dims[i]);
  if (!fits)
    throw Error(ODLA_INVALID_PARAM, "argument " + slot.id + " has the run-time shape " +
                                        ShapeText(shape) + "; its type allows " +
                                        ShapeText(slot.type.shape));
  return shape;
}

bool SameShape(const odla_value_shape& a, const odla_value_shape& b) {
  return a.size == b.size && std::equal(a.dims, a.dims + a.size, b.dims);
}

// The tensor argument `index` runs from: the caller's memory where aligned, else a copy.
const ffi::Tensor& InputTensor(const _odla_value& slot, size_t index, _odla_context& ctx) {
  auto bound = ctx.inputs.find(slot.id);
  if (bound == ctx.inputs.end() || bound->second == nullptr)
    throw Error(ODLA_INVALID_PARAM, "argument " + slot.id + " is not bound; bind it with "
                                    "odla_BindToArgument or odla_BindToArgumentById");
  const odla_value_shape shape = ArgumentShape(slot, ctx);
  _odla_context::Input& input = ctx.cached[index];
  const void* data = bound->second;
  if (input.tensor.defined() && input.data == data && SameShape(input.shape, shape)) {
    if (input.staged)
      std::memcpy(input.tensor.GetDLTensorPtr()->data, data,
                  ffi::GetDataSize(*input.tensor.GetDLTensorPtr()));
    return input.tensor;
  }
  DLDataType dtype = DataType(slot.type.element_type);
  input.staged = reinterpret_cast<uintptr_t>(data) % kAlignment != 0;
  input.tensor = input.staged
      ? ffi::Tensor::FromNDAlloc(AlignedAlloc(), Dims(shape), dtype, DLDevice{kDLCPU, 0})
      : ffi::Tensor::FromNDAlloc(Borrowed{const_cast<void*>(data), nullptr}, Dims(shape), dtype,
                                 DLDevice{kDLCPU, 0});
  if (input.staged)
    std::memcpy(input.tensor.GetDLTensorPtr()->data, data,
                ffi::GetDataSize(*input.tensor.GetDLTensorPtr()));
  input.data = data;
  input.shape = shape;
  return input.tensor;
}

// Refuses a result other than the output's declared type, before it is copied to a buffer
// the caller sized from that type.
void CheckResult(const _odla_value& slot, const DLTensor& result) {
  bool same = SameDL(result.dtype, DataType(slot.type.element_type)) &&
              result.ndim == slot.type.shape.size && result.device.device_type == kDLCPU;
  for (int i = 0; same && i < result.ndim; ++i)
    same = slot.type.shape.dims[i] < 0 ? result.shape[i] >= 0
                                       : result.shape[i] == slot.type.shape.dims[i];
  if (!same) {
    odla_value_shape shape{};
    shape.size = std::min<int>(result.ndim, ODLA_MAX_DIMENSION);
    std::copy(result.shape, result.shape + shape.size, shape.dims);
    const Dtype* given = DtypeOfDL(result.dtype);
    throw Error(ODLA_INVALID_PARAM, "the compiled library returned " +
                                        std::string(given ? given->odla : "another type") + " " +
                                        ShapeText(shape) + " for output " + slot.id +
                                        ", not the type its manifest declares: " +
                                        DtypeOfElement(slot.type.element_type)->odla + " " +
                                        ShapeText(slot.type.shape));
  }
}

// Writes an output where it is bound, else keeps it for odla_GetValueData.
void StoreOutput(const _odla_value& slot, const ffi::Tensor& tensor, _odla_context& ctx) {
  const DLTensor& result = *tensor.GetDLTensorPtr();
  CheckResult(slot, result);
  odla_value_shape shape{};
  shape.size = result.ndim;
  std::copy(result.shape, result.shape + result.ndim, shape.dims);
  ctx.shapes[slot.id] = shape;
  auto bound = ctx.outputs.find(slot.id);
  if (bound != ctx.outputs.end() && bound->second != nullptr)
    std::memcpy(bound->second, static_cast<const char*>(result.data) + result.byte_offset,
                ffi::GetDataSize(result));
  else
    ctx.results.insert_or_assign(slot.id, tensor);
}

// Refuses an id bound on the context that `exe` does not have (a misspelt id would leave
// an output unwritten, or an argument unused), as onnxruntime refuses an unknown name.
void CheckBoundIds(const _odla_executable& exe, const _odla_context& ctx) {
  auto check = [](const auto& bound, const std::vector<std::unique_ptr<_odla_value>>& slots,
                  const char* what) {
    for (const auto& [id, data] : bound) {
      bool known = std::any_of(slots.begin(), slots.end(),
                               [&id = id](const auto& slot) { return slot->id == id; });
      if (known) continue;
      std::string ids;
      for (const auto& slot : slots) ids += (ids.empty() ? "" : ", ") + slot->id;
      throw Error(ODLA_INVALID_PARAM, std::string(what) + " id " + id + " is bound on the "
                                      "context, but the executable has no such " + what +
                                      " (its " + what + "s: " + ids + ")");
    }
  };
  check(ctx.inputs, exe.args, "argument");
  check(ctx.outputs, exe.outputs, "output");
}

}  // namespace

void Launch(const std::shared_ptr<_odla_executable>& executable, _odla_context& ctx) {
  _odla_executable& exe = *executable;
  std::lock_guard<std::mutex> lock(ctx.run_mutex);
  if (ctx.inputs_of.owner_before(executable) || executable.owner_before(ctx.inputs_of)) {
    ctx.cached.assign(exe.args.size(), {});
    ctx.inputs_of = executable;
    ctx.ids_checked = false;
  }
  if (!ctx.ids_checked) {
    CheckBoundIds(exe, ctx);
    ctx.ids_checked = true;
  }
  std::vector<ffi::AnyView> packed;
  packed.reserve(exe.args.size() + exe.extra.size());
  for (size_t i = 0; i < exe.args.size(); ++i)
    packed.emplace_back(InputTensor(*exe.args[i], i, ctx));
  for (const ffi::Tensor& t : exe.extra) packed.emplace_back(t);
  ffi::Any result;
  try {
    VmLease vm(exe);
    if (Profiling()) {
      auto start = std::chrono::steady_clock::now();
      vm.main().CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
      RecordLaunch(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    } else {
      vm.main().CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
    }
  } catch (const ffi::Error& e) {  // a run-time check's refusal of the caller's data
    if (IsRefusedData(e)) throw Error(ODLA_INVALID_PARAM, e.message());
    throw;
  }
  if (auto single = result.try_cast<ffi::Tensor>()) {
    if (exe.outputs.size() != 1) throw Error(ODLA_INTERNAL_LOGIC_ERR,
                                             "the module returned one tensor");
    StoreOutput(*exe.outputs[0], *single, ctx);
    return;
  }
  auto results = result.cast<ffi::Array<ffi::Any>>();
  if (results.size() != exe.outputs.size())
    throw Error(ODLA_INTERNAL_LOGIC_ERR, "the module returned " + std::to_string(results.size()) +
                                             " tensors for " + std::to_string(exe.outputs.size()) +
                                             " outputs");
  for (size_t i = 0; i < exe.outputs.size(); ++i)
    StoreOutput(*exe.outputs[i], results[i].cast<ffi::Tensor>(), ctx);
}

namespace {

// Whether the user set TVM's pool spin before this library loaded (what it sets later is not
// the user's choice).
const bool user_chose_pool_spin = std::getenv("TVM_THREAD_POOL_SPIN_COUNT") != nullptr;

// Readies the process's thread pools for an executable as odla_tvm's Python path does
// (targets.runtime, targets.plugins.onednn), unless the user chose: TVM's pool polls 10000
// times for its next kernel, or not at all once oneDNN's regions run (its polling workers take
// the cores from the region after them); oneDNN's OpenMP threads spin 10000 of libgomp's
// spins. The pool reads its spin when it starts, libgomp its own when it loads (with the
// executable's library): both after this.
// Once for each kind, not on every load: setenv races any thread's getenv.
void ReadyThreadPools(bool vendor_regions) {
  static std::once_flag plain, vendor;
  std::call_once(vendor_regions ? vendor : plain, [vendor_regions] {
    if (!user_chose_pool_spin)
      setenv("TVM_THREAD_POOL_SPIN_COUNT", vendor_regions ? "0" : "10000", vendor_regions);
    if (vendor_regions && std::getenv("OMP_WAIT_POLICY") == nullptr)
      setenv("GOMP_SPINCOUNT", "10000", 0);
  });
}

std::shared_ptr<_odla_executable> Loaded(std::shared_ptr<_odla_executable> exe,
                                         const StoredExecutable& stored, const std::string& what) {
  for (const Slot& s : stored.args) exe->args.push_back(SlotValue(s));
  for (const Slot& s : stored.outputs) exe->outputs.push_back(SlotValue(s));
  for (const Array& a : stored.variable_data) exe->extra.push_back(ArrayTensor(a));
  for (const Array& a : stored.weights) exe->extra.push_back(ArrayTensor(a));
  ReadyThreadPools(stored.vendor_regions);
  RegisterChecks();
  try {
    exe->library = stored.library_path.empty() ? LoadLibrary(stored.library)
                                               : ffi::Module::LoadFromFile(stored.library_path);
    VmLease first(*exe);  // fails here, not at the first launch, if the library is foreign
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ODLA_INVALID_PARAM, what + ": its compiled library does not load: " + e.what());
  }
  return exe;
}

}  // namespace

std::shared_ptr<_odla_executable> LoadExecutableBytes(std::string blob, const std::string& what) {
  auto exe = std::make_shared<_odla_executable>();
  exe->blob = std::move(blob);
  return Loaded(exe, ParseStoredExecutable(exe->blob, what), what);
}

std::shared_ptr<_odla_executable> LoadBundle(const std::string& root, bool check_digests) {
  auto exe = Loaded(std::make_shared<_odla_executable>(), ParseBundle(root, check_digests), root);
  // An engine-cache entry (its files checked by the caller, not against digests) keeps its
  // vendor regions' packed weights (odla_tvm's targets.plugins.KEEP_PACKED_WEIGHTS_FUNCTION).
  if (!check_digests) {
    auto keep = (*exe->library)->GetFunction("odla_keep_packed_weights", true);
    if (keep.has_value()) (*keep)(ffi::String(root));
  }
  return exe;
}

bool ReadResult(_odla_context& ctx, const _odla_value& value, void* data) {
  std::lock_guard<std::mutex> lock(ctx.run_mutex);
  auto kept = ctx.results.find(value.id);
  if (kept != ctx.results.end()) {
    const DLTensor& t = *kept->second.GetDLTensorPtr();
    std::memcpy(data, static_cast<const char*>(t.data) + t.byte_offset, ffi::GetDataSize(t));
    return true;
  }
  auto bound = ctx.outputs.find(value.id);
  auto shape = ctx.shapes.find(value.id);
  if (bound == ctx.outputs.end() || shape == ctx.shapes.end() || bound->second == nullptr)
    return false;
  std::memcpy(data, bound->second,
              ElementCount(shape->second) * ElementSize(value.type.element_type));
  return true;
}

void SetContextItem(_odla_context& ctx, int type, odla_item_value value) {
  switch (type) {
    case ODLA_ASYNC_CALLBACK_FUNC:
      ctx.callback = reinterpret_cast<int (*)(void*, odla_status)>(value);
      return;
    case ODLA_ASYNC_CALLBACK_ARG:
      ctx.callback_arg = reinterpret_cast<void*>(value);
      return;
    case ODLA_RUN_BATCH_SIZE: {
      odla_int32 batch = *reinterpret_cast<const odla_int32*>(Require(value, "value"));
      if (batch < 1) throw Error(ODLA_INVALID_PARAM, "RUN_BATCH_SIZE is " + std::to_string(batch) +
                                                         "; expected >= 1");
      ctx.run_batch = batch;
      return;
    }
    default:
      throw Error(ODLA_UNSUPPORTED_DATATYPE, "context item " + std::to_string(type) +
                                                 " has no meaning here; the context takes "
                                                 "RUN_BATCH_SIZE, ASYNC_CALLBACK_FUNC and "
                                                 "ASYNC_CALLBACK_ARG");
  }
}

}  // namespace odla_tvm

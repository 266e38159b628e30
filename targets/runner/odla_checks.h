// The run-time checks odla-tvm's compiled modules call on the host between kernels (Python
// registers them as "odla_tvm.check_*" in relay_bridge/kernels.py), for odla_runner, which
// has no Python: each reads what a counting kernel found, fails the run naming the first bad
// value, else returns the fresh zero the kernels after it take. Also the device copies the
// checks and the runner share.
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace odla_checks {

namespace ffi = tvm::ffi;

inline bool SameDevice(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

// A copy of ``t`` on ``device`` (``t`` itself where it is there already).
inline ffi::Tensor OnDevice(const ffi::Tensor& t, DLDevice device) {
  const DLTensor* dl = t.GetDLTensorPtr();
  if (SameDevice(dl->device, device)) return t;
  static auto alloc = ffi::Function::GetGlobal("runtime.TVMTensorAllocWithScope").value();
  static auto copy = ffi::Function::GetGlobal("runtime.TVMTensorCopyFromTo").value();
  ffi::Tensor out = alloc(ffi::Shape(std::vector<int64_t>(dl->shape, dl->shape + dl->ndim)),
                          dl->dtype, device, "global").cast<ffi::Tensor>();
  copy(t, out);
  return out;
}

inline ffi::Tensor OnHost(const ffi::Tensor& t) { return OnDevice(t, DLDevice{kDLCPU, 0}); }

// A tensor of zeros of ``dims`` and ``dtype`` on ``device``.
inline ffi::Tensor Zeros(DLDevice device, std::vector<int64_t> dims, DLDataType dtype) {
  static auto alloc = ffi::Function::GetGlobal("runtime.TVMTensorAllocWithScope").value();
  ffi::Tensor host = alloc(ffi::Shape(dims), dtype, DLDevice{kDLCPU, 0}, "global")
                         .cast<ffi::Tensor>();
  std::memset(host.GetDLTensorPtr()->data, 0, ffi::GetDataSize(*host.GetDLTensorPtr()));
  return OnDevice(host, device);
}

inline int64_t Count(const ffi::Tensor& t) { return t.numel(); }

// Element ``i`` of a host tensor of numbers, as a double.
inline double At(const ffi::Tensor& t, int64_t i) {
  const DLTensor* dl = t.GetDLTensorPtr();
  const char* base = static_cast<const char*>(dl->data) + dl->byte_offset;
  switch (dl->dtype.code * 100 + dl->dtype.bits) {
    case kDLInt * 100 + 8: return reinterpret_cast<const int8_t*>(base)[i];
    case kDLInt * 100 + 16: return reinterpret_cast<const int16_t*>(base)[i];
    case kDLInt * 100 + 32: return reinterpret_cast<const int32_t*>(base)[i];
    case kDLInt * 100 + 64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    case kDLUInt * 100 + 8: case kDLBool * 100 + 8: return reinterpret_cast<const uint8_t*>(base)[i];
    case kDLUInt * 100 + 16: return reinterpret_cast<const uint16_t*>(base)[i];
    case kDLUInt * 100 + 32: return reinterpret_cast<const uint32_t*>(base)[i];
    case kDLUInt * 100 + 64: return static_cast<double>(reinterpret_cast<const uint64_t*>(base)[i]);
    case kDLFloat * 100 + 32: return reinterpret_cast<const float*>(base)[i];
    case kDLFloat * 100 + 64: return reinterpret_cast<const double*>(base)[i];
  }
  TVM_FFI_THROW(TypeError) << "a run-time check read a tensor of an unsupported dtype";
  TVM_FFI_UNREACHABLE();
}

// What a counting kernel found: how many bad elements (its one int64).
inline bool AnyBad(const ffi::Tensor& count) { return At(OnHost(count), 0) != 0; }

inline std::string Text(double v) {
  return v == static_cast<int64_t>(v) ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
}

inline std::vector<int64_t> Ints(const ffi::PackedArgs& args, int from) {
  std::vector<int64_t> values;
  for (int i = from; i < args.size(); ++i) values.push_back(args[i].cast<int64_t>());
  return values;
}

// check_indices(count, indices, what, negative, *sizes)
inline void CheckIndices(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  auto what = std::string(args[2].cast<ffi::String>());
  bool negative = args[3].cast<bool>();
  std::vector<int64_t> sizes = Ints(args, 4);
  if (AnyBad(count)) {
    ffi::Tensor indices = OnHost(args[1].cast<ffi::Tensor>());
    for (int64_t p = 0; p < Count(indices); ++p) {
      double index = At(indices, p);
      double size = static_cast<double>(sizes.size() > 1 ? sizes[p % sizes.size()] : sizes[0]);
      if (index < (negative ? -size : 0) || index >= size)
        TVM_FFI_THROW(IndexError) << what << ": index " << Text(index) << " (element " << p
                                  << ") lies outside [" << (negative ? "-" + Text(size) : "0")
                                  << ", " << Text(size - 1) << "]";
    }
  }
  *rv = Zeros(count.GetDLTensorPtr()->device, {1}, DLDataType{kDLInt, 64, 1});
}

// check_values(count, values, what, name, allowed, lowest, highest, nonzero, first)
inline void CheckValues(ffi::PackedArgs args, ffi::Any* rv) {
  auto values = args[1].cast<ffi::Tensor>();
  if (AnyBad(args[0].cast<ffi::Tensor>())) {
    ffi::Tensor host = OnHost(values);
    double lowest = args[5].cast<double>(), highest = args[6].cast<double>();
    bool nonzero = args[7].cast<bool>();
    for (int64_t p = 0; p < Count(host); ++p) {
      double v = At(host, p);
      if (!(v >= lowest && v <= highest) || (nonzero && v == 0))
        TVM_FFI_THROW(ValueError) << std::string(args[2].cast<ffi::String>()) << ": "
                                  << std::string(args[3].cast<ffi::String>()) << " "
                                  << Text(v) << " (element " << args[8].cast<int64_t>() + p
                                  << ") is not " << std::string(args[4].cast<ffi::String>());
    }
  }
  *rv = Zeros(values.GetDLTensorPtr()->device, {}, values.GetDLTensorPtr()->dtype);
}

// check_dim(x, axis, least, most, message)
inline void CheckDim(ffi::PackedArgs args, ffi::Any* rv) {
  auto x = args[0].cast<ffi::Tensor>();
  int64_t dim = x.GetDLTensorPtr()->shape[args[1].cast<int64_t>()];
  int64_t least = args[2].cast<int64_t>(), most = args[3].cast<int64_t>();
  if (dim < least || dim > most) {
    std::string message(args[4].cast<ffi::String>());
    for (auto [key, value] : {std::pair<std::string, int64_t>{"{dim}", dim}, {"{least}", least},
                              {"{most}", most}})
      for (size_t at; (at = message.find(key)) != std::string::npos;)
        message.replace(at, key.size(), std::to_string(value));
    TVM_FFI_THROW(ValueError) << message;
  }
  *rv = Zeros(x.GetDLTensorPtr()->device, {1}, DLDataType{kDLInt, 64, 1});
}

// check_divisor(count, divisor, what)
inline void CheckDivisor(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  auto divisor = args[1].cast<ffi::Tensor>();
  if (AnyBad(count)) {
    ffi::Tensor host = OnHost(divisor);
    int64_t p = 0;
    while (p + 1 < Count(host) && At(host, p) != 0) ++p;
    TVM_FFI_THROW(ZeroDivisionError) << std::string(args[2].cast<ffi::String>())
                                     << ": division by zero (divisor element " << p << ")";
  }
  *rv = Zeros(count.GetDLTensorPtr()->device, {}, divisor.GetDLTensorPtr()->dtype);
}

// check_quotient(count, dividend, divisor, what)
inline void CheckQuotient(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  if (AnyBad(count))
    TVM_FFI_THROW(OverflowError) << std::string(args[3].cast<ffi::String>())
                                 << ": integer division overflows (the least value by -1)";
  *rv = Zeros(count.GetDLTensorPtr()->device, {}, args[2].cast<ffi::Tensor>().GetDLTensorPtr()->dtype);
}

// check_reshape(shape, what, allow_zero, *dims): ONNX's rules (0 keeps the input's dim
// unless allow_zero, one -1 takes what is left) must give exactly the input's elements.
inline void CheckReshape(ffi::PackedArgs args, ffi::Any* rv) {
  auto shape = args[0].cast<ffi::Tensor>();
  bool allow_zero = args[2].cast<bool>();
  std::vector<int64_t> dims = Ints(args, 3);
  ffi::Tensor host = OnHost(shape);
  int64_t count = 1, known = 1, inferred = 0;
  bool fits = true;
  for (int64_t d : dims) count *= d;
  std::string requested;
  for (int64_t i = 0; i < Count(host); ++i) {
    auto d = static_cast<int64_t>(At(host, i));
    requested += (i ? ", " : "") + std::to_string(d);
    if (d == 0 && !allow_zero && i < static_cast<int64_t>(dims.size())) d = dims[i];
    fits = fits && d >= -1;
    if (d == -1) ++inferred;
    else known *= d;
  }
  fits = fits && inferred <= 1 &&
         (inferred ? known > 0 && count % known == 0 : count == known);
  if (!fits)
    TVM_FFI_THROW(ValueError) << std::string(args[1].cast<ffi::String>()) << ": cannot reshape "
                              << count << " elements to (" << requested << ")";
  *rv = Zeros(shape.GetDLTensorPtr()->device, {}, shape.GetDLTensorPtr()->dtype);
}

// Registers the checks under the names odla-tvm's modules call.
inline void RegisterChecks() {
  const std::pair<const char*, void (*)(ffi::PackedArgs, ffi::Any*)> checks[] = {
      {"odla_tvm.check_indices", CheckIndices}, {"odla_tvm.check_values", CheckValues},
      {"odla_tvm.check_dim", CheckDim},         {"odla_tvm.check_divisor", CheckDivisor},
      {"odla_tvm.check_quotient", CheckQuotient}, {"odla_tvm.check_reshape", CheckReshape}};
  for (const auto& [name, check] : checks)
    ffi::Function::SetGlobal(name, ffi::Function::FromPacked(check), true);
}

}  // namespace odla_checks

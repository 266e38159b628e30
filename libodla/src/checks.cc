// The run-time checks in C++ (see checks.h); each message is the one relay_bridge/errors.py
// writes for the same refusal.
#include "checks.h"

#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

namespace odla_tvm {

namespace {

// The kinds Python registers for its refusals (relay_bridge.errors.REFUSED_DATA).
const char* const kRefusedKinds[] = {"IndexOutOfRange", "DivisionByZero", "DivisionOverflow",
                                     "ShapeMismatch", "ValueOutOfRange"};

bool SameDevice(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

// A tensor of zeros of `dims` and `dtype` on `device`.
ffi::Tensor Zeros(DLDevice device, std::vector<int64_t> dims, DLDataType dtype) {
  static auto alloc = ffi::Function::GetGlobal("runtime.TVMTensorAllocWithScope").value();
  ffi::Tensor host =
      alloc(ffi::Shape(dims), dtype, DLDevice{kDLCPU, 0}, "global").cast<ffi::Tensor>();
  std::memset(host.GetDLTensorPtr()->data, 0, ffi::GetDataSize(*host.GetDLTensorPtr()));
  return OnDevice(host, device);
}

bool IsFloat(const ffi::Tensor& t) {
  return t.GetDLTensorPtr()->dtype.code == kDLFloat;
}

// Element `i` of a host tensor of numbers, as a double (int64 as such where it must be exact).
double At(const ffi::Tensor& t, int64_t i) {
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

// Element `i` of an integer host tensor, exactly.
int64_t IntAt(const ffi::Tensor& t, int64_t i) {
  const DLTensor* dl = t.GetDLTensorPtr();
  if (dl->dtype.code == kDLInt && dl->dtype.bits == 64)
    return reinterpret_cast<const int64_t*>(static_cast<const char*>(dl->data) +
                                            dl->byte_offset)[i];
  return static_cast<int64_t>(At(t, i));
}

// What a counting kernel found: how many bad elements (its one int64).
bool AnyBad(const ffi::Tensor& count) { return At(OnHost(count), 0) != 0; }

// A value as Python prints the element `.item()` gives: an int, or a float's repr.
std::string PythonText(double v, bool is_float) {
  if (!is_float) return std::to_string(static_cast<int64_t>(v));
  if (v != v) return "nan";
  if (v == std::numeric_limits<double>::infinity()) return "inf";
  if (v == -std::numeric_limits<double>::infinity()) return "-inf";
  char text[64];
  auto end = std::to_chars(text, text + sizeof text, v).ptr;
  std::string s(text, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::vector<int64_t> Ints(const ffi::PackedArgs& args, int from) {
  std::vector<int64_t> values;
  for (int i = from; i < args.size(); ++i) values.push_back(args[i].cast<int64_t>());
  return values;
}

std::string Str(const ffi::PackedArgs& args, int i) {
  return std::string(args[i].cast<ffi::String>());
}

// check_indices(count, indices, what, negative, *sizes)
void CheckIndices(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  bool negative = args[3].cast<bool>();
  std::vector<int64_t> sizes = Ints(args, 4);
  if (AnyBad(count) && !sizes.empty()) {
    ffi::Tensor indices = OnHost(args[1].cast<ffi::Tensor>());
    for (int64_t p = 0; p < indices.numel(); ++p) {
      int64_t index = IntAt(indices, p);
      int64_t size = sizes.size() > 1 ? sizes[p % sizes.size()] : sizes[0];
      if (index < (negative ? -size : 0) || index >= size)
        TVM_FFI_THROW(IndexOutOfRange)
            << Str(args, 2) << ": index " << index << " (element " << p
            << " of the indices) is out of range; expected " << (negative ? -size : 0) << " to "
            << size - 1;
    }
  }
  *rv = Zeros(count.GetDLTensorPtr()->device, {1}, DLDataType{kDLInt, 64, 1});
}

// check_values(count, values, what, name, allowed, lowest, highest, nonzero, first)
void CheckValues(ffi::PackedArgs args, ffi::Any* rv) {
  auto values = args[1].cast<ffi::Tensor>();
  if (AnyBad(args[0].cast<ffi::Tensor>())) {
    ffi::Tensor host = OnHost(values);
    double lowest = args[5].cast<double>(), highest = args[6].cast<double>();
    bool nonzero = args[7].cast<bool>();
    for (int64_t p = 0; p < host.numel(); ++p) {
      double v = At(host, p);
      if (!(v >= lowest && v <= highest) || (nonzero && v == 0))
        TVM_FFI_THROW(ValueOutOfRange)
            << Str(args, 2) << ": " << Str(args, 3) << " " << PythonText(v, IsFloat(host))
            << " (element " << args[8].cast<int64_t>() + p << ") is out of range; expected "
            << Str(args, 4);
    }
  }
  *rv = Zeros(values.GetDLTensorPtr()->device, {}, values.GetDLTensorPtr()->dtype);
}

// Python's str.format of `message` with the fields dim, least and most.
std::string FormatDim(const std::string& message, int64_t dim, int64_t least, int64_t most) {
  std::string out;
  for (size_t at = 0; at < message.size(); ++at) {
    if ((message[at] == '{' || message[at] == '}') && at + 1 < message.size() &&
        message[at + 1] == message[at]) {
      out += message[at++];
      continue;
    }
    bool replaced = false;
    for (auto [key, value] : {std::pair<const char*, int64_t>{"{dim}", dim}, {"{least}", least},
                              {"{most}", most}}) {
      if (message.compare(at, std::strlen(key), key) == 0) {
        out += std::to_string(value);
        at += std::strlen(key) - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += message[at];
  }
  return out;
}

// check_dim(x, axis, least, most, message)
void CheckDim(ffi::PackedArgs args, ffi::Any* rv) {
  auto x = args[0].cast<ffi::Tensor>();
  int64_t axis = args[1].cast<int64_t>();
  const DLTensor* dl = x.GetDLTensorPtr();
  if (axis < 0 || axis >= dl->ndim)
    TVM_FFI_THROW(ValueError) << "check_dim: axis " << axis << " of a tensor of rank " << dl->ndim;
  int64_t dim = dl->shape[axis];
  int64_t least = args[2].cast<int64_t>(), most = args[3].cast<int64_t>();
  if (dim < least || dim > most)
    TVM_FFI_THROW(ValueOutOfRange) << FormatDim(Str(args, 4), dim, least, most);
  *rv = Zeros(dl->device, {1}, DLDataType{kDLInt, 64, 1});
}

// check_divisor(count, divisor, what)
void CheckDivisor(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  auto divisor = args[1].cast<ffi::Tensor>();
  if (AnyBad(count)) {
    ffi::Tensor host = OnHost(divisor);
    for (int64_t p = 0; p < host.numel(); ++p)
      if (At(host, p) == 0)
        TVM_FFI_THROW(DivisionByZero) << Str(args, 2) << " divides by zero (element " << p
                                      << " of the divisor)";
  }
  *rv = Zeros(count.GetDLTensorPtr()->device, {}, divisor.GetDLTensorPtr()->dtype);
}

// The flat index into a tensor of `dims` of the element at flat `p` of their broadcast `out`.
int64_t BroadcastIndex(int64_t p, const std::vector<int64_t>& out, const DLTensor& t) {
  int64_t index = 0, stride = 1;
  for (int i = static_cast<int>(out.size()) - 1, j = t.ndim - 1; i >= 0; --i, --j) {
    int64_t coordinate = p % out[i];
    p /= out[i];
    if (j >= 0) {
      if (t.shape[j] != 1) index += coordinate * stride;
      stride *= t.shape[j];
    }
  }
  return index;
}

// check_quotient(count, dividend, divisor, what)
void CheckQuotient(ffi::PackedArgs args, ffi::Any* rv) {
  auto count = args[0].cast<ffi::Tensor>();
  auto divisor = args[2].cast<ffi::Tensor>();
  if (AnyBad(count)) {
    ffi::Tensor a = OnHost(args[1].cast<ffi::Tensor>()), b = OnHost(divisor);
    const DLTensor &da = *a.GetDLTensorPtr(), &db = *b.GetDLTensorPtr();
    int rank = std::max(da.ndim, db.ndim);
    std::vector<int64_t> out(rank, 1);
    for (int i = 0; i < rank; ++i) {
      int ia = da.ndim - rank + i, ib = db.ndim - rank + i;
      out[i] = std::max(ia >= 0 ? da.shape[ia] : 1, ib >= 0 ? db.shape[ib] : 1);
    }
    int bits = da.dtype.bits;
    int64_t least = bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
    int64_t total = 1;
    for (int64_t d : out) total *= d;
    for (int64_t p = 0; p < total; ++p)
      if (IntAt(a, BroadcastIndex(p, out, da)) == least && IntAt(b, BroadcastIndex(p, out, db)) == -1)
        TVM_FFI_THROW(DivisionOverflow) << Str(args, 3) << " overflows int" << bits << ": " << least
                                        << " / -1 (element " << p << " of the result)";
  }
  *rv = Zeros(count.GetDLTensorPtr()->device, {}, divisor.GetDLTensorPtr()->dtype);
}

// check_reshape(shape, what, allow_zero, *dims): ONNX's rules (0 keeps the input's dim
// unless allow_zero, one -1 takes what is left) must give exactly the input's elements.
void CheckReshape(ffi::PackedArgs args, ffi::Any* rv) {
  auto shape = args[0].cast<ffi::Tensor>();
  bool allow_zero = args[2].cast<bool>();
  std::vector<int64_t> dims = Ints(args, 3);
  ffi::Tensor host = OnHost(shape);
  int64_t count = 1, known = 1, inferred = 0;
  bool fits = true;
  for (int64_t d : dims) count *= d;
  std::string requested;
  for (int64_t i = 0; i < host.numel(); ++i) {
    int64_t d = IntAt(host, i);
    requested += (i ? ", " : "") + std::to_string(d);
    if (d == 0 && !allow_zero && i < static_cast<int64_t>(dims.size())) d = dims[i];
    fits = fits && d >= -1;
    if (d == -1) ++inferred;
    else if (__builtin_mul_overflow(known, d, &known)) fits = false;
  }
  fits = fits && inferred <= 1 && (inferred ? known > 0 && count % known == 0 : count == known);
  if (!fits) {
    std::string of;
    for (int64_t d : dims) of += (of.empty() ? "" : "x") + std::to_string(d);
    TVM_FFI_THROW(ShapeMismatch) << Str(args, 1) << ": shape [" << requested
                                 << "] does not fit the " << count << " elements of "
                                 << (of.empty() ? "a scalar" : of);
  }
  *rv = Zeros(shape.GetDLTensorPtr()->device, {}, shape.GetDLTensorPtr()->dtype);
}

}  // namespace

ffi::Tensor OnDevice(const ffi::Tensor& t, DLDevice device) {
  const DLTensor* dl = t.GetDLTensorPtr();
  if (SameDevice(dl->device, device)) return t;
  static auto alloc = ffi::Function::GetGlobal("runtime.TVMTensorAllocWithScope").value();
  static auto copy = ffi::Function::GetGlobal("runtime.TVMTensorCopyFromTo").value();
  ffi::Tensor out = alloc(ffi::Shape(std::vector<int64_t>(dl->shape, dl->shape + dl->ndim)),
                          dl->dtype, device, "global").cast<ffi::Tensor>();
  copy(t, out);
  return out;
}

ffi::Tensor OnHost(const ffi::Tensor& t) { return OnDevice(t, DLDevice{kDLCPU, 0}); }

void RegisterChecks() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    const std::pair<const char*, void (*)(ffi::PackedArgs, ffi::Any*)> checks[] = {
        {"odla_tvm.check_indices", CheckIndices}, {"odla_tvm.check_values", CheckValues},
        {"odla_tvm.check_dim", CheckDim},         {"odla_tvm.check_divisor", CheckDivisor},
        {"odla_tvm.check_quotient", CheckQuotient}, {"odla_tvm.check_reshape", CheckReshape}};
    for (const auto& [name, check] : checks)
      if (!ffi::Function::GetGlobal(name).has_value())
        ffi::Function::SetGlobal(name, ffi::Function::FromPacked(check), false);
  });
}

bool IsRefusedData(const ffi::Error& error) {
  std::string kind(error.kind());
  for (const char* refused : kRefusedKinds)
    if (kind == refused) return true;
  return false;
}

}  // namespace odla_tvm

// What HALO's own ODLA op tests (its PopART backend's doctest programs) do that generated code
// does not: an ArgMin whose output type is left uninitialized, Conv and DeConv kernels given the
// input's layout (CHANNELS_FIRST), DeConv's layouts and output_dims left uninitialized,
// odla_Gemm on stacks of matrices (HALO also emits its batched MatMul as odla_Gemm), constants
// built from a vector that is gone before the run, and every device info item a CPU has; and
// what HALO's generated yolov3 passes: odla_Resize's axes_mask -1 ("every axis"). Each
// computation is built, run once by ids and printed as "<id> values..." for
// tests/test_c_api_halo.py.
#include <ODLA/odla.h>

#include "odla_test_types.h"

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace {

// Stands for a caller's uninitialized struct, deterministically.
template <typename T>
T Garbage() {
  T value;
  std::memset(&value, 0xA5, sizeof value);
  return value;
}

template <typename T>
void Print(const char* name, const std::vector<T>& data) {
  std::printf("%s", name);
  for (const T& v : data) std::printf(" %.9g", static_cast<double>(v));
  std::printf("\n");
}

// A layout left uninitialized, outside odla_memory_layout's 0..5 yet one a C++ enum of it may
// hold (0..7); C callers may pass any int.
const odla_memory_layout kStrayLayout = static_cast<odla_memory_layout>(7);

std::vector<float> Iota(size_t count, float step) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = step * static_cast<float>(i) - 1.0f;
  return values;
}

// Runs the thread's current computation once with the (id, data) inputs, the output `out`
// into `result`, and prints it.
template <typename T>
void RunAndPrint(odla_computation comp, const char* out, std::vector<T> result,
                 std::initializer_list<std::pair<const char*, const void*>> inputs) {
  odla_context ctx;
  odla_CreateContext(&ctx);
  for (const auto& input : inputs) odla_BindToArgumentById(ID(input.first), input.second, ctx);
  odla_BindToOutputById(ID(out), result.data(), ctx);
  odla_status status = odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_INFERENCE, nullptr);
  if (status != ODLA_SUCCESS) std::printf("%s_status %d\n", out, status);
  Print(out, result);
  odla_DestroyContext(ctx);
  odla_DestroyComputation(comp);
}

odla_computation NewComputation() {
  odla_computation comp;
  odla_CreateComputation(&comp);
  return comp;
}

void ArgMinWithUninitializedType() {
  odla_computation comp = NewComputation();
  odla_value x = odla_CreateArgument(Type(ODLA_FLOAT32, {2, 2}), ID("x"));
  odla_SetValueAsOutput(odla_ArgMin(x, 0, 1, 0, Garbage<odla_value_type>(), ID("argmin")));
  const float data[4] = {2, 1, -3, -10};
  RunAndPrint(comp, "argmin", std::vector<odla_int32>(2), {{"x", data}});
}

void ConvWithInputLayouts() {
  const odla_uint32 one[2] = {1, 1}, zero[2] = {0, 0};
  std::vector<float> image = Iota(25, 0.25f), kernel = Iota(18, 0.125f);
  odla_computation comp = NewComputation();
  odla_value x = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 1, 5, 5}), ID("x"));
  odla_value w = odla_CreateArgument(Type(ODLA_FLOAT32, {2, 1, 3, 3}), ID("w"));
  odla_SetValueAsOutput(odla_Conv(x, ODLA_CHANNELS_FIRST, 1, w, ODLA_CHANNELS_FIRST, one, one,
                                  one, one, nullptr, Garbage<odla_value_shape>(), ID("conv")));
  RunAndPrint(comp, "conv", std::vector<float>(2 * 25),
              {{"x", image.data()}, {"w", kernel.data()}});

  comp = NewComputation();
  x = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 1, 3, 3}), ID("x"));
  w = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 2, 3, 3}), ID("w"));
  odla_SetValueAsOutput(odla_DeConv(x, ODLA_CHANNELS_FIRST, 1, w, ODLA_CHANNELS_FIRST, one, one,
                                    zero, zero, nullptr, Garbage<odla_value_shape>(),
                                    ID("deconv")));
  RunAndPrint(comp, "deconv", std::vector<float>(2 * 25),
              {{"x", image.data()}, {"w", kernel.data()}});

  // HALO's Graphcore DeConv test leaves its layouts uninitialized: the op's defaults
  comp = NewComputation();
  x = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 1, 3, 3}), ID("x"));
  w = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 2, 3, 3}), ID("w"));
  odla_SetValueAsOutput(odla_DeConv(x, kStrayLayout, 1, w, kStrayLayout, one, one, zero, zero,
                                    nullptr, Garbage<odla_value_shape>(),
                                    ID("deconv_garbage_layouts")));
  RunAndPrint(comp, "deconv_garbage_layouts", std::vector<float>(2 * 25),
              {{"x", image.data()}, {"w", kernel.data()}});
}

void GemmOnStacks() {
  std::vector<float> a = Iota(2 * 3 * 4, 0.1f), b = Iota(2 * 5 * 4, 0.05f);
  odla_computation comp = NewComputation();
  odla_value va = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 2, 3, 4}), ID("a"));
  odla_value vb = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 2, 5, 4}), ID("b"));
  odla_value_shape none{};
  odla_SetValueAsOutput(odla_Gemm(va, 0, vb, 1, 1, 0, nullptr, none, ID("gemm")));
  RunAndPrint(comp, "gemm", std::vector<float>(2 * 3 * 5), {{"a", a.data()}, {"b", b.data()}});
}

void ResizeWithEveryAxisMask() {
  std::vector<float> x = Iota(12, 0.5f);
  odla_computation comp = NewComputation();
  odla_value in = odla_CreateArgument(Type(ODLA_FLOAT32, {1, 2, 2, 3}), ID("x"));
  odla_SetValueAsOutput(odla_Resize(in, ODLA_NEAREST, ODLA_HALF_PIXEL, -1,
                                    Type(ODLA_FLOAT32, {1, 2, 4, 6}).shape, ID("resize")));
  RunAndPrint(comp, "resize", std::vector<float>(48), {{"x", x.data()}});
}

// As HALO's test utilities build their default model: the constants' data is a local vector.
void BuildFromTemporaries() {
  std::vector<float> two = {2}, six = {6};
  odla_value x = odla_CreateArgument(Type(ODLA_FLOAT32, {1}), ID("x"));
  odla_value c2 = odla_CreateConstant(Type(ODLA_FLOAT32, {1}), two.data(), ID("two"));
  odla_value c6 = odla_CreateConstant(Type(ODLA_FLOAT32, {1}), six.data(), ID("six"));
  odla_SetValueAsOutput(odla_Add(c6, odla_Mul(c2, x, ID("mul")), ID("affine")));
}

void ConstantsOutliveTheirData() {
  odla_computation comp = NewComputation();
  BuildFromTemporaries();
  // allocations of the freed vectors' size, likely in their place
  std::vector<std::vector<float>> scribbles(8, std::vector<float>(1, -100.0f));
  const float x = 5;
  RunAndPrint(comp, "affine", std::vector<float>(1), {{"x", &x}});
  Print("scribbles", std::vector<float>(1, static_cast<float>(scribbles.size())));
}

void DeviceInfo() {
  odla_device device = nullptr;
  odla_AllocateDevice(nullptr, ODLA_DEVICE_DEFAULT, 0, &device);
  int known = 0;
  for (odla_device_info item : {ODLA_DEVICE_INFO_DEV_UUID, ODLA_DEVICE_INFO_PROCESSOR_UTIL,
                                ODLA_DEVICE_INFO_DRIVER_VERSION, ODLA_DEVICE_INFO_SDK_VERSION}) {
    odla_scalar_value value{};
    known += odla_GetDeviceInfo(device, item, &value) == ODLA_SUCCESS;
  }
  odla_scalar_value power{};
  std::printf("device_info %d %d\n", known,
              odla_GetDeviceInfo(device, ODLA_DEVICE_INFO_POWER_USAGE, &power));
  odla_DestroyDevice(device);
}

}  // namespace

int main() {
  ArgMinWithUninitializedType();
  ConvWithInputLayouts();
  GemmOnStacks();
  ResizeWithEveryAxisMask();
  ConstantsOutliveTheirData();
  DeviceInfo();
  return 0;
}

// Ops of every header group but custom (basic, math, nn, process, quantization, control flow)
// in one computation, compiled with odla_CompileComputation on a device from
// odla_AllocateDevice, launched once synchronously and once asynchronously (ODLA's callback
// items), profiled, with the GetNumOf*/Get*ByIdx queries, run-time shapes of a dynamic
// argument, the interpreter (odla_CreateValue, odla_GetValueData) and device info. Prints
// "<id> values..." lines that tests/test_c_api_ops.py checks against NumPy.
#include <ODLA/odla.h>

#include "odla_test_types.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <thread>

namespace {

template <typename T>
void Print(const char* name, const T* data, int count) {
  std::printf("%s", name);
  for (int i = 0; i < count; ++i) std::printf(" %.9g", static_cast<double>(data[i]));
  std::printf("\n");
}

odla_value_shape Hint() {
  odla_value_shape any{};
  any.size = -1;
  return any;
}

std::atomic<int> callback_status{-1};

int Done(void* arg, odla_status status) {
  *static_cast<int*>(arg) += 1;
  callback_status = status;
  return 0;
}

const float kX[6] = {-1.5f, -0.5f, 0.25f, 0.75f, 1.5f, 2.0f};
const float kC[6] = {0.5f, 1.0f, -1.0f, 2.0f, -2.0f, 0.1f};
const float kOne = 1.0f, kScale = 0.05f;
const signed char kZero = 0;

odla_computation Build(odla_value* flag_out) {
  odla_computation comp;
  if (odla_CreateComputation(&comp) != ODLA_SUCCESS) return nullptr;
  odla_value x = odla_CreateArgument(Type(ODLA_FLOAT32, {2, 3}), ID("x"));
  odla_value flag = odla_CreateArgument(Type(ODLA_BOOL, {1}), ID("flag"));
  *flag_out = flag;
  odla_value c = odla_CreateConstant(Type(ODLA_FLOAT32, {2, 3}), kC, ID("c"));
  odla_value one = odla_CreateConstant(Type(ODLA_FLOAT32, {}), &kOne, ID("one"));  // a scalar
  // basic and math
  odla_SetValueAsOutput(odla_CloneValue(x, ID("clone")));
  odla_value add = odla_Add(x, c, ID("add"));
  const odla_uint32 axis1[] = {1};
  odla_SetValueAsOutput(odla_ReduceSum(odla_Exp(add, ID("exp")), 1, axis1, 0, Hint(), ID("rsum")));
  // nn
  odla_SetValueAsOutput(odla_LeakyRelu(x, 0.1f, ID("lrelu")));
  odla_SetValueAsOutput(odla_Softmax(x, 1, ID("softmax")));
  // process
  odla_value_shape perm{};
  perm.size = 2, perm.dims[0] = 1, perm.dims[1] = 0;
  odla_SetValueAsOutput(odla_Transpose(x, perm, Hint(), ID("transpose")));
  odla_values both{};
  both.size = 2, both.values[0] = x, both.values[1] = c;
  odla_SetValueAsOutput(odla_Concat(both, 0, Hint(), ID("concat")));
  const odla_int32 start[] = {0, 1}, end[] = {2, 3}, stride[] = {1, 1};
  odla_SetValueAsOutput(odla_Slice(x, start, end, stride, Hint(), ID("slice")));
  odla_SetValueAsOutput(odla_Cast(x, ODLA_INT32, ID("cast")));
  // quantization
  odla_value scale = odla_CreateConstant(Type(ODLA_FLOAT32, {}), &kScale, ID("scale"));
  odla_value zero = odla_CreateConstant(Type(ODLA_INT8, {}), &kZero, ID("zero"));
  odla_value q = odla_Quantize(x, scale, zero, 0, ODLA_INT8, ID("q"));
  odla_SetValueAsOutput(q);
  odla_SetValueAsOutput(odla_Dequantize(q, scale, zero, 0, ODLA_FLOAT32, ID("dq")));
  // control flow
  odla_BeginIf(flag, ID("if"));
  odla_EnterBranchBody(1);
  odla_SetValueAsOutput(odla_Add(x, one, ID("plus")));
  odla_EnterBranchBody(0);
  odla_SetValueAsOutput(odla_Sub(x, one, ID("minus")));
  odla_value_ids branch_ids{};
  branch_ids.size = 1, branch_ids.value_ids[0] = ID("branch");
  odla_values branch = odla_EndIf(branch_ids);
  if (branch.size != 1) return nullptr;
  odla_SetValueAsOutput(branch.values[0]);
  return comp;
}

// A dynamic argument's run-time shape in, the output's shape and data out.
int RunDynamic() {
  odla_computation comp;
  odla_CreateComputation(&comp);
  odla_value d = odla_CreateArgument(Type(ODLA_FLOAT32, {-1, 3}), ID("d"));
  odla_value r = odla_Relu(d, ID("r"));
  odla_SetValueAsOutput(r);
  odla_context ctx;
  odla_CreateContext(&ctx);
  float in[15], out[15];
  for (int i = 0; i < 15; ++i) in[i] = static_cast<float>(i) - 7.0f;
  odla_value_shape five{};
  five.size = 2, five.dims[0] = 5, five.dims[1] = 3;
  if (odla_SetRuntimeShape(ctx, d, five) != ODLA_SUCCESS) return 1;
  odla_BindToArgumentById(ID("d"), in, ctx);  // the output is not bound: read after the run
  if (odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_DEFAULT, nullptr) != ODLA_SUCCESS) return 1;
  if (odla_GetValueData(r, out, ctx) != ODLA_SUCCESS) return 1;
  odla_value_shape shape;
  odla_GetRuntimeShape(ctx, r, &shape);
  Print("dynamic_shape", shape.dims, shape.size);
  Print("dynamic", out, 15);
  odla_DestroyContext(ctx);
  odla_CreateContext(&ctx);  // a batch of 2 given as the context's RUN_BATCH_SIZE
  odla_int32 batch = 2;
  odla_SetContextItem(ctx, ODLA_RUN_BATCH_SIZE, reinterpret_cast<odla_item_value>(&batch));
  odla_BindToArgumentById(ID("d"), in, ctx);
  odla_BindToOutputById(ID("r"), out, ctx);
  if (odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_INFERENCE, nullptr) != ODLA_SUCCESS)
    return 1;
  odla_GetRuntimeShape(ctx, r, &shape);
  Print("batch_shape", shape.dims, shape.size);
  Print("batch", out, 6);
  odla_DestroyContext(ctx);
  odla_DestroyComputation(comp);
  return 0;
}

int RunInterpreted() {
  odla_computation comp;
  odla_CreateComputation(&comp);
  odla_value v = odla_CreateValue(Type(ODLA_FLOAT32, {2, 3}), ID("v"));
  if (odla_SetValueData(v, kX) != ODLA_SUCCESS) return 1;
  odla_value e = odla_Exp(v, ID("interpreted_exp"));
  float out[6];
  if (odla_GetValueData(e, out, nullptr) != ODLA_SUCCESS) return 1;
  Print("interpreted_exp", out, 6);
  odla_DestroyComputation(comp);
  return 0;
}

}  // namespace

int main() {
  odla_vendor vendor;
  odla_device device;
  if (odla_GetVendor(ODLA_VENDOR_DEFAULT, &vendor) != ODLA_SUCCESS ||
      odla_AllocateDevice(vendor, ODLA_DEVICE_DEFAULT, 0, &device) != ODLA_SUCCESS)
    return 1;
  odla_scalar_value info;
  odla_GetDeviceInfo(device, ODLA_DEVICE_INFO_DEV_COUNT, &info);
  std::printf("device_count %d\n", info.val_int32);
  odla_GetDeviceInfo(device, ODLA_DEVICE_INFO_ODLA_LIB_VERSION, &info);
  std::printf("library %s\n", info.val_str);

  odla_value flag;
  odla_computation comp = Build(&flag);
  odla_executable exe;
  if (comp == nullptr || odla_CompileComputation(comp, device, &exe) != ODLA_SUCCESS) return 1;
  odla_uint32 args, outputs, exe_args, exe_outputs;
  odla_GetNumOfArgsFromComputation(comp, &args);
  odla_GetNumOfOutputsFromComputation(comp, &outputs);
  odla_GetNumOfArgsFromExecutable(exe, &exe_args);
  odla_GetNumOfOutputsFromExecutable(exe, &exe_outputs);
  std::printf("counts %u %u %u %u\n", args, outputs, exe_args, exe_outputs);
  std::printf("outputs");
  for (odla_uint32 i = 0; i < exe_outputs; ++i) {
    odla_value out, same;
    odla_value_id id;
    odla_GetOutputFromExecutableByIdx(exe, i, &out);
    odla_GetOutputFromComputationByIdx(comp, i, &same);
    odla_GetValueId(out, &id);
    odla_value_id same_id;
    odla_GetValueId(same, &same_id);
    bool agree = std::strcmp((const char*)id, (const char*)same_id) == 0;
    std::printf(" %s%s", (const char*)id, agree ? "" : "!");
  }
  std::printf("\n");

  odla_context ctx;
  odla_CreateContext(&ctx);
  float clone[6], rsum[2], lrelu[6], softmax[6], transpose[6], concat[12], slice[4], dq[6],
      branch[6];
  int cast[6];
  signed char q[6];
  bool yes = true, no = false;
  odla_BindToArgumentById(ID("x"), kX, ctx);
  odla_BindToArgumentById(ID("flag"), &yes, ctx);
  void* bound[] = {clone, rsum, lrelu, softmax, transpose, concat, slice, cast, q, dq, branch};
  const char* ids[] = {"clone", "rsum", "lrelu", "softmax", "transpose", "concat", "slice", "cast",
                       "q", "dq", "branch"};
  for (int i = 0; i < 11; ++i) odla_BindToOutputById(ID(ids[i]), bound[i], ctx);
  odla_SetLogLevel(ODLA_LOG_LEVEL_INFO);  // the profiler's summary goes to the log
  odla_StartDeviceProfiler(device);
  if (odla_LaunchExecutable(exe, ctx) != ODLA_SUCCESS) return 1;
  odla_device_trace trace = nullptr;
  int stopped = odla_StopDeviceProfiler(device);
  int retrieved = odla_RetrieveDeviceTrace(device, &trace);
  std::printf("profiler %d %d %d\n", stopped, retrieved, odla_ReleaseDeviceTrace(trace));
  odla_SetLogLevel(ODLA_LOG_LEVEL_ERROR);
  Print("clone", clone, 6), Print("rsum", rsum, 2), Print("lrelu", lrelu, 6);
  Print("softmax", softmax, 6), Print("transpose", transpose, 6), Print("concat", concat, 12);
  Print("slice", slice, 4), Print("cast", cast, 6), Print("q", q, 6), Print("dq", dq, 6);
  Print("branch_true", branch, 6);
  odla_value concat_value;
  odla_GetOutputFromExecutableByIdx(exe, 5, &concat_value);
  odla_value_shape shape;
  odla_GetRuntimeShape(ctx, concat_value, &shape);
  Print("concat_shape", shape.dims, shape.size);

  // the same executable, launched asynchronously with the other branch
  int calls = 0;
  odla_SetContextItem(ctx, ODLA_ASYNC_CALLBACK_FUNC, reinterpret_cast<odla_item_value>(&Done));
  odla_SetContextItem(ctx, ODLA_ASYNC_CALLBACK_ARG, reinterpret_cast<odla_item_value>(&calls));
  odla_BindToArgumentById(ID("flag"), &no, ctx);
  if (odla_AsyncLaunchExecutable(exe, nullptr, ctx, ODLA_COMPUTE_INFERENCE, device) != ODLA_SUCCESS)
    return 1;
  for (int waited = 0; callback_status.load() < 0 && waited < 30000; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("callback %d %d\n", calls, callback_status.load());
  Print("branch_false", branch, 6);
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(exe);
  odla_DestroyComputation(comp);
  if (RunDynamic() != 0 || RunInterpreted() != 0) return 1;
  odla_DestroyDevice(device);
  std::printf("done\n");
  return 0;
}

// CPU microseconds per bare call of a compiled module's main through TVM's VM, from C++, on a
// prepared (1, 4) float32 tensor: the fastest of 7 loops of CALLS calls.
//   vm_call_cost LIBRARY.so [CALLS]     (LIBRARY.so: an exported bundle's model.so)
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace ffi = tvm::ffi;

struct Aligned {
  void AllocData(DLTensor* t) { t->data = std::aligned_alloc(64, 64); }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

static double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int calls = argc > 2 ? std::atoi(argv[2]) : 20000;
  ffi::Module lib = ffi::Module::LoadFromFile(argv[1]);
  ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, 2,
                                               static_cast<int>(kDLCPU), 0, 2);
  ffi::Function main_function = vm->GetFunction("main").value();
  ffi::Tensor x = ffi::Tensor::FromNDAlloc(Aligned(), ffi::Shape({1, 4}),
                                           DLDataType{kDLFloat, 32, 1},
                                           DLDevice{kDLCPU, 0});
  for (int i = 0; i < 4; ++i) static_cast<float*>(x.GetDLTensorPtr()->data)[i] = 1.0f;
  ffi::AnyView args[] = {x};
  ffi::Any result;
  double best = 1e30;
  for (int loop = -1; loop < 7; ++loop) {  // loop -1 warms up
    double start = CpuSeconds();
    for (int i = 0; i < calls; ++i) main_function.CallPacked(args, 1, &result);
    double per_call = (CpuSeconds() - start) / calls;
    if (loop >= 0 && per_call < best) best = per_call;
  }
  std::printf("%.3f\n", best * 1e6);
  return 0;
}

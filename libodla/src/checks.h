// The run-time checks odla-tvm's compiled modules call on the host between kernels
// ("odla_tvm.check_*", relay_bridge/checks.py in Python), for every loader without Python:
// libodla_tvm.so and odla_runner. Each reads what a counting kernel found, fails the run
// with the error Python raises (its kind and its message), else returns the fresh zero the
// kernels after it take. Needs TVM's runtime only; neither ODLA's headers nor Python.
#ifndef ODLA_TVM_CHECKS_H_
#define ODLA_TVM_CHECKS_H_

#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <string>

namespace odla_tvm {

// Registers the checks as global functions under the names the modules call, each only where
// none is registered yet (a process with odla_tvm's Python has its own).
void RegisterChecks();

// Whether `error` is a check's refusal of the caller's data (ODLA_INVALID_PARAM, as in
// Python's run_failure), not a failure of the run.
bool IsRefusedData(const tvm::ffi::Error& error);

// A copy of `t` on `device` (`t` itself where it is there already), and on the host.
tvm::ffi::Tensor OnDevice(const tvm::ffi::Tensor& t, DLDevice device);
tvm::ffi::Tensor OnHost(const tvm::ffi::Tensor& t);

}  // namespace odla_tvm

#endif  // ODLA_TVM_CHECKS_H_

// What libodla_tvm.so's parts share: the handles behind ODLA's opaque pointers, logging, the
// status guard every entry point runs in, and the build library's entry points.
#ifndef ODLA_TVM_INTERNAL_H_
#define ODLA_TVM_INTERNAL_H_

#include <ODLA/odla.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler_api.h"

#ifndef ODLA_TVM_VERSION  // both defined by libodla.build()
#define ODLA_TVM_VERSION ""
#endif
#ifndef ODLA_TVM_TVM_VERSION  // "": stored executables' TVM is not checked
#define ODLA_TVM_TVM_VERSION ""
#endif

struct _odla_value;

namespace odla_tvm {

// A failure carrying the ODLA status the entry point returns.
struct Error : std::runtime_error {
  odla_status status;
  Error(odla_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

void Log(odla_log_level level, const char* function, const std::string& message);

// Runs `body` (returning odla_status), turning every exception into a status and a message
// through ODLA's logger: nothing thrown crosses the C boundary.
template <typename Body>
odla_status Guard(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    Log(ODLA_LOG_LEVEL_ERROR, function, e.what());
    return e.status;
  } catch (const std::bad_alloc&) {
    Log(ODLA_LOG_LEVEL_ERROR, function, "out of memory");
    return ODLA_MEM_ERROR;
  } catch (const std::exception& e) {
    Log(ODLA_LOG_LEVEL_ERROR, function, e.what());
    return ODLA_FAILURE;
  } catch (...) {
    Log(ODLA_LOG_LEVEL_ERROR, function, "unknown failure");
    return ODLA_FAILURE;
  }
}

// The same for entry points returning a handle (ops): NULL on failure.
template <typename Result, typename Body>
Result GuardValue(const char* function, Body&& body) noexcept {
  Result result{};
  odla_status status = Guard(function, [&] {
    result = body();
    return ODLA_SUCCESS;
  });
  return status == ODLA_SUCCESS ? result : Result{};
}

template <typename T>
T* Require(T* pointer, const char* what) {
  if (pointer == nullptr) throw Error(ODLA_INVALID_PARAM, std::string(what) + " is NULL");
  return pointer;
}

// Every handle the library gives is live from its creation to its destruction; one checked
// here before use (from any thread) gives a status when destroyed, stale or foreign.
enum class HandleKind : uint8_t {
  kComputation, kValue, kExecutable, kContext, kDevice, kConfig, kTrace
};
void Track(const void* handle, HandleKind kind);
// Ends `handle`'s life: false where it was not live (so only one of two destroys proceeds).
bool Untrack(const void* handle, HandleKind kind);
// Throws ODLA_INVALID_PARAM: `what` is destroyed, or not one this library made.
[[noreturn]] void ThrowNotLive(const std::string& what);
// Throws ODLA_INVALID_PARAM naming `what` unless `handle` is live and of `kind`.
void CheckLive(const void* handle, HandleKind kind, const char* what);
// A copy of a value (its id and type), taken while its owner cannot free it; throws as
// CheckLive.
_odla_value LiveCopy(const _odla_value* value, const char* what);
template <typename T>
T* Live(T* handle, HandleKind kind, const char* what) {
  CheckLive(Require(handle, what), kind, what);
  return handle;
}

// The number an enum argument holds, read without loading it as the enum: callers pass values
// outside it (uninitialized ones), which a C++ enum need not hold (UBSan reports such a load).
template <typename Enum>
int EnumNumber(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "ODLA's enums are ints");
  int number;
  std::memcpy(&number, &value, sizeof number);
  return number;
}

std::string IdText(const odla_value_id id, const char* what);
size_t ElementSize(odla_element_type type);
// Refuses (ODLA_UNSUPPORTED_DATATYPE) an element type outside odla_element_type, before any C++
// code loads it as the enum.
void CheckElementType(const odla_value_type& type, const char* what);
int64_t ElementCount(const odla_value_shape& shape);
std::string ShapeText(const odla_value_shape& shape);
void CheckShape(const odla_value_shape& shape, const char* what);

}  // namespace odla_tvm

struct _odla_computation;
struct _odla_context;

// An odla_value: its id and type, and, for a value of a computation being built, the build
// library's object for it (a Python Value).
struct _odla_value {
  std::string id;
  odla_value_type type{};
  _odla_computation* computation = nullptr;  // NULL for an executable's slots
  odla_tvm_object object = nullptr;
};

struct _odla_executable;

struct _odla_computation {
  odla_tvm_object object = nullptr;
  std::vector<std::unique_ptr<_odla_value>> values;
  std::unordered_map<std::string, _odla_value*> by_id;
  std::mutex compile_mutex;  // the first ExecuteComputation compiles, once
  std::shared_ptr<_odla_executable> compiled;
  bool changed_since_compile = true;
};

namespace odla_tvm {

// The thread's current computation (ops take none, as in ODLA).
_odla_computation*& CurrentComputation();

// The build library (libodla_tvm_compiler.so), loaded on first use; throws if it cannot be.
const odla_tvm_compiler_api& Compiler();

// Loads an executable from a stored executable's bytes.
std::shared_ptr<_odla_executable> LoadExecutableBytes(std::string blob, const std::string& what);
// Loads the exported bundle in the folder `root` (see ParseBundle); one not checked against
// its digests is an engine-cache entry, where its vendor regions keep their packed weights.
std::shared_ptr<_odla_executable> LoadBundle(const std::string& root, bool check_digests = true);

// The live context or executable a handle names (held while used: a concurrent destroy frees
// it after); throws ODLA_INVALID_PARAM for a destroyed or foreign one.
std::shared_ptr<_odla_context> LiveContext(odla_context context);
std::shared_ptr<_odla_executable> LiveExecutable(odla_executable executable);

// Copies `value`, an output of the context's last run, to `data`; false if it has none.
bool ReadResult(_odla_context& ctx, const _odla_value& value, void* data);

// The profiler (odla_profiler.h): on or not, and a launch's time while on.
bool Profiling();
void RecordLaunch(double seconds);

// NULL or a device of this library (the CPU); else throws.
void CheckCpuDevice(odla_device device);

// Calls the build library, turning its failure into an Error.
void CheckCompiler(int status);

}  // namespace odla_tvm

#endif  // ODLA_TVM_INTERNAL_H_

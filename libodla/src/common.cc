// Logging (odla_log.h), the version string, shape helpers and the loading of the build library.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "internal.h"

namespace odla_tvm {

namespace {
std::atomic<odla_logging_func> logger{nullptr};
std::atomic<int> log_level{ODLA_LOG_LEVEL_ERROR};

const char* const kLevelNames[] = {"off", "fatal", "error", "warning", "info", "debug", "trace"};
}  // namespace

void Log(odla_log_level level, const char* function, const std::string& message) {
  if (level == ODLA_LOG_LEVEL_OFF || level > log_level.load()) return;
  if (odla_logging_func f = logger.load()) {
    f(__FILE__, 0, function, level, message.c_str());
  } else {
    std::fprintf(stderr, "odla-tvm %s: %s: %s\n", kLevelNames[level], function, message.c_str());
  }
}

namespace {
std::mutex handles_mutex;
std::unordered_map<const void*, HandleKind> handles;

const char* const kKindNames[] = {"computation", "value", "executable", "context", "device",
                                  "device config", "device trace"};

// Called holding handles_mutex.
[[noreturn]] void ThrowWrongKind(const void* handle, HandleKind kind, const char* what) {
  auto found = handles.find(handle);
  if (found == handles.end()) ThrowNotLive(what);
  throw Error(ODLA_INVALID_PARAM, std::string(what) + " is not a " +
                                      kKindNames[static_cast<int>(kind)] + " but a " +
                                      kKindNames[static_cast<int>(found->second)]);
}
}  // namespace

void ThrowNotLive(const std::string& what) {
  throw Error(ODLA_INVALID_PARAM,
              what + " is not live (destroyed, or not one this library made)");
}

void Track(const void* handle, HandleKind kind) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  handles[handle] = kind;
}

bool Untrack(const void* handle, HandleKind kind) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  auto found = handles.find(handle);
  if (found == handles.end() || found->second != kind) return false;
  handles.erase(found);
  return true;
}

void CheckLive(const void* handle, HandleKind kind, const char* what) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  auto found = handles.find(handle);
  if (found == handles.end() || found->second != kind) ThrowWrongKind(handle, kind, what);
}

_odla_value LiveCopy(const _odla_value* value, const char* what) {
  Require(value, what);
  std::lock_guard<std::mutex> lock(handles_mutex);
  auto found = handles.find(value);
  if (found == handles.end() || found->second != HandleKind::kValue)
    ThrowWrongKind(value, HandleKind::kValue, what);
  return *value;
}

std::string IdText(const odla_value_id id, const char* what) {
  if (id == nullptr) throw Error(ODLA_INVALID_PARAM, std::string(what) + " is NULL");
  return std::string(reinterpret_cast<const char*>(id));
}

size_t ElementSize(odla_element_type type) {
  switch (EnumNumber(type)) {  // any int a caller passes
    case ODLA_INT8: case ODLA_UINT8: case ODLA_QINT8: case ODLA_QUINT8: case ODLA_BOOL:
      return 1;
    case ODLA_INT16: case ODLA_UINT16: case ODLA_QINT16: case ODLA_QUINT16:
    case ODLA_FLOAT16: case ODLA_BFLOAT16:
      return 2;
    case ODLA_INT32: case ODLA_UINT32: case ODLA_QINT32: case ODLA_QUINT32: case ODLA_FLOAT32:
      return 4;
    case ODLA_INT64: case ODLA_UINT64: case ODLA_QINT64: case ODLA_QUINT64: case ODLA_FLOAT64:
      return 8;
    default:
      throw Error(ODLA_UNSUPPORTED_DATATYPE,
                  "element type " + std::to_string(EnumNumber(type)) +
                      " is not a tensor element type (0..20, not STRING)");
  }
}

void CheckElementType(const odla_value_type& type, const char* what) {
  int element = EnumNumber(type.element_type);
  if (element < ODLA_INT8 || element > ODLA_STRING)
    throw Error(ODLA_UNSUPPORTED_DATATYPE,
                std::string(what) + " has the element type " + std::to_string(element) +
                    "; odla_element_type is " + std::to_string(ODLA_INT8) + ".." +
                    std::to_string(ODLA_STRING));
}

void CheckShape(const odla_value_shape& shape, const char* what) {
  if (shape.size < 0 || shape.size > ODLA_MAX_DIMENSION)
    throw Error(ODLA_INVALID_PARAM, std::string(what) + " has rank " + std::to_string(shape.size) +
                                        "; ODLA allows 0.." + std::to_string(ODLA_MAX_DIMENSION));
  for (int i = 0; i < shape.size; ++i)
    if (shape.dims[i] < -1)
      throw Error(ODLA_INVALID_PARAM, std::string(what) + " " + ShapeText(shape) +
                                          " has a dim below -1");
}

int64_t ElementCount(const odla_value_shape& shape) {
  int64_t count = 1;
  for (int i = 0; i < shape.size; ++i) count *= shape.dims[i];
  return count;
}

std::string ShapeText(const odla_value_shape& shape) {
  std::string text = "(";
  for (int i = 0; i < shape.size && i < ODLA_MAX_DIMENSION; ++i)
    text += (i ? ", " : "") + std::to_string(shape.dims[i]);
  return text + ")";
}

_odla_computation*& CurrentComputation() {
  thread_local _odla_computation* current = nullptr;
  return current;
}

void CheckCompiler(int status) {
  if (status != ODLA_SUCCESS)
    throw Error(static_cast<odla_status>(status), Compiler().last_error());
}

const odla_tvm_compiler_api& Compiler() {
  static const odla_tvm_compiler_api* api = nullptr;
  static std::string failure;
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    // Beside this library. RTLD_GLOBAL: the interpreter's extension modules (NumPy, TVM's)
    // find libpython's symbols in the global scope, as they do in the python executable.
    Dl_info self;
    dladdr(reinterpret_cast<void*>(&Compiler), &self);
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libodla_tvm_compiler.so";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      failure = std::string("building a computation needs ") + path + ", which does not load: " +
                dlerror();
      return;
    }
    using Entry = const odla_tvm_compiler_api* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "odla_tvm_compiler"));
    if (entry == nullptr) {
      failure = path + " lacks odla_tvm_compiler";
      return;
    }
    api = entry();
  });
  if (api == nullptr) throw Error(ODLA_DL_ERROR, failure);
  return *api;
}

}  // namespace odla_tvm

using namespace odla_tvm;

extern "C" {

odla_status odla_SetLogLevel(odla_log_level level) {
  if (level < ODLA_LOG_LEVEL_OFF || level > ODLA_LOG_LEVEL_TRACE) return ODLA_INVALID_PARAM;
  log_level.store(level);
  return ODLA_SUCCESS;
}

odla_status odla_SetLogger(odla_logging_func f) {
  logger.store(f);
  return ODLA_SUCCESS;
}

odla_logging_func odla_GetLogger(void) { return logger.load(); }

const char* odla_GetVersionString(void) { return "odla-tvm " ODLA_TVM_VERSION " (ODLA 0.5.0)"; }

}  // extern "C"

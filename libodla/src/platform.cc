// odla_device.h, odla_memory.h, odla_task.h and odla_profiler.h: the CPU this library runs
// on, host memory, tasks, and a profiler timing each launch; plus the entry points with no
// meaning here, which return a status saying so.
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "internal.h"

using namespace odla_tvm;

struct _odla_vendor {
  odla_vendor_name name;
};
struct _odla_device {
  odla_device_name name;
  odla_int32 index;
};
struct _odla_device_config {};
struct _odla_device_trace {
  std::vector<double> launch_seconds;
};

namespace {

_odla_vendor vendors[] = {{ODLA_VENDOR_DEFAULT}, {ODLA_VENDOR_INTEL}};
std::mutex devices_mutex;
std::unordered_map<_odla_device*, std::unique_ptr<_odla_device>> devices;
std::atomic<odla_async_executor> async_executor{nullptr};
std::atomic<bool> profiling{false};
std::mutex trace_mutex;
std::vector<double> launch_seconds;  // while profiling

odla_status Unsupported(const char* function, odla_status status, const char* why) {
  Log(ODLA_LOG_LEVEL_WARN, function, why);
  return status;
}

// Busy and total jiffies of all cores, from /proc/stat's first line.
std::pair<double, double> CpuJiffies() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double field = 0, total = 0, idle = 0;
  stat >> cpu;
  for (int i = 0; stat >> field && i < 10; ++i) {
    total += field;
    if (i == 3 || i == 4) idle += field;  // idle, iowait
  }
  return {total - idle, total};
}

// Busy share of all cores over a short interval, as Python's get_device_info measures it.
float ProcessorUtilization() {
  auto [busy0, total0] = CpuJiffies();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto [busy1, total1] = CpuJiffies();
  return total1 > total0 ? static_cast<float>((busy1 - busy0) / (total1 - total0)) : 0.f;
}

// 16 bytes naming this machine: the CPU has no UUID, so systemd's machine id stands in.
const char* MachineUuid() {
  static char uuid[16];
  static bool found = [] {
    for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
      std::ifstream file(path);
      std::string hex;
      if (!(file >> hex) || hex.size() < 32) continue;
      for (int i = 0; i < 16; ++i)
        uuid[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      return true;
    }
    return false;
  }();
  if (!found) throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, "no machine id to give as DEV_UUID");
  return uuid;
}

// The CPU's "driver" is the operating system kernel.
const char* KernelVersion() {
  static const std::string version = [] {
    utsname name{};
    return uname(&name) == 0 ? std::string(name.sysname) + " " + name.release : "unknown";
  }();
  return version.c_str();
}

// A handle the caller destroys with Destroy: tracked, so a stale one gives a status.
template <typename T>
T* Created(HandleKind kind) {
  auto made = std::make_unique<T>();
  Track(made.get(), kind);
  return made.release();
}

template <typename T>
void Destroy(T* handle, HandleKind kind, const char* what) {
  if (!Untrack(Require(handle, what), kind)) ThrowNotLive(what);  // one of two destroys
  delete handle;
}

odla_status RunTaskNow(odla_device device, odla_task task) {
  if (task.func == nullptr) return ODLA_INVALID_PARAM;
  task.func(device, task.inputs, task.outputs);
  return ODLA_SUCCESS;
}

}  // namespace

namespace odla_tvm {

bool Profiling() { return profiling.load(std::memory_order_relaxed); }

void RecordLaunch(double seconds) {
  std::lock_guard<std::mutex> lock(trace_mutex);
  launch_seconds.push_back(seconds);
}

void CheckCpuDevice(odla_device device) {
  if (device == nullptr) return;
  std::lock_guard<std::mutex> lock(devices_mutex);
  if (devices.count(device) == 0)
    throw Error(ODLA_INVALID_PARAM,
                "device is not one odla_AllocateDevice gave (or was destroyed)");
}

}  // namespace odla_tvm

extern "C" {

odla_status odla_GetVendor(const odla_vendor_name vendor_name, odla_vendor* vendor) {
  return Guard(__func__, [&] {
    Require(vendor, "vendor");
    for (_odla_vendor& v : vendors)
      if (v.name == vendor_name) {
        *vendor = &v;
        return ODLA_SUCCESS;
      }
    throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE,
                "this library runs on the CPU: vendor DEFAULT or INTEL");
  });
}

odla_status odla_GetVendorInfo(const odla_vendor vendor, const odla_vendor_info info_name,
                               const odla_size_t allocated_info_value_size, odla_void* info_value,
                               odla_size_t* retrieved_info_value_size) {
  return Guard(__func__, [&] {
    Require(vendor, "vendor");
    const char* text = info_name == OVI_DESCRIPTION ? "odla-tvm: ODLA on Apache TVM (CPU)"
                                                    : "inference, compiled and interpreted";
    size_t size = std::strlen(text) + 1;
    if (retrieved_info_value_size != nullptr) *retrieved_info_value_size = size;
    if (info_value == nullptr) return ODLA_SUCCESS;
    if (allocated_info_value_size < size)
      throw Error(ODLA_MEM_ERROR, "the info needs " + std::to_string(size) + " bytes");
    std::memcpy(info_value, text, size);
    return ODLA_SUCCESS;
  });
}

odla_status odla_AllocateDevice(odla_vendor vendor, odla_device_name device_name,
                                odla_int32 device_idx, odla_device* device) {
  return Guard(__func__, [&] {
    Require(device, "device");
    (void)vendor;  // NULL: the default vendor
    if (device_name != ODLA_DEVICE_DEFAULT && device_name != ODLA_DEVICE_INTEL_X86)
      throw Error(ODLA_UNSUPPORTED_DEVICE_TYPE, "this library runs on the CPU: device DEFAULT or "
                                                "INTEL_X86 (other devices from Python)");
    if (device_idx != 0) throw Error(ODLA_INVALID_PARAM, "the CPU has device index 0 only");
    auto d = std::make_unique<_odla_device>(_odla_device{device_name, device_idx});
    std::lock_guard<std::mutex> lock(devices_mutex);
    *device = d.get();
    devices[d.get()] = std::move(d);
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetDeviceInfo(odla_device device, odla_device_info info_type,
                               odla_scalar_value* info_value) {
  return Guard(__func__, [&] {
    Require(info_value, "info_value");
    CheckCpuDevice(device);
    long pages = sysconf(_SC_PHYS_PAGES), available = sysconf(_SC_AVPHYS_PAGES),
         page = sysconf(_SC_PAGESIZE);
    switch (EnumNumber(info_type)) {  // any int a caller passes
      case ODLA_DEVICE_INFO_ODLA_LIB_VERSION:
        info_value->data_type = ODLA_STRING;
        info_value->val_str = odla_GetVersionString();
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_DEV_COUNT:
        info_value->data_type = ODLA_INT32;
        info_value->val_int32 = 1;
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_DEV_INDEX:
        info_value->data_type = ODLA_INT32;
        info_value->val_int32 = device ? device->index : 0;
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_DEV_TYPE:
        info_value->data_type = ODLA_STRING;
        info_value->val_str = "cpu";
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_TOTAL_MEMORY:
        info_value->data_type = ODLA_UINT64;
        info_value->val_uint64 = static_cast<odla_uint64>(pages) * page;
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_USED_MEMORY:
        info_value->data_type = ODLA_UINT64;
        info_value->val_uint64 = static_cast<odla_uint64>(pages - available) * page;
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_MEMORY_UTIL:
        info_value->data_type = ODLA_FLOAT32;
        info_value->val_fp32 = pages ? static_cast<float>(pages - available) / pages : 0.f;
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_PROCESSOR_UTIL:
        info_value->data_type = ODLA_FLOAT32;
        info_value->val_fp32 = ProcessorUtilization();
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_DEV_UUID:
        info_value->data_type = ODLA_STRING;  // 16 bytes, not NUL-terminated, as CUDA's UUID
        info_value->val_str = MachineUuid();
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_DRIVER_VERSION:
        info_value->data_type = ODLA_STRING;
        info_value->val_str = KernelVersion();
        return ODLA_SUCCESS;
      case ODLA_DEVICE_INFO_SDK_VERSION:
        info_value->data_type = ODLA_STRING;
        info_value->val_str = "TVM " ODLA_TVM_TVM_VERSION;
        return ODLA_SUCCESS;
      default:  // the power items: a CPU has no power reading here
        throw Error(ODLA_UNSUPPORTED_DATATYPE, "device info " +
                                                   std::to_string(EnumNumber(info_type)) +
                                                   " is not known of the CPU here");
    }
  });
}

odla_status odla_InitDevice(odla_device device, const odla_device_config) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetCurrentDevice(odla_device device) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyDevice(odla_device device) {
  return Guard(__func__, [&] {
    Require(device, "device");
    std::lock_guard<std::mutex> lock(devices_mutex);
    if (devices.erase(device) == 0) ThrowNotLive("device");  // one of two destroys
    return ODLA_SUCCESS;
  });
}

odla_status odla_CreateDeviceConfig(odla_device_config* device_config) {
  return Guard(__func__, [&] {
    *Require(device_config, "device_config") = Created<_odla_device_config>(HandleKind::kConfig);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetDeviceConfigItem(odla_device_config device_config,
                                     odla_device_config_item, ...) {
  return Guard(__func__, [&] {
    Live(device_config, HandleKind::kConfig, "device_config");
    return Unsupported(__func__, ODLA_UNSUPPORTED_DATATYPE,
                       "ODLA 0.5 defines no device config items; the CPU takes none");
  });
}

odla_status odla_DestroyDeviceConfig(odla_device_config device_config) {
  return Guard(__func__, [&] {
    Destroy(device_config, HandleKind::kConfig, "device_config");
    return ODLA_SUCCESS;
  });
}

// Memory: the device is the CPU, so device memory is host memory, 64-byte aligned.
odla_status odla_AllocateDeviceMemory(odla_void** dev_ptr, odla_size_t size) {
  if (dev_ptr == nullptr) return ODLA_INVALID_PARAM;
  size_t rounded = (size + 63) / 64 * 64;
  *dev_ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  return *dev_ptr ? ODLA_SUCCESS : ODLA_MEM_ERROR;
}

odla_status odla_FreeDeviceMemory(odla_void* ptr) {
  std::free(ptr);
  return ODLA_SUCCESS;
}

odla_status odla_AllocateHostMemory(odla_void** host_ptr, odla_size_t size) {
  return odla_AllocateDeviceMemory(host_ptr, size);
}

odla_status odla_FreeHostMemory(odla_void* ptr) { return odla_FreeDeviceMemory(ptr); }

odla_status odla_CopyMemory(odla_void* dst, odla_void* src, odla_size_t size,
                            odla_memcpy_type type) {
  if ((dst == nullptr || src == nullptr) && size != 0) return ODLA_INVALID_PARAM;
  if (type < ODLA_MEMCPY_H2H || type > ODLA_MEMCPY_D2D) return ODLA_INVALID_PARAM;
  if (size != 0) std::memmove(dst, src, size);
  return ODLA_SUCCESS;
}

odla_status odla_SetAsyncExecutor(odla_async_executor executor) {
  async_executor.store(executor);
  return ODLA_SUCCESS;
}

odla_status odla_RunTask(odla_device device, odla_task task) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    return RunTaskNow(device, task);
  });
}

odla_status odla_RunTaskAsync(odla_device device, odla_task task) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    if (task.func == nullptr) return ODLA_INVALID_PARAM;
    if (odla_async_executor executor = async_executor.load())
      return executor(RunTaskNow, device, task);
    std::thread([device, task] { RunTaskNow(device, task); }).detach();
    return ODLA_SUCCESS;
  });
}

// The profiler times each launch while on. ODLA 0.5 gives a trace no accessors, so what it
// recorded is logged (INFO) when it stops; a retrieved trace holds the launches' times.
odla_status odla_CreateDeviceTrace(odla_device_trace* device_trace) {
  return Guard(__func__, [&] {
    *Require(device_trace, "device_trace") = Created<_odla_device_trace>(HandleKind::kTrace);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetDeviceTraceItem(odla_device_trace device_trace, odla_device_trace_item, ...) {
  return Guard(__func__, [&] {
    Live(device_trace, HandleKind::kTrace, "device_trace");
    return Unsupported(__func__, ODLA_UNSUPPORTED_DATATYPE, "ODLA 0.5 defines no trace items");
  });
}

odla_status odla_ReleaseDeviceTrace(odla_device_trace device_trace) {
  return Guard(__func__, [&] {
    Destroy(device_trace, HandleKind::kTrace, "device_trace");
    return ODLA_SUCCESS;
  });
}

odla_status odla_StartDeviceProfiler(odla_device device) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    std::lock_guard<std::mutex> lock(trace_mutex);
    launch_seconds.clear();
    profiling.store(true);
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncStartDeviceProfiler(odla_device device) {
  return odla_StartDeviceProfiler(device);
}

odla_status odla_StopDeviceProfiler(odla_device device) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    profiling.store(false);
    std::lock_guard<std::mutex> lock(trace_mutex);
    double total = 0;
    for (double s : launch_seconds) total += s;
    Log(ODLA_LOG_LEVEL_INFO, "odla_StopDeviceProfiler",
        std::to_string(launch_seconds.size()) + " launches profiled, " +
            std::to_string(total * 1e3) + " ms in all");
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncStopDeviceProfiler(odla_device device) {
  return odla_StopDeviceProfiler(device);
}

odla_status odla_RetrieveDeviceTrace(odla_device device, odla_device_trace* device_trace) {
  return Guard(__func__, [&] {
    CheckCpuDevice(device);
    Require(device_trace, "device_trace");
    std::vector<double> seconds;
    {
      std::lock_guard<std::mutex> lock(trace_mutex);
      seconds = launch_seconds;
    }
    _odla_device_trace* trace = Created<_odla_device_trace>(HandleKind::kTrace);
    trace->launch_seconds = std::move(seconds);
    *device_trace = trace;
    return ODLA_SUCCESS;
  });
}

// Entry points with no meaning here.
odla_status odla_LoadComputation(odla_resource_location, odla_computation*) {
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP,
                     "computations are not stored; store the compiled executable");
}

odla_status odla_StoreComputation(odla_resource_location, odla_computation) {
  return odla_LoadComputation({}, nullptr);
}

odla_status odla_SetInputValueInfo(odla_value, odla_item_type, odla_item_value) {
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP,
                     "input value ranges are not taken; give shapes with odla_SetValueShapeInfo");
}

odla_status odla_CreateConstantsArray(odla_constants_array*) {
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP,
                     "constants arrays are not supported: an executable holds its constants");
}

odla_status odla_LoadConstantsArray(const odla_char*, odla_constants_array*) {
  return odla_CreateConstantsArray(nullptr);
}

odla_status odla_StoreConstantsArray(const odla_char*, const odla_constants_array) {
  return odla_CreateConstantsArray(nullptr);
}

odla_status odla_DestroyConstantsArray(odla_constants_array) {
  return odla_CreateConstantsArray(nullptr);
}

odla_status odla_BindValueToArgumentById(const odla_value_id, odla_value, odla_context) {
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP,
                     "bind the value's data with odla_BindToArgumentById");
}

odla_status odla_BindValueToOutputById(const odla_value_id, odla_value, odla_context) {
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP, "bind memory with odla_BindToOutputById");
}

odla_status odla_GetRawDataPtr(const odla_value, odla_void** data_ptr) {
  if (data_ptr != nullptr) *data_ptr = nullptr;
  return Unsupported(__func__, ODLA_UNSUPPORTED_OP,
                     "a value's data is not in memory the caller may hold; copy it with "
                     "odla_GetValueData");
}

}  // extern "C"

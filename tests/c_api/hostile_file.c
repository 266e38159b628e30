/* Loads a stored executable or bundle that may be hostile and launches it once, as a careful
 * caller does: every buffer sized from the type the executable declares, each output ending
 * at an inaccessible page (a copy past it is a SIGSEGV, never a silent overrun). Prints
 * "load <status>" and, where it loaded, "launch <status>", then each message ODLA's logger
 * received as "message <text>".
 *   hostile_file PATH [INT [OUT.bin]]
 * INT: the value of every integer input element (0 by default; floats are 0); OUT.bin: where
 * the first output's bytes are written after a good launch. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <ODLA/odla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void print_message(const char* file, int line, const char* function, odla_log_level level,
                          const char* message) {
  (void)file, (void)line, (void)function;
  if (level <= ODLA_LOG_LEVEL_ERROR) printf("message %s\n", message);
}

static size_t element_size(odla_element_type type) {
  switch (type) {
    case ODLA_INT8: case ODLA_UINT8: case ODLA_BOOL: return 1;
    case ODLA_INT16: case ODLA_UINT16: case ODLA_FLOAT16: case ODLA_BFLOAT16: return 2;
    case ODLA_INT64: case ODLA_UINT64: case ODLA_FLOAT64: return 8;
    default: return 4;
  }
}

static size_t value_bytes(odla_value value, odla_element_type* element) {
  odla_value_type type;
  size_t bytes;
  int i;
  odla_GetValueType(value, &type);
  *element = type.element_type;
  bytes = element_size(type.element_type);
  for (i = 0; i < type.shape.size; ++i)
    bytes *= (size_t)(type.shape.dims[i] < 0 ? 1 : type.shape.dims[i]);
  return bytes;
}

/* `bytes` whose last byte lies just before a PROT_NONE page. */
static void* guarded(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + page - 1) / page * page + page;
  char* base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) exit(3);
  mprotect(base + span - page, page, PROT_NONE);
  return base + span - page - bytes;
}

int main(int argc, char** argv) {
  odla_resource_location location;
  odla_executable exe = NULL;
  odla_context ctx = NULL;
  odla_uint32 args = 0, outputs = 0, i;
  long long fill = argc > 2 ? atoll(argv[2]) : 0;
  void* first_output = NULL;
  size_t first_bytes = 0;
  odla_status status;
  if (argc < 2) return 2;
  odla_SetLogger(print_message);
  location.location_type = ODLA_LOCATION_PATH;
  location.location = argv[1];
  location.size = 0;
  status = odla_LoadExecutable(location, NULL, &exe);
  printf("load %d\n", status);
  if (status != ODLA_SUCCESS) return 0;
  odla_CreateContext(&ctx);
  odla_GetNumOfArgsFromExecutable(exe, &args);
  odla_GetNumOfOutputsFromExecutable(exe, &outputs);
  for (i = 0; i < args; ++i) {
    odla_value value;
    odla_element_type element;
    size_t bytes, k;
    char* data;
    odla_GetArgFromExecutableByIdx(exe, i, &value);
    bytes = value_bytes(value, &element);
    data = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memset(data, 0, bytes);
    for (k = 0; element == ODLA_INT64 && k < bytes / 8; ++k) ((long long*)data)[k] = fill;
    for (k = 0; element == ODLA_INT32 && k < bytes / 4; ++k) ((int*)data)[k] = (int)fill;
    odla_BindToArgument(value, data, ctx);
  }
  for (i = 0; i < outputs; ++i) {
    odla_value value;
    odla_element_type element;
    size_t bytes;
    void* data;
    odla_GetOutputFromExecutableByIdx(exe, i, &value);
    bytes = value_bytes(value, &element);
    data = guarded(bytes);
    if (i == 0) first_output = data, first_bytes = bytes;
    odla_BindToOutput(value, data, ctx);
  }
  status = odla_LaunchExecutable(exe, ctx);
  printf("launch %d\n", status);
  if (status == ODLA_SUCCESS && argc > 3 && first_output != NULL) {
    FILE* f = fopen(argv[3], "wb");
    if (f == NULL || fwrite(first_output, 1, first_bytes, f) != first_bytes) return 4;
    fclose(f);
  }
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(exe);
  return 0;
}

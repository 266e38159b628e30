/* Loads a precompiled odla-tvm executable (a .odla file from odla_tvm.store_executable or
 * odla_StoreExecutable) and runs it: no Python and no compiler in this process.
 *
 *   run_executable EXE OUT_DIR [--threads N] [--repeat N] [--store COPY] INPUT.bin ...
 *
 * Each INPUT.bin holds one argument's raw data, in argument order. Each output is written raw
 * to OUT_DIR/<output id>.bin, each character of the id other than [A-Za-z0-9_.-] written as
 * '_' (ids such as "gpu_0/softmax_1" name no folder). With --threads N, N threads run the executable at once, each
 * with its own context, --repeat times, and must all compute the same outputs. --store writes
 * the executable again, to COPY. Prints the libraries of note this process maps. */
#include <ODLA/odla.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 16

static odla_executable exe;
static odla_uint32 num_args, num_outputs;
static void* inputs[MAX_SLOTS];
static size_t output_bytes[MAX_SLOTS];
static int repeat = 1;

static size_t element_size(odla_element_type type) {
  switch (type) {
    case ODLA_INT8: case ODLA_UINT8: case ODLA_BOOL: return 1;
    case ODLA_INT16: case ODLA_UINT16: case ODLA_FLOAT16: case ODLA_BFLOAT16: return 2;
    case ODLA_INT64: case ODLA_UINT64: case ODLA_FLOAT64: return 8;
    default: return 4;
  }
}

static size_t value_bytes(odla_value value) {
  odla_value_type type;
  size_t bytes;
  int i;
  odla_GetValueType(value, &type);
  bytes = element_size(type.element_type);
  for (i = 0; i < type.shape.size; ++i) bytes *= (size_t)type.shape.dims[i];
  return bytes;
}

static const char* value_id(odla_value value) {
  odla_value_id id;
  odla_GetValueId(value, &id);
  return (const char*)id;
}

static void* read_file(const char* path, size_t expected) {
  FILE* f = fopen(path, "rb");
  void* data = malloc(expected ? expected : 1);
  if (f == NULL || fread(data, 1, expected, f) != expected) {
    fprintf(stderr, "cannot read %zu bytes from %s\n", expected, path);
    exit(1);
  }
  fclose(f);
  return data;
}

/* One thread's runs: its own context, its own outputs; returns them (malloc'ed). */
static void* run(void* unused) {
  odla_context ctx;
  void** outputs = calloc(MAX_SLOTS, sizeof(void*));
  odla_uint32 i;
  int r;
  (void)unused;
  if (odla_CreateContext(&ctx) != ODLA_SUCCESS) return NULL;
  for (i = 0; i < num_outputs; ++i) outputs[i] = malloc(output_bytes[i] ? output_bytes[i] : 1);
  for (r = 0; r < repeat; ++r) {
    for (i = 0; i < num_args; ++i) {
      odla_value arg;
      odla_GetArgFromExecutableByIdx(exe, i, &arg);
      odla_BindToArgument(arg, inputs[i], ctx);
    }
    for (i = 0; i < num_outputs; ++i) {
      odla_value out;
      odla_GetOutputFromExecutableByIdx(exe, i, &out);
      odla_BindToOutput(out, outputs[i], ctx);
    }
    if (odla_LaunchExecutable(exe, ctx) != ODLA_SUCCESS) return NULL;
  }
  odla_DestroyContext(ctx);
  return outputs;
}

/* OUT_DIR/<id>.bin, the id made a file name. */
static void output_path(char* path, size_t size, const char* out_dir, const char* id) {
  size_t at = (size_t)snprintf(path, size, "%s/", out_dir), i;
  for (i = 0; id[i] != '\0' && at + 5 < size; ++i, ++at)
    path[at] = (isalnum((unsigned char)id[i]) || strchr("_.-", id[i])) ? id[i] : '_';
  snprintf(path + at, size - at, ".bin");
}

static void print_mapped_libraries(void) {
  char line[4096];
  int python = 0, compiler = 0;
  FILE* maps = fopen("/proc/self/maps", "r");
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
    python |= strstr(line, "libpython") != NULL;
    compiler |= strstr(line, "libtvm_compiler") != NULL;
  }
  if (maps != NULL) fclose(maps);
  printf("maps libpython: %s\nmaps libtvm_compiler: %s\n", python ? "yes" : "no",
         compiler ? "yes" : "no");
}

int main(int argc, char** argv) {
  odla_resource_location location;
  const char *out_dir, *store = NULL;
  int threads = 1, next = 0, a, t;
  odla_uint32 i;
  char* inputs_given[MAX_SLOTS];
  pthread_t workers[64];
  void** results[64];
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s EXE OUT_DIR [--threads N] [--repeat N] [--store COPY] INPUT.bin...\n",
            argv[0]);
    return 2;
  }
  out_dir = argv[2];
  for (a = 3; a < argc; ++a) {
    if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) threads = atoi(argv[++a]);
    else if (strcmp(argv[a], "--repeat") == 0 && a + 1 < argc) repeat = atoi(argv[++a]);
    else if (strcmp(argv[a], "--store") == 0 && a + 1 < argc) store = argv[++a];
    else if (next < MAX_SLOTS) inputs_given[next++] = argv[a];
  }
  if (threads < 1 || threads > 64) threads = 1;
  location.location_type = ODLA_LOCATION_PATH;
  location.location = argv[1];
  location.size = 0;
  if (odla_LoadExecutable(location, NULL, &exe) != ODLA_SUCCESS) return 1;
  odla_GetNumOfArgsFromExecutable(exe, &num_args);
  odla_GetNumOfOutputsFromExecutable(exe, &num_outputs);
  if (num_args != (odla_uint32)next || num_args > MAX_SLOTS || num_outputs > MAX_SLOTS) {
    fprintf(stderr, "the executable takes %u arguments; %d input files given\n", num_args, next);
    return 2;
  }
  for (i = 0; i < num_args; ++i) {
    odla_value arg;
    odla_GetArgFromExecutableByIdx(exe, i, &arg);
    inputs[i] = read_file(inputs_given[i], value_bytes(arg));
  }
  for (i = 0; i < num_outputs; ++i) {
    odla_value out;
    odla_GetOutputFromExecutableByIdx(exe, i, &out);
    output_bytes[i] = value_bytes(out);
  }
  for (t = 0; t < threads; ++t) pthread_create(&workers[t], NULL, run, NULL);
  for (t = 0; t < threads; ++t) pthread_join(workers[t], (void**)&results[t]);
  for (t = 0; t < threads; ++t) {
    if (results[t] == NULL) return 1;
    for (i = 0; i < num_outputs; ++i)
      if (memcmp(results[t][i], results[0][i], output_bytes[i]) != 0) {
        fprintf(stderr, "thread %d computed another output %u\n", t, i);
        return 1;
      }
  }
  for (i = 0; i < num_outputs; ++i) {
    odla_value out;
    char path[4096];
    FILE* f;
    odla_GetOutputFromExecutableByIdx(exe, i, &out);
    output_path(path, sizeof path, out_dir, value_id(out));
    f = fopen(path, "wb");
    if (f == NULL || fwrite(results[0][i], 1, output_bytes[i], f) != output_bytes[i]) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
    fclose(f);
  }
  if (store != NULL) {
    location.location = store;
    if (odla_StoreExecutable(location, exe) != ODLA_SUCCESS) return 1;
  }
  print_mapped_libraries();
  odla_DestroyExecutable(exe);
  return 0;
}

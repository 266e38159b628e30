/* Regions of the DEFAULT device's oneDNN plugin, run from C.
 *
 *   onednn_regions build      builds conv + relu + gemm through odla_* calls, runs it (the
 *                             first execute compiles it on DEFAULT) and prints the output
 *   onednn_regions load EXE   loads a stored executable and runs it on zeros
 *
 * Then prints the thread pools' settings the run had (TVM_THREAD_POOL_SPIN_COUNT,
 * GOMP_SPINCOUNT) and whether oneDNN's library is mapped, for tests/test_c_api_executables.py.
 * Input and weights: scale * (((i * 37) mod 101) / 50 - 1) for element i. */
#include <ODLA/odla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID(text) ((odla_value_id)(text))

static float x[1 * 8 * 8 * 8], w[16 * 8 * 3 * 3], fc_w[16 * 8 * 8 * 10], out[10];

static void fill(float* data, int count, float scale) {
  int i;
  for (i = 0; i < count; ++i) data[i] = scale * ((float)((i * 37) % 101) / 50.0f - 1.0f);
}

static odla_value_type tensor(int rank, const odla_int64* dims) {
  odla_value_type type;
  int i;
  memset(&type, 0, sizeof type);
  type.element_type = ODLA_FLOAT32;
  type.shape.size = rank;
  for (i = 0; i < rank; ++i) type.shape.dims[i] = dims[i];
  return type;
}

static int build_and_run(void) {
  static const odla_int64 x_dims[] = {1, 8, 8, 8}, w_dims[] = {16, 8, 3, 3},
                          flat_dims[] = {1, 16 * 8 * 8}, fc_dims[] = {16 * 8 * 8, 10};
  static const odla_uint32 ones[] = {1, 1};
  odla_computation comp;
  odla_context ctx;
  odla_value in, y;
  odla_value_shape any;
  int i;
  memset(&any, 0, sizeof any);
  fill(x, 512, 1.0f);
  fill(w, 16 * 8 * 9, 0.2f);
  fill(fc_w, 16 * 64 * 10, 0.05f);
  odla_CreateComputation(&comp);
  in = odla_CreateArgument(tensor(4, x_dims), ID("x"));
  y = odla_Conv(in, ODLA_CHANNELS_FIRST, 1, odla_CreateConstant(tensor(4, w_dims), w, ID("w")),
                ODLA_OIS, ones, ones, ones, ones, NULL, any, ID("conv"));
  y = odla_Reshape(odla_Relu(y, ID("relu")), tensor(2, flat_dims).shape, ID("flat"));
  y = odla_Gemm(y, 0, odla_CreateConstant(tensor(2, fc_dims), fc_w, ID("fc_w")), 0, 1.0f, 0.0f,
                NULL, any, ID("out"));
  odla_SetValueAsOutput(y);
  odla_CreateContext(&ctx);
  odla_BindToArgumentById(ID("x"), x, ctx);
  odla_BindToOutputById(ID("out"), out, ctx);
  if (odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_INFERENCE, NULL) != ODLA_SUCCESS) return 1;
  printf("out");
  for (i = 0; i < 10; ++i) printf(" %.9g", out[i]);
  printf("\n");
  odla_DestroyContext(ctx);
  return odla_DestroyComputation(comp) != ODLA_SUCCESS;
}

static int load_and_run(const char* path) {
  odla_resource_location location;
  odla_executable exe;
  odla_context ctx;
  odla_uint32 n, i;
  static char zeros[1 << 20], sink[1 << 20]; /* large enough for the test's slots */
  location.location_type = ODLA_LOCATION_PATH;
  location.location = path;
  location.size = 0;
  if (odla_LoadExecutable(location, NULL, &exe) != ODLA_SUCCESS) return 1;
  odla_CreateContext(&ctx);
  odla_GetNumOfArgsFromExecutable(exe, &n);
  for (i = 0; i < n; ++i) {
    odla_value arg;
    odla_GetArgFromExecutableByIdx(exe, i, &arg);
    odla_BindToArgument(arg, zeros, ctx);
  }
  odla_GetNumOfOutputsFromExecutable(exe, &n);
  for (i = 0; i < n; ++i) {
    odla_value output;
    odla_GetOutputFromExecutableByIdx(exe, i, &output);
    odla_BindToOutput(output, sink, ctx);
  }
  if (odla_LaunchExecutable(exe, ctx) != ODLA_SUCCESS) return 1;
  odla_DestroyContext(ctx);
  return odla_DestroyExecutable(exe) != ODLA_SUCCESS;
}

static int maps(const char* library) {
  char line[4096];
  int found = 0;
  FILE* maps = fopen("/proc/self/maps", "r");
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL)
    found |= strstr(line, library) != NULL;
  if (maps != NULL) fclose(maps);
  return found;
}

int main(int argc, char** argv) {
  const char *spin, *gomp;
  int failed;
  if (argc >= 2 && strcmp(argv[1], "build") == 0) failed = build_and_run();
  else if (argc >= 3 && strcmp(argv[1], "load") == 0) failed = load_and_run(argv[2]);
  else {
    fprintf(stderr, "usage: %s build | load EXE\n", argv[0]);
    return 2;
  }
  if (failed) return 1;
  spin = getenv("TVM_THREAD_POOL_SPIN_COUNT");
  gomp = getenv("GOMP_SPINCOUNT");
  printf("pool_spin %s\ngomp_spin %s\nmaps_dnnl %s\n", spin ? spin : "unset",
         gomp ? gomp : "unset", maps("libdnnl") ? "yes" : "no");
  return 0;
}

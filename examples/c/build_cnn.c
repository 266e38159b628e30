/* Builds a small CNN through ODLA's C API, compiles it and runs it by value ids (C99).
 *
 *   build_cnn [STORE_PATH]
 *
 * The input and weights are a fixed formula; the program prints the class probabilities and
 * the best class, and with STORE_PATH stores the compiled executable there (run_executable.c
 * and odla_tvm.load_executable run it again). Building calls odla-tvm's Python compiler
 * behind the C calls; running is TVM's runtime alone. */
#include <ODLA/odla.h>
#include <math.h>
#include <stdio.h>

#define ID(text) ((odla_value_id)(text))

static float input[1 * 3 * 8 * 8], conv_w[4 * 3 * 3 * 3], conv_b[4], fc_w[64 * 10], fc_b[10];

static void fill(float* data, int count, float scale, int seed) {
  int i;
  for (i = 0; i < count; ++i) data[i] = scale * (float)sin(0.37 * (i + 1) + seed);
}

static odla_value_type tensor(int rank, const odla_int64* dims) {
  odla_value_type type;
  int i;
  type.element_type = ODLA_FLOAT32;
  type.shape.size = rank;
  for (i = 0; i < rank; ++i) type.shape.dims[i] = dims[i];
  return type;
}

static odla_computation build(void) {
  static const odla_int64 input_dims[] = {1, 3, 8, 8}, w_dims[] = {4, 3, 3, 3}, b_dims[] = {4},
                          fc_dims[] = {64, 10}, fcb_dims[] = {1, 10}, flat_dims[] = {1, 64};
  static const odla_uint32 ones[] = {1, 1}, twos[] = {2, 2}, zeros[] = {0, 0};
  odla_computation comp;
  odla_value x, conv, pool, flat, fc;
  odla_value_shape any;
  odla_value_type flat_type = tensor(2, flat_dims), index_type;
  index_type.element_type = ODLA_INT64;
  index_type.shape.size = 0;
  any.size = -1;
  if (odla_CreateComputation(&comp) != ODLA_SUCCESS) return NULL;
  x = odla_CreateArgument(tensor(4, input_dims), ID("input"));
  conv = odla_Conv(x, ODLA_CHANNELS_FIRST, 1,
                   odla_CreateConstant(tensor(4, w_dims), conv_w, ID("conv_w")), ODLA_OIS, ones,
                   ones, ones, ones, odla_CreateConstant(tensor(1, b_dims), conv_b, ID("conv_b")),
                   any, ID("conv"));
  pool = odla_MaxPool(odla_Relu(conv, ID("relu")), ODLA_CHANNELS_FIRST, twos, twos, zeros, zeros,
                      any, ID("pool"));
  flat = odla_Reshape(pool, flat_type.shape, ID("flat"));
  fc = odla_Gemm(flat, 0, odla_CreateConstant(tensor(2, fc_dims), fc_w, ID("fc_w")), 0, 1.0f,
                 1.0f, odla_CreateConstant(tensor(2, fcb_dims), fc_b, ID("fc_b")), any, ID("fc"));
  odla_SetValueAsOutput(odla_Softmax(fc, 1, ID("prob")));
  odla_SetValueAsOutput(odla_ArgMax(fc, 1, 0, 0, index_type, ID("best")));
  return comp;
}

int main(int argc, char** argv) {
  odla_computation comp;
  odla_executable exe;
  odla_context ctx;
  float prob[10];
  odla_int64 best = -1;
  int i;
  fill(input, 192, 1.0f, 0);
  fill(conv_w, 108, 0.3f, 1);
  fill(conv_b, 4, 0.1f, 2);
  fill(fc_w, 640, 0.2f, 3);
  fill(fc_b, 10, 0.1f, 4);
  comp = build();
  if (comp == NULL || odla_CompileComputation(comp, NULL, &exe) != ODLA_SUCCESS) return 1;
  if (odla_CreateContext(&ctx) != ODLA_SUCCESS) return 1;
  odla_BindToArgumentById(ID("input"), input, ctx);
  odla_BindToOutputById(ID("prob"), prob, ctx);
  odla_BindToOutputById(ID("best"), &best, ctx);
  if (odla_LaunchExecutable(exe, ctx) != ODLA_SUCCESS) return 1;
  for (i = 0; i < 10; ++i) printf("%.9g\n", prob[i]);
  printf("best %lld\n", (long long)best);
  if (argc > 1) {
    odla_resource_location location;
    location.location_type = ODLA_LOCATION_PATH;
    location.location = argv[1];
    location.size = 0;
    if (odla_StoreExecutable(location, exe) != ODLA_SUCCESS) return 1;
  }
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(exe);
  odla_DestroyComputation(comp);
  return 0;
}

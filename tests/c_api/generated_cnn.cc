// A model as HALO's compiler generates it: weights are `extern const float` arrays of another
// object, ops take no computation (the thread's current one), ids are string literals, shapes
// go by value with designated initializers, output_dims hints are left uninitialized, and
// every inference binds by id and calls odla_ExecuteComputation (it never compiles itself).
//   generated_cnn N: runs N inferences on `input_data`, prints the last one's outputs.
#include <ODLA/odla.h>

#include <cstdio>
#include <cstdlib>

extern const float input_data[1 * 3 * 8 * 8];
extern const float conv_w[4 * 3 * 3 * 3];
extern const float conv_b[4];
extern const float fc_w[64 * 10];
extern const float fc_b[10];

static odla_computation Comp;

static void generated_cnn_helper() {
  odla_CreateComputation(&Comp);
  auto input = odla_CreateArgument({ODLA_FLOAT32, {.size = 4, .dims = {1, 3, 8, 8}}},
                                   (const odla_value_id)("input"));
  auto w = odla_CreateConstant({ODLA_FLOAT32, {.size = 4, .dims = {4, 3, 3, 3}}}, conv_w,
                               (const odla_value_id) "conv_w");
  auto b = odla_CreateConstant({ODLA_FLOAT32, {.size = 1, .dims = {4}}}, conv_b,
                               (const odla_value_id) "conv_b");
  auto fw = odla_CreateConstant({ODLA_FLOAT32, {.size = 2, .dims = {64, 10}}}, fc_w,
                                (const odla_value_id) "fc_w");
  auto fb = odla_CreateConstant({ODLA_FLOAT32, {.size = 2, .dims = {1, 10}}}, fc_b,
                                (const odla_value_id) "fc_b");
  odla_value_shape hint;  // left uninitialized, as HALO's op tests do
  {
    const odla_uint32 strides[] = {1, 1}, dilations[] = {1, 1}, front[] = {1, 1}, back[] = {1, 1};
    auto conv = odla_Conv(input, ODLA_CHANNELS_FIRST, 1, w, ODLA_OIS, strides, dilations, front,
                          back, b, hint, (const odla_value_id) "conv");
    auto relu = odla_Relu(conv, (const odla_value_id) "relu");
    const odla_uint32 window[] = {2, 2}, pool_strides[] = {2, 2}, zeros[] = {0, 0};
    auto pool = odla_MaxPool(relu, ODLA_CHANNELS_FIRST, window, pool_strides, zeros, zeros, hint,
                             (const odla_value_id) "pool");
    auto flat = odla_Reshape(pool, {.size = 2, .dims = {1, 64}}, (const odla_value_id) "flat");
    auto fc = odla_Gemm(flat, 0, fw, 0, 1.0f, 1.0f, fb, hint, (const odla_value_id) "fc");
    auto prob = odla_Softmax(fc, 1, (const odla_value_id) "prob");
    odla_value_type index_type = {ODLA_INT64, {.size = 1, .dims = {1}}};
    auto best = odla_ArgMax(fc, 1, 0, 0, index_type, (const odla_value_id) "best");
    odla_SetValueAsOutput(prob);
    odla_SetValueAsOutput(best);
  }
}

static void generated_cnn_fini() { odla_DestroyComputation(Comp); }

static int generated_cnn(const float input[1 * 3 * 8 * 8], float out_prob[10],
                         long long out_best[1]) {
  static bool built = false;
  if (!built) {
    generated_cnn_helper();
    built = true;
  }
  static odla_context Ctx;
  if (Ctx == nullptr) odla_CreateContext(&Ctx);
  odla_BindToArgumentById((const odla_value_id) "input", input, Ctx);
  odla_BindToOutputById((const odla_value_id) "prob", out_prob, Ctx);
  odla_BindToOutputById((const odla_value_id) "best", out_best, Ctx);
  return odla_ExecuteComputation(Comp, Ctx, ODLA_COMPUTE_INFERENCE, nullptr);
}

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 1;
  float prob[10];
  long long best[1] = {-1};
  for (int i = 0; i < runs; ++i) {
    int status = generated_cnn(input_data, prob, best);
    if (status != ODLA_SUCCESS) {
      std::printf("status %d\n", status);
      return 1;
    }
  }
  for (float p : prob) std::printf("%.9g\n", p);
  std::printf("best %lld\n", best[0]);
  generated_cnn_fini();
  return 0;
}

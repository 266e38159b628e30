/* Bad input from C: each case prints "<name> <status> <messages>", the status the call returned
 * (for ops: 0 for a value, -1 for NULL) and how many messages ODLA's logger received. The
 * process never aborts.
 *   bad_inputs GOOD.odla TRUNCATED.odla ALTERED.odla FOREIGN_FILE MISSING_FILE OTHER_TVM.odla */
#include <ODLA/odla.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ID(text) ((odla_value_id)(text))

static int messages;

static void count(const char* file, int line, const char* function, odla_log_level level,
                  const char* message) {
  (void)file, (void)line, (void)function, (void)level, (void)message;
  ++messages;
}

static void report(const char* name, int status) {
  printf("%s %d %d\n", name, status, messages);
  messages = 0;
}

static void report_value(const char* name, odla_value value) { report(name, value ? 0 : -1); }

static odla_resource_location path(const char* file) {
  odla_resource_location location;
  location.location_type = ODLA_LOCATION_PATH;
  location.location = file;
  location.size = 0;
  return location;
}

static odla_value_type float_type(int rank) {
  odla_value_type type;
  int i;
  type.element_type = ODLA_FLOAT32;
  type.shape.size = rank;
  for (i = 0; i < ODLA_MAX_DIMENSION; ++i) type.shape.dims[i] = 2;
  return type;
}

static void* op_without_computation(void* unused) {
  static const float data[4] = {1, 2, 3, 4};
  (void)unused;
  report_value("op_in_a_thread_without_computation",
               odla_CreateConstant(float_type(2), data, ID("c")));
  return NULL;
}

int main(int argc, char** argv) {
  odla_executable exe = NULL, bad = NULL;
  odla_context ctx = NULL, gone = NULL, odd = NULL;
  odla_computation comp = NULL;
  odla_value value = NULL, arg;
  odla_value_type type;
  odla_uint32 count_;
  float x[4 * 6], y[4 * 5];
  pthread_t thread;
  odla_bool yes = 1;
  odla_resource_location uri;
  if (argc < 7) return 2;
  memset(x, 0, sizeof x);
  odla_SetLogger(count);
  odla_SetLogLevel(ODLA_LOG_LEVEL_WARN);

  report("load_missing_file", odla_LoadExecutable(path(argv[5]), NULL, &bad));
  report("load_truncated_file", odla_LoadExecutable(path(argv[2]), NULL, &bad));
  report("load_altered_file", odla_LoadExecutable(path(argv[3]), NULL, &bad));
  report("load_foreign_file", odla_LoadExecutable(path(argv[4]), NULL, &bad));
  report("load_other_tvms_file", odla_LoadExecutable(path(argv[6]), NULL, &bad));
  report("load_null_path", odla_LoadExecutable(path(NULL), NULL, &bad));
  uri = path(argv[1]);
  uri.location_type = ODLA_LOCATION_URI;
  report("load_from_uri", odla_LoadExecutable(uri, NULL, &bad));
  report("load_null_result", odla_LoadExecutable(path(argv[1]), NULL, NULL));
  report("load_good", odla_LoadExecutable(path(argv[1]), NULL, &exe));

  report("create_context_null", odla_CreateContext(NULL));
  odla_CreateContext(&ctx);
  report("launch_null_executable", odla_LaunchExecutable(NULL, ctx));
  report("launch_null_context", odla_LaunchExecutable(exe, NULL));
  report("launch_unbound_argument", odla_LaunchExecutable(exe, ctx));
  report("bind_null_id", odla_BindToArgumentById(NULL, x, ctx));
  report("bind_null_data", odla_BindToArgumentById(ID("x"), NULL, ctx));
  odla_CreateContext(&odd);
  report("bind_unknown_id", odla_BindToArgumentById(ID("no such id"), x, odd));
  report("launch_with_unknown_id_only", odla_LaunchExecutable(exe, odd));
  odla_BindToArgumentById(ID("x"), x, odd);
  odla_BindToOutputById(ID("y"), y, odd);
  report("launch_with_an_unknown_id_beside", odla_LaunchExecutable(exe, odd));
  odla_DestroyContext(odd);
  report("arg_index_out_of_range", odla_GetArgFromExecutableByIdx(exe, 7, &arg));
  report("num_args_null", odla_GetNumOfArgsFromExecutable(exe, NULL));
  odla_GetArgFromExecutableByIdx(exe, 0, &arg);
  report("runtime_shape_rank_11", odla_SetRuntimeShape(ctx, arg, float_type(11).shape));
  odla_BindToArgumentById(ID("x"), x, ctx);
  odla_BindToOutputById(ID("y"), y, ctx);
  report("launch_good", odla_LaunchExecutable(exe, ctx));
  report("async_with_constants_array",
         odla_AsyncLaunchExecutable(exe, (odla_constants_array)&yes, ctx, ODLA_COMPUTE_DEFAULT,
                                    NULL));
  report("launch_training_mode",
         odla_AsyncLaunchExecutable(exe, NULL, ctx, ODLA_COMPUTE_TRAINING, NULL));
  report("launch_foreign_device",
         odla_AsyncLaunchExecutable(exe, NULL, ctx, ODLA_COMPUTE_INFERENCE, (odla_device)&yes));
  report("store_to_missing_directory", odla_StoreExecutable(path("/nonexistent/dir/x.odla"), exe));
  odla_CreateContext(&gone);
  odla_DestroyContext(gone);
  report("destroyed_context", odla_LaunchExecutable(exe, gone));
  report("destroy_context_twice", odla_DestroyContext(gone));
  report("destroy_executable", odla_DestroyExecutable(exe));
  report("destroyed_executable", odla_LaunchExecutable(exe, ctx));

  /* the build path */
  pthread_create(&thread, NULL, op_without_computation, NULL);
  pthread_join(thread, NULL);
  report("create_computation_null", odla_CreateComputation(NULL));
  report("create_computation", odla_CreateComputation(&comp));
  report_value("argument_rank_11", odla_CreateArgument(float_type(11), ID("a11")));
  type = float_type(2);
  type.element_type = (odla_element_type)99;
  report_value("argument_bad_element_type", odla_CreateArgument(type, ID("bad_type")));
  report_value("constant_null_data", odla_CreateConstant(float_type(2), NULL, ID("c0")));
  type.element_type = ODLA_BOOL;
  value = odla_CreateArgument(type, ID("flags"));
  report_value("bool_argument", value);
  report_value("sqrt_of_bool", odla_Sqrt(value, ID("sqrt")));
  report_value("relu_of_null", odla_Relu(NULL, ID("relu")));
  report_value("conv_of_rank_2",
               odla_Conv(value, ODLA_CHANNELS_FIRST, 1, value, ODLA_OIS, NULL, NULL, NULL, NULL,
                         NULL, float_type(2).shape, ID("conv")));
  report("find_unknown_id", odla_FindValueById(ID("no such id"), &value));
  report("type_of_unknown_id", odla_GetValueTypeById(ID("no such id"), &type));
  report("output_by_unknown_id", odla_SetValueAsOutputById(ID("no such id")));
  report("item_vendor_sim_mode", odla_SetComputationItem(comp, ODLA_USE_SIM_MODE,
                                                         (odla_item_value)&yes));
  report("item_quant_table", odla_SetComputationItem(comp, ODLA_QUANT_TABLE,
                                                     (odla_item_value)&yes));
  report("item_unknown", odla_SetComputationItem(comp, (odla_item_type)77, (odla_item_value)&yes));
  report("outputs_of_null", odla_GetNumOfOutputsFromComputation(NULL, &count_));
  report("execute_without_outputs", odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_INFERENCE,
                                                            NULL));
  report("destroy_computation", odla_DestroyComputation(comp));
  report("destroy_context", odla_DestroyContext(ctx));
  printf("done\n");
  return 0;
}

/* Handles, ids and threads as careless or hostile callers use them: each run does one case and
 * prints what its calls returned (statuses, then any values), for tests/test_c_api_hostile.py,
 * which runs each case in its own process (under the sanitizers too).
 *   hostile_handles CASE A.odla B.odla
 * A: x float32 (4, 6) -> y (4, 5), y = x @ ones; B: x and z (4, 5) -> y = x @ ones + z. */
#define _GNU_SOURCE
#include <ODLA/odla.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ID(text) ((odla_value_id)(text))

/* in HALO's platforms, not in ODLA 0.5's headers */
odla_status odla_SetActiveComputation(odla_computation computation);

static const char* a_path;
static const char* b_path;
static float x[4 * 6], z[4 * 5], y[4 * 5];

/* Fails the library's thread starts while set: a process out of threads. */
static volatile int fail_thread_starts;
typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                   void* arg) {
  create_fn next;
  if (fail_thread_starts) return EAGAIN;
  *(void**)&next = dlsym(RTLD_NEXT, "pthread_create");
  return next(thread, attr, start, arg);
}

static odla_executable load(const char* file) {
  odla_resource_location location = {ODLA_LOCATION_PATH, NULL, 0};
  odla_executable exe = NULL;
  location.location = file;
  if (odla_LoadExecutable(location, NULL, &exe) != ODLA_SUCCESS) printf("load-failed ");
  return exe;
}

static odla_context bound_context(void) {
  odla_context ctx = NULL;
  odla_CreateContext(&ctx);
  odla_BindToArgumentById(ID("x"), x, ctx);
  odla_BindToOutputById(ID("y"), y, ctx);
  return ctx;
}

static void show(int status) { printf("%d ", status); }

/* A context launched with A, A destroyed, B (more arguments) launched on it. */
static void context_outlives_executable(void) {
  odla_executable a = load(a_path), b;
  odla_context ctx = bound_context();
  show(odla_LaunchExecutable(a, ctx));
  show(odla_DestroyExecutable(a));
  b = load(b_path);
  odla_BindToArgumentById(ID("z"), z, ctx);
  show(odla_LaunchExecutable(b, ctx));
  printf("%g ", y[0]);
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(b);
}

static void bind_value_of_destroyed_executable(void) {
  odla_executable a = load(a_path);
  odla_context ctx = bound_context();
  odla_value arg = NULL, out = NULL;
  odla_GetArgFromExecutableByIdx(a, 0, &arg);
  odla_GetOutputFromExecutableByIdx(a, 0, &out);
  odla_DestroyExecutable(a);
  show(odla_BindToArgument(arg, x, ctx));
  show(odla_BindToOutput(out, y, ctx));
  odla_DestroyContext(ctx);
}

static void runtime_outputs_of_destroyed_executable(void) {
  odla_executable a = load(a_path);
  odla_context ctx = bound_context();
  odla_uint32 count = 99;
  show(odla_LaunchExecutable(a, ctx));
  show(odla_GetRuntimeNumOfOutputs(ctx, &count));
  printf("%u ", count);
  odla_DestroyExecutable(a);
  show(odla_GetRuntimeNumOfOutputs(ctx, &count));
  printf("%u ", count);
  odla_DestroyContext(ctx);
}

static void destroy_computation_twice(void) {
  odla_computation comp = NULL;
  odla_value_type type;
  odla_value v;
  memset(&type, 0, sizeof type);
  type.element_type = ODLA_FLOAT32;
  type.shape.size = 1;
  type.shape.dims[0] = 2;
  show(odla_CreateComputation(&comp));
  v = odla_CreateArgument(type, ID("v"));
  show(odla_DestroyComputation(comp));
  show(odla_DestroyComputation(comp));
  show(odla_GetValueType(v, &type));
  show(odla_SetActiveComputation(comp));
  printf("%d ", odla_Relu(v, ID("r")) == NULL);
}

/* Each kind destroyed, then used or destroyed again. */
static void stale_handles(void) {
  odla_executable a = load(a_path);
  odla_context ctx = NULL;
  odla_device device = NULL;
  odla_device_config config = NULL;
  odla_device_trace trace = NULL;
  odla_uint32 n;
  odla_value arg = NULL;
  odla_GetArgFromExecutableByIdx(a, 0, &arg);
  odla_DestroyExecutable(a);
  show(odla_GetNumOfArgsFromExecutable(a, &n));
  show(odla_DestroyExecutable(a));
  odla_value_id id;
  show(odla_GetValueId(arg, &id));
  odla_CreateContext(&ctx);
  odla_DestroyContext(ctx);
  show(odla_BindToArgumentById(ID("x"), x, ctx));
  show(odla_DestroyContext(ctx));
  odla_AllocateDevice(NULL, ODLA_DEVICE_DEFAULT, 0, &device);
  odla_DestroyDevice(device);
  show(odla_InitDevice(device, NULL));
  show(odla_DestroyDevice(device));
  odla_CreateDeviceConfig(&config);
  odla_DestroyDeviceConfig(config);
  show(odla_DestroyDeviceConfig(config));
  odla_CreateDeviceTrace(&trace);
  odla_ReleaseDeviceTrace(trace);
  show(odla_ReleaseDeviceTrace(trace));
}

/* Pointers this library never gave, and one kind's handle given as another. */
static void foreign_handles(void) {
  long long junk[64];
  void* foreign = junk;
  odla_context ctx = NULL;
  odla_executable a = load(a_path);
  odla_uint32 n;
  odla_value_type type;
  memset(junk, 0xA5, sizeof junk);
  odla_CreateContext(&ctx);
  show(odla_SetActiveComputation((odla_computation)foreign));
  show(odla_DestroyComputation((odla_computation)foreign));
  show(odla_GetValueType((odla_value)foreign, &type));
  show(odla_BindToArgument((odla_value)foreign, x, ctx));
  show(odla_GetNumOfArgsFromExecutable((odla_executable)foreign, &n));
  show(odla_LaunchExecutable((odla_executable)ctx, ctx));
  show(odla_LaunchExecutable(a, (odla_context)a));
  show(odla_DestroyContext((odla_context)foreign));
  show(odla_InitDevice((odla_device)foreign, NULL));
  show(odla_DestroyDeviceConfig((odla_device_config)foreign));
  show(odla_ReleaseDeviceTrace((odla_device_trace)foreign));
  show(odla_ReleaseDeviceTrace((odla_device_trace)ctx));
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(a);
}

static void* destroy_context(void* ctx) {
  return (void*)(long)odla_DestroyContext((odla_context)ctx);
}

/* Two threads destroy one context, many times: one succeeds each time. */
static void concurrent_destroys(void) {
  int i, succeeded = 0, refused = 0;
  for (i = 0; i < 200; ++i) {
    odla_context ctx = NULL;
    pthread_t first, second;
    void *r1, *r2;
    odla_CreateContext(&ctx);
    pthread_create(&first, NULL, destroy_context, ctx);
    pthread_create(&second, NULL, destroy_context, ctx);
    pthread_join(first, &r1);
    pthread_join(second, &r2);
    succeeded += ((long)r1 == ODLA_SUCCESS) + ((long)r2 == ODLA_SUCCESS);
    refused += ((long)r1 == ODLA_INVALID_PARAM) + ((long)r2 == ODLA_INVALID_PARAM);
  }
  printf("%d %d ", succeeded, refused);
}

static volatile int finished_runs;
static int count_run(void* arg, odla_status status) {
  (void)arg;
  if (status == ODLA_SUCCESS) __sync_fetch_and_add(&finished_runs, 1);
  return 0;
}

/* Asynchronous runs under way while the caller rebinds, destroys the executable, then
 * the context (from another thread). */
static void destroy_during_async_runs(void) {
  odla_executable a = load(a_path);
  odla_context ctx = bound_context();
  static float x2[4 * 6];
  int i, failed = 0;
  pthread_t destroyer;
  void* result;
  odla_SetContextItem(ctx, ODLA_ASYNC_CALLBACK_FUNC, (odla_item_value)count_run);
  for (i = 0; i < 40; ++i) {
    failed += odla_AsyncLaunchExecutable(a, NULL, ctx, ODLA_COMPUTE_INFERENCE, NULL) != 0;
    failed += odla_BindToArgumentById(ID("x"), i % 2 ? x : x2, ctx) != 0;
  }
  show(odla_DestroyExecutable(a));
  pthread_create(&destroyer, NULL, destroy_context, ctx);
  pthread_join(destroyer, &result);
  show((int)(long)result);
  printf("%d %d ", failed, finished_runs);
}

static void thread_start_fails(void) {
  odla_executable a = load(a_path);
  odla_context ctx = bound_context();
  fail_thread_starts = 1;
  show(odla_AsyncLaunchExecutable(a, NULL, ctx, ODLA_COMPUTE_INFERENCE, NULL));
  fail_thread_starts = 0;
  alarm(30); /* a destroy that waits for the run never started ends the process */
  show(odla_DestroyContext(ctx));
  odla_DestroyExecutable(a);
}

static void misspelt_output_id(void) {
  odla_executable a = load(a_path);
  odla_context ctx = NULL;
  odla_CreateContext(&ctx);
  odla_BindToArgumentById(ID("x"), x, ctx);
  odla_BindToOutputById(ID("Y"), y, ctx);
  show(odla_LaunchExecutable(a, ctx));
  odla_BindToOutputById(ID("y"), y, ctx);
  show(odla_LaunchExecutable(a, ctx)); /* "Y" is still bound */
  odla_DestroyContext(ctx);
  ctx = bound_context();
  show(odla_LaunchExecutable(a, ctx));
  printf("%g ", y[0]);
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(a);
}

/* HALO's DeConv test leaves its layouts uninitialized: whatever int they hold, the op takes
 * its defaults (CHANNELS_FIRST input, IOS kernel). */
static void deconv_stray_layouts(void) {
  static const odla_uint32 one[2] = {1, 1}, zero[2] = {0, 0};
  static float ones[18], out[2 * 25];
  odla_computation comp = NULL;
  odla_context ctx = NULL;
  odla_value_type type;
  odla_value_shape unset;
  odla_value in, w, y_value;
  odla_memory_layout stray = (odla_memory_layout)0xA5A5A5A5;
  size_t i;
  for (i = 0; i < 18; ++i) ones[i] = 1;
  memset(&type, 0, sizeof type);
  type.element_type = ODLA_FLOAT32;
  type.shape.size = 4;
  type.shape.dims[0] = type.shape.dims[1] = 1;
  type.shape.dims[2] = type.shape.dims[3] = 3;
  odla_CreateComputation(&comp);
  in = odla_CreateArgument(type, ID("x"));
  type.shape.dims[1] = 2;
  w = odla_CreateArgument(type, ID("w"));
  memset(&unset, 0, sizeof unset);
  y_value = odla_DeConv(in, stray, 1, w, stray, one, one, zero, zero, NULL, unset, ID("y"));
  printf("%d ", y_value != NULL);
  odla_SetValueAsOutput(y_value);
  odla_CreateContext(&ctx);
  odla_BindToArgumentById(ID("x"), ones, ctx);
  odla_BindToArgumentById(ID("w"), ones, ctx);
  odla_BindToOutputById(ID("y"), out, ctx);
  show(odla_ExecuteComputation(comp, ctx, ODLA_COMPUTE_INFERENCE, NULL));
  printf("%g %g ", out[0], out[12]);
  odla_DestroyContext(ctx);
  odla_DestroyComputation(comp);
}

static void unknown_argument_id_beside(void) {
  odla_executable a = load(a_path);
  odla_context ctx = bound_context();
  odla_BindToArgumentById(ID("w"), z, ctx);
  show(odla_LaunchExecutable(a, ctx));
  odla_DestroyContext(ctx);
  odla_DestroyExecutable(a);
}

int main(int argc, char** argv) {
  static const struct {
    const char* name;
    void (*run)(void);
  } cases[] = {
      {"context_outlives_executable", context_outlives_executable},
      {"bind_value_of_destroyed_executable", bind_value_of_destroyed_executable},
      {"runtime_outputs_of_destroyed_executable", runtime_outputs_of_destroyed_executable},
      {"destroy_computation_twice", destroy_computation_twice},
      {"stale_handles", stale_handles},
      {"foreign_handles", foreign_handles},
      {"concurrent_destroys", concurrent_destroys},
      {"destroy_during_async_runs", destroy_during_async_runs},
      {"thread_start_fails", thread_start_fails},
      {"misspelt_output_id", misspelt_output_id},
      {"unknown_argument_id_beside", unknown_argument_id_beside},
      {"deconv_stray_layouts", deconv_stray_layouts},
  };
  size_t i;
  if (argc < 4) return 2;
  a_path = argv[2];
  b_path = argv[3];
  for (i = 0; i < 4 * 6; ++i) x[i] = 1;
  for (i = 0; i < 4 * 5; ++i) z[i] = 1;
  odla_SetLogLevel(ODLA_LOG_LEVEL_OFF);
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    if (strcmp(argv[1], cases[i].name) == 0) {
      cases[i].run();
      printf("\n");
      return 0;
    }
  return 2;
}

/* CPU microseconds per odla_LaunchExecutable of a stored executable with one (1, 4) float32
 * argument "x" and one output, rebinding both before every launch as HALO's generated code
 * does: the fastest of 7 loops of CALLS launches.   c_launch_cost EXE [CALLS] */
#define _POSIX_C_SOURCE 199309L
#include <ODLA/odla.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  odla_resource_location location = {ODLA_LOCATION_PATH, NULL, 0};
  odla_executable exe;
  odla_context ctx;
  odla_value out;
  odla_value_id out_id;
  float x[4] __attribute__((aligned(64))) = {1, 1, 1, 1}, y[4];
  int calls = argc > 2 ? atoi(argv[2]) : 20000, i, loop;
  double best = 1e30;
  if (argc < 2) return 2;
  location.location = argv[1];
  if (odla_LoadExecutable(location, NULL, &exe) || odla_CreateContext(&ctx)) return 1;
  odla_GetOutputFromExecutableByIdx(exe, 0, &out);
  odla_GetValueId(out, &out_id);
  for (loop = -1; loop < 7; ++loop) { /* loop -1 warms up */
    double start = cpu_seconds();
    for (i = 0; i < calls; ++i) {
      odla_BindToArgumentById((odla_value_id) "x", x, ctx);
      odla_BindToOutputById(out_id, y, ctx);
      if (odla_LaunchExecutable(exe, ctx) != ODLA_SUCCESS) return 1;
    }
    if (loop >= 0 && (cpu_seconds() - start) / calls < best) best = (cpu_seconds() - start) / calls;
  }
  printf("%.3f\n", best * 1e6);
  return y[0] == 2.0f ? 0 : 1;
}

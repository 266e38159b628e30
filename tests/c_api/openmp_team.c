/* Runs teams through libgomp's entry points as libdnnl calls them (GOMP_parallel_start, the
   master's own call, GOMP_parallel_end; static worksharing loops; barriers; nested regions)
   and prints what each member saw. Run with the argument "pool", it first points its own
   imports of them at odla-tvm's thread pool (as the pool does libdnnl's): the two runs'
   outputs must be equal. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void GOMP_parallel_start(void (*fn)(void *), void *data, unsigned num_threads);
void GOMP_parallel_end(void);
void GOMP_barrier(void);
bool GOMP_loop_static_start(long start, long end, long incr, long chunk, long *istart,
                            long *iend);
bool GOMP_loop_static_next(long *istart, long *iend);
void GOMP_loop_end_nowait(void);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
int omp_in_parallel(void);
int omp_get_max_threads(void);
void omp_set_num_threads(int count);
int odla_pool_adopt_openmp(const char *object);

enum { kMembers = 8, kIterations = 1200 };

struct Job {
  long start, end, incr, chunk;
  int owner[kIterations];
  int visits[kIterations];
  int size[kMembers], in_parallel[kMembers], nested[kMembers], after_barrier[kMembers];
  int arrived;
};

static void nested_body(void *data) {
  int *sizes = data;
  sizes[omp_get_thread_num()] = omp_get_num_threads();
}

static void body(void *data) {
  struct Job *job = data;
  int me = omp_get_thread_num();
  job->size[me] = omp_get_num_threads();
  job->in_parallel[me] = omp_in_parallel();
  long first, last;
  if (GOMP_loop_static_start(job->start, job->end, job->incr, job->chunk, &first, &last)) {
    do {
      for (long i = first; job->incr > 0 ? i < last : i > last; i += job->incr) {
        long index = (i - job->start) / job->incr;
        job->owner[index] = me + 1;
        __atomic_add_fetch(&job->visits[index], 1, __ATOMIC_RELAXED);
      }
    } while (GOMP_loop_static_next(&first, &last));
  }
  GOMP_loop_end_nowait();
  __atomic_add_fetch(&job->arrived, 1, __ATOMIC_SEQ_CST);
  GOMP_barrier();
  job->after_barrier[me] = __atomic_load_n(&job->arrived, __ATOMIC_SEQ_CST);
  GOMP_barrier();
  int sizes[kMembers] = {0};
  GOMP_parallel_start(nested_body, sizes, 2);
  nested_body(sizes);
  GOMP_parallel_end();
  job->nested[me] = sizes[0] * 10 + sizes[1];
}

static void run(long start, long end, long incr, long chunk, unsigned members) {
  static struct Job job;
  memset(&job, 0, sizeof(job));
  job.start = start, job.end = end, job.incr = incr, job.chunk = chunk;
  GOMP_parallel_start(body, &job, members);
  body(&job);
  GOMP_parallel_end();
  long count = incr > 0 ? (end > start ? (end - start + incr - 1) / incr : 0)
                        : (start > end ? (start - end - incr - 1) / -incr : 0);
  printf("loop %ld %ld %ld %ld on %u:", start, end, incr, chunk, members);
  for (long i = 0; i < count; ++i) printf(" %d/%d", job.owner[i], job.visits[i]);
  printf("\n members");
  for (unsigned m = 0; m < members; ++m)
    printf(" [%d %d %d %d]", job.size[m], job.in_parallel[m], job.after_barrier[m],
           job.nested[m]);
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "pool") == 0)
    fprintf(stderr, "adopted %d\n", odla_pool_adopt_openmp(NULL));
  printf("outside %d %d %d\n", omp_get_thread_num(), omp_get_num_threads(), omp_in_parallel());
  omp_set_num_threads(3);
  printf("max %d\n", omp_get_max_threads());
  const long loops[][4] = {{0, 1000, 1, 0},  {0, 1000, 1, 7}, {5, 1000, 3, 0},
                           {1000, 0, -1, 0}, {1000, 3, -4, 5}, {0, 0, 1, 0},
                           {0, 2, 1, 0},     {7, 3, 1, 0},    {0, 31, 2, 4}};
  const unsigned teams[] = {1, 2, 3, 5};
  for (unsigned t = 0; t < sizeof(teams) / sizeof(teams[0]); ++t)
    for (unsigned l = 0; l < sizeof(loops) / sizeof(loops[0]); ++l)
      run(loops[l][0], loops[l][1], loops[l][2], loops[l][3], teams[t]);
  run(0, 100, 1, 0, 0); /* 0: as many as omp_set_num_threads asked */
  return 0;
}

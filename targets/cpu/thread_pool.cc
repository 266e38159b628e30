// One thread pool per process for the parallel work of CPU model libraries: TVM's parallel
// loops (parallel_launch.cc points each library's launch here) and oneDNN's OpenMP regions
// (odla_pool_adopt_openmp points libdnnl's imports of libgomp's entry points at this file's).
// Built once into libodla_threads.so, which model libraries open by its path.
//
// Why not TVM's pool and libgomp's: two pools hand the cores back and forth inside every run,
// and each wait spins. Beside a thread that spins on a core (NumPy's OpenBLAS after a matmul,
// onnxruntime's pool after its run), a spinning waiter takes the core from the very thread it
// waits for, and a static split waits a time slice at each barrier (docs/performance.md).
// Here one set of workers runs both; TVM's loops are cut into more tasks than threads that the
// caller drains, so that what a late worker has not started, the caller runs; and waits spin
// only while no other thread runs on the machine: where one does, waiters sleep at once, and a
// woken thread takes its core back from the spinner.
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct ParallelGroupEnv {  // TVM's TVMParallelGroupEnv (c_backend_api.h)
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, ParallelGroupEnv* penv, void* cdata);

// A loop left to the launch is cut into this many tasks per thread: more lets the caller take
// over a late worker's share, at the cost of a loop entry per task.
constexpr int kTasksPerThread = 4;
// How long an idle thread spins on a quiet machine before it sleeps: longer than the gap
// between a model's kernels and between two calls of a model.
constexpr int64_t kSpinNs = 300000;
// How often a job's start looks at the machine again (reading /proc/loadavg takes a few us).
constexpr int64_t kDecideNs = 2000000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

int usable_cores() {
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof(cores), &cores) == 0) return CPU_COUNT(&cores);
  return static_cast<int>(std::thread::hardware_concurrency());
}

// TVM_NUM_THREADS, else the cores this process may run on.
int default_threads() {
  static const int count = [] {
    const char* value = std::getenv("TVM_NUM_THREADS");
    int asked = value != nullptr ? std::atoi(value) : 0;
    return asked > 0 ? asked : std::max(1, usable_cores());
  }();
  return count;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// The wait policy, from OpenMP's setting: ACTIVE spins always, PASSIVE sleeps at once, else
// (unset) spin while no other thread runs on the machine.
enum class Policy { kAuto, kActive, kPassive };

Policy policy() {
  static const Policy chosen = [] {
    const char* value = std::getenv("OMP_WAIT_POLICY");
    if (value == nullptr) return Policy::kAuto;
    if (strcasecmp(value, "active") == 0) return Policy::kActive;
    if (strcasecmp(value, "passive") == 0) return Policy::kPassive;
    return Policy::kAuto;
  }();
  return chosen;
}

// Threads running on the machine now, this one included (the 4th field of /proc/loadavg,
// "running/total"); -1 where it cannot be read or counts CPUs this process cannot use (a
// container limited to some of the host's cores sees the host's count).
int running_threads() {
  static const int file = get_nprocs() == usable_cores()
                              ? open("/proc/loadavg", O_RDONLY | O_CLOEXEC) : -1;
  if (file < 0) return -1;
  char text[128];
  ssize_t size = pread(file, text, sizeof(text) - 1, 0);
  if (size <= 0) return -1;
  text[size] = '\0';
  const char* slash = std::strchr(text, '/');
  if (slash == nullptr) return -1;
  const char* digits = slash;
  while (digits > text && digits[-1] >= '0' && digits[-1] <= '9') --digits;
  return digits == slash ? -1 : std::atoi(digits);
}

std::atomic<bool> spinning{true};  // whether waits spin now
std::atomic<int64_t> decided_at{INT64_MIN / 2};

// At the start of a job, now and then: whether threads other than this one and the pool's
// ``awake`` workers run on the machine.
void decide_policy(int awake) {
  if (policy() != Policy::kAuto) {
    spinning.store(policy() == Policy::kActive, std::memory_order_relaxed);
    return;
  }
  int64_t now = now_ns();
  if (now - decided_at.load(std::memory_order_relaxed) < kDecideNs) return;
  decided_at.store(now, std::memory_order_relaxed);
  int running = running_threads();
  spinning.store(running < 0 || running - 1 - awake <= 0, std::memory_order_relaxed);
}

// Waits until ``word`` differs from ``seen``: spinning for a while when the policy says so,
// then asleep (``sleepers`` counts the threads a change must wake).
void wait_change(std::atomic<uint32_t>& word, uint32_t seen, std::atomic<int>& sleepers) {
  if (spinning.load(std::memory_order_relaxed)) {
    int64_t until = now_ns() + kSpinNs;
    for (int poll = 1; word.load(std::memory_order_acquire) == seen; ++poll) {
      __builtin_ia32_pause();
      if (poll % 64 == 0 && (now_ns() > until || !spinning.load(std::memory_order_relaxed)))
        break;
    }
  }
  if (word.load() == seen) {
    sleepers.fetch_add(1);
    while (word.load() == seen) futex_wait(&word, seen);
    sleepers.fetch_sub(1);
  }
}

void changed(std::atomic<uint32_t>& word, std::atomic<int>& sleepers) {
  word.fetch_add(1);
  if (sleepers.load() > 0) futex_wake_all(&word);
}

// What omp_get_thread_num and its kin answer on a thread: its place in the team it runs in.
struct TeamPlace {
  int id = 0;
  int size = 1;
  long trip = 0;  // GOMP's static_trip for the current worksharing loop
  long next = 0, end = 0, incr = 1, chunk = 0;
  TeamPlace* outer = nullptr;
};
thread_local TeamPlace* place = nullptr;
thread_local int wanted_threads = 0;  // omp_set_num_threads on this thread; 0: the default

class Pool {
 public:
  // Runs ``fn(data)`` as members 1..size-1 of a team (the caller runs member 0 itself, between
  // this and end_team). One team at a time: another thread's team waits for this one.
  void start_team(void (*fn)(void*), void* data, int size) {
    team_mutex_.lock();
    publish([&] {
      grow(size - 1);
      team_fn_ = fn;
      team_data_ = data;
      team_size_.store(size, std::memory_order_relaxed);
      tasks_.store(0, std::memory_order_relaxed);
      done_.store(0);
      barrier_count_.store(0);
      teams_run_.fetch_add(1, std::memory_order_relaxed);
    });
  }

  void end_team() {
    int members = team_size_.load(std::memory_order_relaxed) - 1;
    for (uint32_t done = done_.load(); static_cast<int>(done) < members; done = done_.load())
      wait_change(done_, done, done_sleepers_);
    team_size_.store(0, std::memory_order_relaxed);
    team_mutex_.unlock();
  }

  // The team barrier (GOMP_barrier): every member waits until all have arrived.
  void barrier(int size) {
    uint32_t round = barrier_round_.load();
    if (static_cast<int>(barrier_count_.fetch_add(1)) + 1 == size) {
      barrier_count_.store(0);
      changed(barrier_round_, barrier_sleepers_);
      return;
    }
    wait_change(barrier_round_, round, barrier_sleepers_);
  }

  // TVM's launch: tasks 0..num_task-1, each run once by whichever thread takes it.
  int launch(ParallelLambda lambda, void* cdata, int num_task) {
    if (num_task <= 0) num_task = default_threads() * kTasksPerThread;
    // Another thread's job, or a launch from inside a task: its tasks run here, in turn.
    if (default_threads() <= 1 || num_task == 1 || !team_mutex_.try_lock())
      return run_inline(lambda, cdata, num_task);
    publish([&] {
      grow(default_threads() - 1);
      lambda_ = lambda;
      cdata_ = cdata;
      env_.num_task = num_task;
      failed_.store(false, std::memory_order_relaxed);
      team_size_.store(0, std::memory_order_relaxed);
      tasks_.store(num_task);
    });
    take_tasks();
    // A worker counts in running_ from before it takes a task, so none is left running one.
    for (uint32_t running = running_.load(); running != 0; running = running_.load())
      wait_change(running_, running, done_sleepers_);
    bool failed = failed_.load(std::memory_order_relaxed);
    team_mutex_.unlock();
    return failed ? -1 : 0;
  }

  // A forked child has none of the workers: it forgets them and starts its own when needed.
  void forget_workers() {
    for (std::thread& worker : workers_) worker.detach();
    workers_.clear();
    running_.store(0);
    job_sleepers_.store(0);
    done_sleepers_.store(0);
    barrier_sleepers_.store(0);
    new (&team_mutex_) std::mutex();
    new (&job_mutex_) std::mutex();
  }

  int64_t teams() const { return teams_run_.load(); }

 private:
  // Sets a job's fields with ``fill`` and counts it, under the mutex workers read both under,
  // then wakes them.
  template <typename Fill>
  void publish(Fill fill) {
    decide_policy(static_cast<int>(workers_.size()) - job_sleepers_.load());
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      fill();
      job_.fetch_add(1);
    }
    if (job_sleepers_.load() > 0) futex_wake_all(&job_);
  }

  static int run_inline(ParallelLambda lambda, void* cdata, int num_task) {
    ParallelGroupEnv env{nullptr, num_task};
    int status = 0;
    for (int task = 0; task < num_task; ++task)
      if (lambda(task, &env, cdata) != 0) status = -1;
    return status;
  }

  // Called while a job is filled in: a new worker's first job is the one being published.
  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers) {
      int member = static_cast<int>(workers_.size()) + 1;
      uint32_t before = job_.load();
      workers_.emplace_back([this, member, before] { work(member, before); });
    }
  }

  void take_tasks() {
    for (int left = tasks_.load(); left > 0; left = tasks_.load()) {
      if (!tasks_.compare_exchange_weak(left, left - 1)) continue;
      if (lambda_(left - 1, &env_, cdata_) != 0) failed_.store(true, std::memory_order_relaxed);
    }
  }

  void work(int member, uint32_t seen) {
    for (;;) {
      wait_change(job_, seen, job_sleepers_);
      // A job and its count are read together, under the mutex that publishes them (the
      // publisher holds it a moment: spin for it rather than sleep); a team keeps its fields
      // until its members are done, a launch until running_ is zero.
      for (int poll = 0; !job_mutex_.try_lock(); ++poll)
        if (poll < 4096) __builtin_ia32_pause(); else std::this_thread::yield();
      seen = job_.load();
      int size = team_size_.load(std::memory_order_relaxed);
      if (size == 0) running_.fetch_add(1);
      job_mutex_.unlock();
      if (size == 0) {
        take_tasks();
        if (running_.fetch_sub(1) == 1 && done_sleepers_.load() > 0) futex_wake_all(&running_);
      } else if (member < size) {
        TeamPlace here;
        here.id = member;
        here.size = size;
        place = &here;
        team_fn_(team_data_);
        place = nullptr;
        changed(done_, done_sleepers_);
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex team_mutex_;  // held by the thread whose job runs
  std::mutex job_mutex_;   // publishes a job's fields
  std::atomic<uint32_t> job_{0};
  std::atomic<int> job_sleepers_{0};
  // A team's
  void (*team_fn_)(void*) = nullptr;
  void* team_data_ = nullptr;
  std::atomic<int> team_size_{0};  // 0: the job is a launch's tasks
  std::atomic<uint32_t> done_{0};
  std::atomic<int> done_sleepers_{0};
  std::atomic<uint32_t> barrier_count_{0};
  std::atomic<uint32_t> barrier_round_{0};
  std::atomic<int> barrier_sleepers_{0};
  std::atomic<int64_t> teams_run_{0};
  // A launch's
  ParallelLambda lambda_ = nullptr;
  void* cdata_ = nullptr;
  ParallelGroupEnv env_{nullptr, 0};
  std::atomic<int> tasks_{0};
  std::atomic<uint32_t> running_{0};
  std::atomic<bool> failed_{false};
};

// Never destroyed: the library stays loaded (-z nodelete) and its workers with it.
Pool& pool() {
  static Pool* instance = [] {
    pthread_atfork(nullptr, nullptr, [] { pool().forget_workers(); });
    return new Pool();
  }();
  return *instance;
}

// GOMP's static schedule (libgomp's gomp_iter_static_next): one block per member when
// ``chunk`` is 0, else chunks dealt in turn; false when this member has no more.
bool static_next(TeamPlace& p, long* start, long* end) {
  if (p.trip == -1) return false;
  if (p.size == 1) {
    *start = p.next;
    *end = p.end;
    p.trip = -1;
    return p.next != p.end;
  }
  unsigned long n = static_cast<unsigned long>(
      (p.end - p.next + p.incr + (p.incr > 0 ? -1 : 1)) / p.incr);
  unsigned long size = static_cast<unsigned long>(p.size), id = static_cast<unsigned long>(p.id);
  unsigned long s0, e0;
  if (p.chunk == 0) {
    if (p.trip > 0) return false;
    unsigned long q = n / size, t = n % size;
    if (id < t) {
      t = 0;
      ++q;
    }
    s0 = q * id + t;
    e0 = s0 + q;
    if (s0 >= e0) {
      p.trip = 1;
      return false;
    }
    p.trip = e0 == n ? -1 : 1;
  } else {
    unsigned long c = static_cast<unsigned long>(p.chunk);
    s0 = (static_cast<unsigned long>(p.trip) * size + id) * c;
    if (s0 >= n) return false;
    e0 = std::min(s0 + c, n);
    p.trip = e0 == n ? -1 : p.trip + 1;
  }
  *start = static_cast<long>(s0) * p.incr + p.next;
  *end = static_cast<long>(e0) * p.incr + p.next;
  return true;
}

thread_local TeamPlace solo;  // what a thread outside any team is: member 0 of 1

TeamPlace& here() { return place != nullptr ? *place : solo; }

int parallel_launch(ParallelLambda lambda, void* cdata, int num_task) {
  return pool().launch(lambda, cdata, num_task);
}

// No kernel of this project synchronizes inside a launch (TVM emits this call only for the
// parallel_barrier_when_finish pragma, which no schedule uses): tasks taken from a counter
// cannot meet at a barrier.
int parallel_barrier(int, ParallelGroupEnv*) { std::abort(); }

// libgomp's entry points that libdnnl (oneDNN 3.2, built with GCC's OpenMP) calls, as the
// pool runs them; adopt_openmp points an object's imports of them here.
void team_start(void (*fn)(void*), void* data, unsigned num_threads) {
  TeamPlace* outer = place;
  int size = num_threads != 0 ? static_cast<int>(num_threads)
             : wanted_threads > 0 ? wanted_threads : default_threads();
  if (outer != nullptr && outer->size > 1) size = 1;  // nested: inactive, as libgomp
  auto* master = new TeamPlace();
  master->size = size;
  master->outer = outer;
  place = master;
  if (size > 1) pool().start_team(fn, data, size);
}

void team_end() {
  TeamPlace* master = place;
  if (master->size > 1) pool().end_team();
  place = master->outer;
  delete master;
}

void team_barrier() {
  if (here().size > 1) pool().barrier(here().size);
}

bool loop_static_start(long start, long end, long incr, long chunk, long* istart, long* iend) {
  TeamPlace& p = here();
  p.trip = 0;
  p.next = start;
  p.end = (incr > 0 && start > end) || (incr < 0 && start < end) ? start : end;
  p.incr = incr;
  p.chunk = chunk;
  return static_next(p, istart, iend);
}

bool loop_static_next(long* istart, long* iend) { return static_next(here(), istart, iend); }
void loop_end_nowait() {}
int thread_num() { return here().id; }
int num_threads() { return here().size; }
int in_parallel() { return here().size > 1; }
int max_threads() { return wanted_threads > 0 ? wanted_threads : default_threads(); }
void set_num_threads(int count) { wanted_threads = count > 0 ? count : 0; }

struct Entry {
  const char* name;
  void* function;
};
const Entry kOpenMP[] = {
    {"GOMP_parallel_start", reinterpret_cast<void*>(&team_start)},
    {"GOMP_parallel_end", reinterpret_cast<void*>(&team_end)},
    {"GOMP_barrier", reinterpret_cast<void*>(&team_barrier)},
    {"GOMP_loop_static_start", reinterpret_cast<void*>(&loop_static_start)},
    {"GOMP_loop_static_next", reinterpret_cast<void*>(&loop_static_next)},
    {"GOMP_loop_end_nowait", reinterpret_cast<void*>(&loop_end_nowait)},
    {"omp_get_thread_num", reinterpret_cast<void*>(&thread_num)},
    {"omp_get_num_threads", reinterpret_cast<void*>(&num_threads)},
    {"omp_in_parallel", reinterpret_cast<void*>(&in_parallel)},
    {"omp_get_max_threads", reinterpret_cast<void*>(&max_threads)},
    {"omp_set_num_threads", reinterpret_cast<void*>(&set_num_threads)},
};

struct Adoption {
  const char* object;  // part of the object's path; "" the program itself
  int slots = 0;       // the imports pointed at the pool
};

// Points the object's relocated imports (PLT slots and GOT entries) of kOpenMP's functions at
// the pool's, making read-only pages (RELRO: libdnnl binds at load) writable for the while.
int adopt_object(struct dl_phdr_info* info, size_t, void* data) {
  auto* adoption = static_cast<Adoption*>(data);
  const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  bool wanted = adoption->object[0] == '\0' ? name[0] == '\0'
                                            : std::strstr(name, adoption->object) != nullptr;
  if (!wanted) return 0;
  const ElfW(Dyn)* dynamic = nullptr;
  ElfW(Addr) relro = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type == PT_DYNAMIC)
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + header.p_vaddr);
    if (header.p_type == PT_GNU_RELRO) {
      relro = info->dlpi_addr + header.p_vaddr;
      relro_end = relro + header.p_memsz;
    }
  }
  if (dynamic == nullptr) return 0;
  // glibc stores these relocated on x86-64; an address below the object's base is not yet.
  auto address = [info](ElfW(Addr) value) {
    return value < info->dlpi_addr ? value + info->dlpi_addr : value;
  };
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symbols = reinterpret_cast<const ElfW(Sym)*>(address(d->d_un.d_ptr)); break;
      case DT_STRTAB: strings = reinterpret_cast<const char*>(address(d->d_un.d_ptr)); break;
      case DT_JMPREL:
        tables[0] = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr));
        break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (symbols == nullptr || strings == nullptr) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (int t = 0; t < 2; ++t) {
    for (size_t i = 0; tables[t] != nullptr && i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      unsigned type = ELF64_R_TYPE(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      const char* symbol = strings + symbols[ELF64_R_SYM(r.r_info)].st_name;
      for (const Entry& entry : kOpenMP) {
        if (std::strcmp(symbol, entry.name) != 0) continue;
        auto slot = info->dlpi_addr + r.r_offset;
        // Only from libgomp: a team another pool (another version's library) started must
        // end there.
        void* current = *reinterpret_cast<void**>(slot);
        Dl_info from;
        if (current == entry.function) {
          ++adoption->slots;
          break;
        }
        if (dladdr(current, &from) == 0 || from.dli_fname == nullptr ||
            std::strstr(from.dli_fname, "libgomp") == nullptr)
          break;
        bool read_only = slot >= relro && slot < relro_end;
        void* first = reinterpret_cast<void*>(slot & ~static_cast<ElfW(Addr)>(page - 1));
        if (read_only && mprotect(first, page, PROT_READ | PROT_WRITE) != 0) break;
        __atomic_store_n(reinterpret_cast<void**>(slot), entry.function, __ATOMIC_SEQ_CST);
        if (read_only) mprotect(first, page, PROT_READ);
        ++adoption->slots;
      }
    }
  }
  return 0;
}

}  // namespace

// TVM's launch, for parallel_launch.cc's pointers in each model library.
EXPORT int odla_pool_launch(void* lambda, void* cdata, int num_task) {
  return parallel_launch(reinterpret_cast<ParallelLambda>(lambda), cdata, num_task);
}
EXPORT int odla_pool_barrier(int task_id, void* env) {
  return parallel_barrier(task_id, static_cast<ParallelGroupEnv*>(env));
}
// Teams run so far (tests read it to see oneDNN's regions came here, not to libgomp).
EXPORT int64_t odla_pool_teams() { return pool().teams(); }

// Points the OpenMP imports of every loaded object whose path holds ``object`` ("" or null:
// the program) at the pool, those that lead to libgomp: libdnnl's, before a model library's
// first oneDNN region runs, so that its OpenMP regions run on this pool, whoever loaded
// libgomp and whenever. Returns the imports that lead here (0 where no such object is
// loaded). Call it when no parallel region of the object runs.
EXPORT int odla_pool_adopt_openmp(const char* object) {
  static std::mutex adopting;
  std::lock_guard<std::mutex> lock(adopting);
  Adoption adoption{object != nullptr ? object : ""};
  dl_iterate_phdr(adopt_object, &adoption);
  return adoption.slots;
}

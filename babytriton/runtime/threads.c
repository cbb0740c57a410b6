/* TVM's parallel launch, run on torch's OpenMP threads (see threads.py for why).

   A CPU kernel that TVM built calls, for each parallel loop, the function its library's
   `__TVMBackendParallelLaunch` points to, with a lambda that runs task `task_id` of `env->num_task`
   (each task takes an equal slice of the loop). threads.py points that at bt_parallel_launch, which
   runs the lambda once per thread of an OpenMP team: the team torch's own operators run on.

   Nothing here is linked against an OpenMP runtime or TVM: threads.py hands over the functions of
   the ones the process has loaded (bt_init), so that the team is torch's and the errors are TVM's. */
#include <stddef.h>
#include <stdint.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} ParallelEnv; /* TVM's TVMParallelGroupEnv */

typedef int (*Lambda)(int task_id, ParallelEnv* env, void* cdata);

static void (*gomp_parallel)(void (*body)(void*), void* data, unsigned num_threads, unsigned flags);
static void (*gomp_barrier)(void);
static int (*thread_num)(void);
static int (*team_size)(void);
static void (*move_error)(void** error);  /* TVMFFIErrorMoveFromRaised */
static void (*set_error)(void* error);    /* TVMFFIErrorSetRaised: it takes its own reference */
static int (*drop_error)(void* error);    /* TVMFFIObjectDecRef */

/* How many threads a launch from this thread uses (bt_set_threads): one until told otherwise. */
static __thread int wanted = 1;

typedef struct {
  Lambda lambda;
  void* cdata;
  int failed;   /* a task returned nonzero */
  void* error;  /* the first worker's error, moved out of that worker's thread-local slot */
} Launch;

static void run_task(void* data) {
  Launch* launch = (Launch*)data;
  ParallelEnv env = {NULL, team_size()};
  int id = thread_num();
  if (launch->lambda(id, &env, launch->cdata) == 0) return;
  __atomic_store_n(&launch->failed, 1, __ATOMIC_RELEASE);
  if (id == 0) return;  /* the launching thread: its error is already where TVM looks */
  void* error = NULL;
  move_error(&error);
  void* none = NULL;
  if (error != NULL && !__atomic_compare_exchange_n(&launch->error, &none, error, 0, __ATOMIC_ACQ_REL,
                                                    __ATOMIC_ACQUIRE)) {
    drop_error(error);  /* another worker's error is reported */
  }
}

int bt_parallel_launch(Lambda lambda, void* cdata, int num_task) {
  /* TVM's codegen asks for 0 tasks, "as many as there are threads"; honour a count where one comes */
  int threads = num_task > 0 ? num_task : wanted;
  if (threads <= 1) {
    ParallelEnv env = {NULL, 1};
    return lambda(0, &env, cdata);
  }
  Launch launch = {lambda, cdata, 0, NULL};
  gomp_parallel(run_task, &launch, (unsigned)threads, 0);
  if (launch.error != NULL) {
    set_error(launch.error);
    drop_error(launch.error);
  }
  return launch.failed ? -1 : 0;
}

/* TVM's TVMBackendParallelBarrier: every task of the team waits for the others. */
int bt_parallel_barrier(int task_id, ParallelEnv* env) {
  (void)task_id;
  (void)env;
  gomp_barrier();
  return 0;
}

void bt_set_threads(int n) { wanted = n; }

int bt_threads(void) { return wanted; }

void bt_init(void* parallel, void* barrier, void* num, void* size, void* move, void* set, void* drop) {
  gomp_parallel = (void (*)(void (*)(void*), void*, unsigned, unsigned))parallel;
  gomp_barrier = (void (*)(void))barrier;
  thread_num = (int (*)(void))num;
  team_size = (int (*)(void))size;
  move_error = (void (*)(void**))move;
  set_error = (void (*)(void*))set;
  drop_error = (int (*)(void*))drop;
}

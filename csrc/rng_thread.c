/* glibc hides syscall(), MAP_ANONYMOUS and O_CLOEXEC under strict -std=c11 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "rng_thread.h"

#include <stdlib.h>

#if defined(_WIN32)
#include <windows.h>
#include <process.h>
#define DPS_TLS __declspec(thread)
static long current_pid(void) { return (long)GetCurrentProcessId(); }
#else
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#define DPS_TLS _Thread_local
static long current_pid(void) { return (long)getpid(); }
#endif

/* Bumped in the child after fork; states remember the value they were keyed under. */
static volatile uint64_t fork_generation = 0;

void dps_rng_note_fork(void) { fork_generation++; }
uint64_t dps_rng_fork_generation(void) { return fork_generation; }

#define STATE_BYTES (((sizeof(dps_rng) + 4095) / 4096) * 4096)

dps_rng *dps_rng_alloc(void) {
#if defined(_WIN32)
    void *p = VirtualAlloc(NULL, STATE_BYTES, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (p == NULL) return NULL;
#else
    void *p = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#if defined(MADV_WIPEONFORK)
    (void)madvise(p, STATE_BYTES, MADV_WIPEONFORK); /* best effort: Linux >= 4.14 */
#endif
#if defined(MADV_DONTDUMP)
    (void)madvise(p, STATE_BYTES, MADV_DONTDUMP);   /* keys stay out of core dumps */
#endif
#endif
    memset(p, 0, STATE_BYTES);
    return (dps_rng *)p;
}

void dps_rng_free(dps_rng *s) {
    if (s == NULL) return;
    volatile uint8_t *v = (volatile uint8_t *)s;
    for (size_t i = 0; i < sizeof(dps_rng); i++) v[i] = 0;
#if defined(_WIN32)
    VirtualFree(s, 0, MEM_RELEASE);
#else
    munmap(s, STATE_BYTES);
#endif
}

static DPS_TLS dps_rng *thread_state = NULL;

#if !defined(_WIN32)
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t destructor_key;

static void free_thread_state(void *p) { dps_rng_free((dps_rng *)p); }
static void child_after_fork(void) { dps_rng_note_fork(); }

static void setup_once(void) {
    (void)pthread_key_create(&destructor_key, free_thread_state);
    (void)pthread_atfork(NULL, NULL, child_after_fork);
}
#endif

static int key_state(dps_rng *s) {
    int rc = dps_rng_init_secure(s);
    if (rc != DPS_OK) return rc;
    s->pid = current_pid();
    s->fork_generation = fork_generation;
    return DPS_OK;
}

dps_rng *dps_rng_thread_state(int *err) {
    if (thread_state != NULL) return thread_state;
#if !defined(_WIN32)
    pthread_once(&once, setup_once);
#endif
    dps_rng *s = dps_rng_alloc();
    if (s == NULL) { *err = DPS_ERR_NOMEM; return NULL; }
    int rc = key_state(s);
    if (rc != DPS_OK) { dps_rng_free(s); *err = rc; return NULL; }
#if !defined(_WIN32)
    (void)pthread_setspecific(destructor_key, s); /* freed when the thread exits */
#endif
    thread_state = s;
    return s;
}

int dps_rng_init_test_state(dps_rng *s, const uint8_t seed[32], uint64_t stream, uint64_t ack) {
    int rc = dps_rng_init_insecure(s, seed, stream, ack);
    if (rc != DPS_OK) return rc;
    s->pid = current_pid();
    s->fork_generation = fork_generation;
    return DPS_OK;
}

int dps_rng_begin_batch(dps_rng *s, int expected_mode) {
    long pid = current_pid();
    if (expected_mode == DPS_RNG_INSECURE) {
        /* A test state may be shared between extension modules, each with its own fork
         * counter, so only the process-wide checks apply: the wiped page and the pid. */
        if (s->initialised != DPS_RNG_MAGIC || s->pid != pid || s->mode != DPS_RNG_INSECURE)
            return DPS_ERR_FORK_INSECURE;
        return DPS_OK;  /* deterministic: no OS bytes */
    }
    int forked = s->initialised != DPS_RNG_MAGIC || s->pid != pid ||
                 s->fork_generation != fork_generation;
    if (forked || s->mode != DPS_RNG_SECURE) return key_state(s);
    return dps_rng_mix_os(s);
}

void dps_rng_end_batch(dps_rng *s) { dps_rng_wipe_consumed(s); }

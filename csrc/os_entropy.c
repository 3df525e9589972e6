/* OS entropy (docs/privacy/randomness.md). Blocking getrandom is acceptable while the
 * kernel pool initialises; GRND_NONBLOCK is never used as a silent fallback. */
/* glibc hides syscall(), MAP_ANONYMOUS and O_CLOEXEC under strict -std=c11 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "os_entropy.h"

#if defined(_WIN32)
#include <windows.h>
#include <bcrypt.h>

int dps_os_entropy(uint8_t *buf, size_t n) {
    while (n > 0) {
        ULONG chunk = n > 0x10000000u ? 0x10000000u : (ULONG)n;
        if (BCryptGenRandom(NULL, buf, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0) return -1;
        buf += chunk;
        n -= chunk;
    }
    return 0;
}

#elif defined(__linux__)
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The raw syscall, not glibc's getrandom() wrapper (glibc >= 2.25), which old glibc lacks
 * (manylinux2014's 2.17). Headers older than the syscall (kernel headers before 3.17, as on
 * CentOS 7, where manylinux2014 wheels are built) do not name it either: its number is part of
 * each architecture's stable kernel ABI, so it is given here for the architectures wheels are
 * built for. A wheel built there must still wait for the kernel pool's initialisation on every
 * kernel that has getrandom, instead of reading /dev/urandom everywhere. Elsewhere, and with
 * -DDPS_NO_GETRANDOM (for the tests of this path), only /dev/urandom is read. */
#if !defined(SYS_getrandom) && defined(__NR_getrandom)
#define SYS_getrandom __NR_getrandom
#endif
#if !defined(SYS_getrandom)
#if defined(__x86_64__) && !defined(__ILP32__)
#define SYS_getrandom 318
#elif defined(__i386__)
#define SYS_getrandom 355
#elif defined(__aarch64__)
#define SYS_getrandom 278 /* asm-generic */
#endif
#endif
#if defined(DPS_NO_GETRANDOM)
#undef SYS_getrandom
#endif

/* Kernels before 3.17 (no getrandom) and builds that cannot name the syscall: the same pool,
 * without getrandom's wait for its initialisation. */
static int from_urandom(uint8_t *buf, size_t n) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (n > 0) {
        ssize_t r = read(fd, buf, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { close(fd); return -1; }
        buf += r;
        n -= (size_t)r;
    }
    close(fd);
    return 0;
}

#if defined(SYS_getrandom)
int dps_os_entropy(uint8_t *buf, size_t n) {
    while (n > 0) {
        size_t chunk = n > 256 ? 256 : n;
        long r = syscall(SYS_getrandom, buf, chunk, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOSYS) return from_urandom(buf, n);  /* kernels before 3.17 only */
            return -1;
        }
        /* getrandom never returns 0 bytes for a non-empty request; if something between us
         * and the kernel (a seccomp filter, an interposed wrapper) makes it, fail instead of
         * spinning forever. */
        if (r == 0 || (size_t)r > chunk) return -1;
        buf += r;
        n -= (size_t)r;
    }
    return 0;
}
#else
int dps_os_entropy(uint8_t *buf, size_t n) { return from_urandom(buf, n); }
#endif

#else /* macOS >= 10.12, the BSDs: getentropy, at most 256 bytes a call */
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/random.h>
#endif

int dps_os_entropy(uint8_t *buf, size_t n) {
    while (n > 0) {
        size_t chunk = n > 256 ? 256 : n;
        if (getentropy(buf, chunk) != 0) return -1;
        buf += chunk;
        n -= chunk;
    }
    return 0;
}
#endif

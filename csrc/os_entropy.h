/* Seed material from the operating system's CSPRNG. Never falls back to time or pid. */
#ifndef DPS_OS_ENTROPY_H
#define DPS_OS_ENTROPY_H

#include <stddef.h>
#include <stdint.h>

/* Fill buf with n bytes from the OS (getrandom / getentropy / ProcessPrng-BCryptGenRandom).
 * Returns 0 on success, -1 if the OS source failed (the caller must raise, never continue). */
int dps_os_entropy(uint8_t *buf, size_t n);

#endif

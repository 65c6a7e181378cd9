/* The host emulations' random numbers (tests/gpu/, the *_emulate.cpp files): xorshift64. */
#ifndef SK_EMU_RNG_H
#define SK_EMU_RNG_H
#include <stdint.h>

static inline uint64_t emu_xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}
#endif

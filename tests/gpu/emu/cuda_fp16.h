/* Host emulation (tests/gpu/emu/cuda_runtime.h): the fp16 type and conversions the shared
 * device headers name (IEEE binary16, round to nearest even). Not a CUDA header. */
#ifndef SK_EMU_CUDA_FP16_H
#define SK_EMU_CUDA_FP16_H
#include <math.h>
#include <stdint.h>
#include <string.h>

struct __half {
  unsigned short x;
};
static inline float __half2float(__half h) {
  const unsigned s = (h.x >> 15) & 1u, e = (h.x >> 10) & 31u, m = h.x & 1023u;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024u), (int)e - 25);
  return s ? -v : v;
}
static inline __half __float2half_rn(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  const unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
  const float a = fabsf(f);
  __half h;
  if (a != a) {
    h.x = (unsigned short)(sign | 0x7e00u);
  } else if (a >= 65520.0f) {
    h.x = (unsigned short)(sign | 0x7c00u);
  } else if (a < 0x1p-14f) { /* subnormal: a multiple of 2^-24, rounded to nearest even */
    h.x = (unsigned short)(sign | (unsigned)nearbyintf(a * 0x1p24f));
  } else {
    int e;
    float m = frexpf(a, &e); /* a = m·2^e, m in [0.5, 1) */
    unsigned mm = (unsigned)nearbyintf(m * 2048.0f); /* 11 significant bits */
    if (mm == 2048u) mm = 1024u, e++;
    h.x = (unsigned short)(sign | (unsigned)(e + 14) << 10 | (mm & 1023u));
  }
  return h;
}
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
#endif

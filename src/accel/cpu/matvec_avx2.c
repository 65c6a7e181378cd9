/* AVX2 + FMA kernels (filled in below; entries left NULL fall back to the portable ones). */
#include "accel/cpu/cpu_isa.h"
const cpu_isa_ops cpu_ops_avx2 = {.name = "avx2"};

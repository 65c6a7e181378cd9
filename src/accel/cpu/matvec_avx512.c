/* AVX-512 kernels (filled in below; entries left NULL fall back to the portable ones). */
#include "accel/cpu/cpu_isa.h"
const cpu_isa_ops cpu_ops_avx512 = {.name = "avx512"};

/* mlxrt_version: the version the library was built as (include/mlxrt.h). */
#include "mlxrt.h"

const char *mlxrt_version(void) { return MLXRT_VERSION; }

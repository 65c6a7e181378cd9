/* The host emulations' case loop (tests/gpu/, the _emulate.cpp files): runs every case, prints the CTest-
 * style summary line, and gives the exit status. */
#ifndef SK_EMU_CASES_H
#define SK_EMU_CASES_H
#include <stddef.h>
#include <stdio.h>

template <typename Case, size_t N, typename Run> static int emu_run_cases(const Case (&cases)[N], Run run) {
  int fails = 0;
  for (const Case &c : cases) fails += run(c) != 0;
  printf("%d passed, %d failed\n", (int)N - fails, fails);
  return fails ? 1 : 0;
}
#endif

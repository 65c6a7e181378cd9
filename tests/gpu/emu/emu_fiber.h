/* A block's threads as fibers on one host thread (EMU_FIBERS, the plain emulation's runner:
 * emu_block_runner.h). Each emulated thread has a stack of its own and runs until it waits at a
 * barrier (__syncthreads, a warp's exchange, an mma) or yields in an mbarrier wait; the
 * scheduler then resumes the next thread that can go on, in thread order. A barrier costs two
 * context switches per thread instead of a wake-up of host threads through the kernel's
 * scheduler, and a block in which every thread waits for a barrier that cannot complete is
 * reported as a deadlock instead of hanging. The cluster emulation (EMU_CLUSTER) keeps host
 * threads: its blocks run side by side. Under AddressSanitizer every switch is announced
 * (sanitizer/common_interface_defs.h) so it follows the stacks. */
#ifndef EMU_FIBER_H
#define EMU_FIBER_H
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_FIBER_ASAN 1
#endif
#endif
#ifdef EMU_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/* need arrivals complete a phase (gen counts the phases) */
struct emu_bar {
  unsigned need, arrived, gen;
};
static inline void emu_bar_init(emu_bar *b, unsigned need) { *b = emu_bar{need, 0, 0}; }

struct emu_fiber {
  ucontext_t ctx;
  char *stack;
  const emu_bar *wait; /* waiting for wait->gen to move past wait_gen (NULL: runnable) */
  unsigned wait_gen;
  bool done;
};
struct emu_fiber_sched {
  ucontext_t main;
  std::vector<emu_fiber> f;
  unsigned n = 0, cur = 0;
  const std::function<void()> *body = nullptr;
  const void *main_bottom = nullptr; /* (ASan) the scheduler's stack */
  size_t main_size = 0;
  ~emu_fiber_sched() { /* the stacks are kept from block to block */
    for (emu_fiber &x : f) free(x.stack);
  }
};
inline emu_fiber_sched emu_fs;
#ifdef EMU_FIBER_ASAN
#define EMU_FIBER_STACK (4u << 20)
#else
#define EMU_FIBER_STACK (1u << 20)
#endif

/* the running fiber back to the scheduler (for good when it is done) */
static inline void emu_fiber_leave() {
  emu_fiber *f = &emu_fs.f[emu_fs.cur];
#ifdef EMU_FIBER_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(f->done ? nullptr : &fake, emu_fs.main_bottom, emu_fs.main_size);
  swapcontext(&f->ctx, &emu_fs.main);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  swapcontext(&f->ctx, &emu_fs.main);
#endif
}
static inline void emu_fiber_entry() {
#ifdef EMU_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &emu_fs.main_bottom, &emu_fs.main_size);
#endif
  const unsigned me = emu_fs.cur;
  (*emu_fs.body)();
  emu_fs.f[me].done = true;
  emu_fiber_leave();
  abort(); /* a finished fiber is never resumed */
}
/* the scheduler into fiber i (threadIdx: the emulation's, cuda_runtime.h) */
static inline void emu_fiber_enter(unsigned i) {
  emu_fs.cur = i;
  threadIdx = emu_dim3{i, 0, 0};
#ifdef EMU_FIBER_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, emu_fs.f[i].stack, EMU_FIBER_STACK);
  swapcontext(&emu_fs.main, &emu_fs.f[i].ctx);
  __sanitizer_finish_switch_fiber(fake, &emu_fs.main_bottom, &emu_fs.main_size);
#else
  swapcontext(&emu_fs.main, &emu_fs.f[i].ctx);
#endif
}

static inline void emu_bar_wait(emu_bar *b) {
  const unsigned g = b->gen;
  if (++b->arrived == b->need) { /* the last arrival completes the phase and goes on */
    b->arrived = 0;
    b->gen++;
    return;
  }
  emu_fiber *f = &emu_fs.f[emu_fs.cur];
  f->wait = b, f->wait_gen = g;
  emu_fiber_leave();
}
static inline void emu_yield() { emu_fiber_leave(); }

/* Runs body as threads 0 … n − 1 of a block, fibers, until every one has returned. */
static inline void emu_fibers_run(unsigned n, const std::function<void()> &body) {
  if (emu_fs.f.size() < n) emu_fs.f.resize(n);
  emu_fs.n = n;
  emu_fs.body = &body;
  for (unsigned i = 0; i < n; i++) {
    emu_fiber *f = &emu_fs.f[i];
    if (!f->stack && !(f->stack = (char *)malloc(EMU_FIBER_STACK))) {
      fprintf(stderr, "emulation: no memory for a thread's stack\n");
      abort();
    }
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = EMU_FIBER_STACK;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, emu_fiber_entry, 0);
    f->wait = nullptr, f->done = false;
  }
  for (unsigned live = n; live > 0;) {
    bool ran = false;
    for (unsigned i = 0; i < n; i++) {
      emu_fiber *f = &emu_fs.f[i];
      if (f->done || (f->wait && f->wait->gen == f->wait_gen)) continue;
      f->wait = nullptr;
      ran = true;
      emu_fiber_enter(i);
      if (f->done) live--;
    }
    if (!ran) {
      fprintf(stderr, "emulation: every live thread of the block waits at a barrier (%u of %u finished): a deadlock\n",
              n - live, n);
      abort();
    }
  }
}
#endif

"""Run a build's CUDA kernels on the CPU, for the tests of a machine without a GPU.

The generated CUDA source is compiled as host code by nvcc's host compiler with the toolkit's
headers (``half`` and ``nv_bfloat16`` convert on the host too). The blocks run one after another,
each block's threads as fibers of one OS thread (a stack each, switched by hand) in a fixed order:
the lowest-numbered thread that can run goes first (``order = "forward"``), or the highest
(``"reverse"``, which also runs the blocks last to first). A thread runs until it waits: at
``__syncthreads()`` for the block, at a warp-wide step (``__syncwarp()``, a shuffle, ``ldmatrix``,
``mma``) for its warp. So between two barriers of the block each warp runs through before the next
one starts, and between two warp-wide steps each lane before the next lane.

Why two orders: take threads a < b and, between the same two barriers, a write of some location by
one and a read of it by the other. Forward runs a's part before b's, reverse b's before a's, so one
of the two runs the read first, every time: it reads what the location held before (shared memory
starts each block as 0xFF bytes, NaN, and the output and scratch buffers start as NaN), and the
output is wrong in that order. A read that another thread's later write overwrites (the buffer of a
pipeline stage refilled too early) meets the write first in the other order. What this cannot see:
a race that only an interleaving finer than whole parts shows (a thread's two writes seen half-done),
or the GPU's memory model beyond barriers (a value the compiler keeps in a register).

``cp.async`` copies are queued and done when a ``cp.async.wait_group`` lets them complete (the latest
a program may count on), so a read before the wait finds the old contents. A warp-wide instruction
publishes each lane's operands, waits for the warp, and computes each lane's result from the others'
(the PTX ISA's fragment layouts). The shared address of an array is its host address (the program is
linked at low addresses, ``-no-pie``, so it fits in 32 bits). Each global buffer ends where an
inaccessible page begins: a read or write past its end stops the run with the buffer's name.

For small shapes only: what it checks is the kernel's indexing, barriers and arithmetic, not its speed.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from explorer.cuda_compile import nvcc_path
from explorer.tir_walk import walk
from explorer.workloads import numpy_dtype

# The orders the threads of a block run in between barriers (module docstring).
ORDERS = ("forward", "reverse")

# What a program sees of RUNTIME (also tests/hopper_on_cpu.py's programs).
RUNTIME_API = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct EmuDim { unsigned x, y, z; };
// RUNTIME's, compiled apart (_runtime_object): the running thread's indices (set at each switch), its barriers
extern EmuDim emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
extern int emu_thread, emu_reverse;
void emu_sync();
void emu_sync_warp();
void emu_sync_warpgroup();
void emu_yield();
extern unsigned long emu_progress;
extern void (*emu_block_start)();
void emu_fresh(void* shared, unsigned long bytes);
void* emu_global(unsigned long bytes, const char* name);
void emu_launch(int grid_x, int grid_y, int grid_z, int block_x, int block_y, int block_z, void (*thread_main)());
#define EMU_MAX_THREADS 1024
"""

# Shuffles, warp-wide, as TVM's CUDA calls them (also tests/hopper_on_cpu.py's).
SHUFFLES = r"""
// Warp-wide instructions: every lane stores its operands in a slot, the warp waits, each lane loads the others'.
// Successive ones store in alternate slots (by the lane's count of them), so a lane stores into a slot again only
// after the next one's wait, which every lane reaches once it has loaded from it: one wait each, not two.
static unsigned emu_collectives[EMU_MAX_THREADS];
static unsigned long long emu_slots[2][EMU_MAX_THREADS];
static unsigned emu_fragments[2][EMU_MAX_THREADS][6];
static unsigned long long* emu_my_slots() { return emu_slots[emu_collectives[emu_thread]++ & 1]; }
template <typename T> static T emu_exchange(T v, int lane_of_partner) {
  int t = emu_thread;
  unsigned long long* slots = emu_my_slots();
  memcpy(&slots[t], &v, sizeof(T));
  emu_sync_warp();
  T got;
  memcpy(&got, &slots[(t & ~31) | lane_of_partner], sizeof(T));
  return got;
}
template <typename T> static T emu_shfl(unsigned, T v, int lane, int width = 32) {
  return emu_exchange(v, (emu_thread & 31 & ~(width - 1)) | (lane % width));
}
template <typename T> static T emu_shfl_xor(unsigned, T v, int mask, int width = 32) {
  int lane = emu_thread & 31, partner = lane ^ mask;
  return emu_exchange(v, partner >= (lane & ~(width - 1)) + width ? lane : partner);
}
template <typename T> static T emu_shfl_down(unsigned, T v, int delta, int width = 32) {
  int lane = emu_thread & 31;
  return emu_exchange(v, (lane & (width - 1)) + delta < width ? lane + delta : lane);
}
template <typename T> static T emu_shfl_up(unsigned, T v, int delta, int width = 32) {
  int lane = emu_thread & 31;
  return emu_exchange(v, (lane & (width - 1)) >= delta ? lane - delta : lane);
}
template <typename T> static T emu_max(T a, T b) { return a > b ? a : b; }
template <typename T> static T emu_min(T a, T b) { return a < b ? a : b; }
"""

PRELUDE = RUNTIME_API + SHUFFLES + r"""
// A shared address: the array's host address (the program is linked below 4 GB).
static unsigned __cvta_generic_to_shared(const void* p) {
  uintptr_t address = (uintptr_t)p;
  if (address >> 32) { fprintf(stderr, "a shared array above 4 GB\n"); exit(3); }
  return (unsigned)address;
}
static unsigned char* emu_shared(unsigned address) { return (unsigned char*)(uintptr_t)address; }
// ldmatrix.x4 (b16): lane i gives the row address of row i % 8 of matrix i / 8; register j of lane l gets
// matrix j's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (transposed: rows 2 (l % 4) + e of column l / 4).
static void emu_ldmatrix_x4(unsigned address, bool trans, unsigned* r0, unsigned* r1, unsigned* r2, unsigned* r3) {
  int t = emu_thread, base = t & ~31, lane = t & 31;
  unsigned long long* rows = emu_my_slots();
  rows[t] = address;
  emu_sync_warp();
  unsigned* out[4] = {r0, r1, r2, r3};
  for (int i = 0; i < 4; ++i) {
    unsigned short h[2];
    for (int e = 0; e < 2; ++e)
      h[e] = trans ? ((const unsigned short*)emu_shared(rows[base + i * 8 + lane % 4 * 2 + e]))[lane / 4]
                   : ((const unsigned short*)emu_shared(rows[base + i * 8 + lane / 4]))[lane % 4 * 2 + e];
    *out[i] = h[0] | (unsigned)h[1] << 16;
  }
}
static float emu_f16(unsigned short bits) { __half h; memcpy(&h, &bits, 2); return __half2float(h); }
static float emu_bf16(unsigned short bits) {
  unsigned word = (unsigned)bits << 16;
  float f;
  memcpy(&f, &word, 4);
  return f;
}
// mma.sync.m16n8k16 (16-bit inputs, f32 accumulate), warp-wide: lane = 4 * group + thread-in-group; A's
// halves j of lane (row % 8) * 4 + (k % 8) / 2 hold (row, k) at j = 4 (k / 8) + 2 (row / 8) + k % 2, B's
// (k, col) at lane col * 4 + (k % 8) / 2, half 2 (k / 8) + k % 2; D's j is (lane / 4 + 8 (j / 2),
// 2 (lane % 4) + j % 2).
template <float (*TO_FLOAT)(unsigned short)>
static void emu_mma_m16n8k16(unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                             float c0, float c1, float c2, float c3, float* d0, float* d1, float* d2, float* d3) {
  int t = emu_thread, base = t & ~31, lane = t & 31;
  unsigned (*fragments)[6] = emu_fragments[emu_collectives[t]++ & 1];
  unsigned mine[6] = {a0, a1, a2, a3, b0, b1};
  memcpy(fragments[t], mine, sizeof(mine));
  emu_sync_warp();
  auto half_of = [&](int thread, int j) {
    return TO_FLOAT((unsigned short)(fragments[base + thread][j / 2] >> (j % 2 * 16)));
  };
  float c[4] = {c0, c1, c2, c3};
  float* d[4] = {d0, d1, d2, d3};
  for (int j = 0; j < 4; ++j) {
    int row = lane / 4 + j / 2 * 8, col = lane % 4 * 2 + j % 2;
    float sum = c[j];
    for (int k = 0; k < 16; ++k)
      sum += half_of(row % 8 * 4 + k % 8 / 2, k / 8 * 4 + row / 8 * 2 + k % 2)
           * half_of(col * 4 + k % 8 / 2, 8 + k / 8 * 2 + k % 2);
    *d[j] = sum;
  }
}
// cp.async: each thread's copies queued in order, in groups as it commits them; wait_group N does the copies of
// all but its N newest committed groups (copies not yet committed stay queued), a new block drops what is left.
struct EmuCopy { unsigned dst; const void* src; int bytes; };
static EmuCopy* emu_copies[EMU_MAX_THREADS];
static int emu_copy_capacity[EMU_MAX_THREADS], emu_copy_count[EMU_MAX_THREADS], emu_group_count[EMU_MAX_THREADS];
static int emu_group_end[EMU_MAX_THREADS][64];
static void emu_cp_async(unsigned dst, const void* src, int bytes) {
  int t = emu_thread;
  if (emu_copy_count[t] == emu_copy_capacity[t]) {
    emu_copy_capacity[t] = emu_copy_capacity[t] ? 2 * emu_copy_capacity[t] : 64;
    emu_copies[t] = (EmuCopy*)realloc(emu_copies[t], sizeof(EmuCopy) * emu_copy_capacity[t]);
  }
  emu_copies[t][emu_copy_count[t]++] = EmuCopy{dst, src, bytes};
}
static void emu_cp_async_commit() {
  int t = emu_thread;
  if (emu_group_count[t] == 64) { fprintf(stderr, "more than 64 cp.async groups in flight\n"); exit(3); }
  emu_group_end[t][emu_group_count[t]++] = emu_copy_count[t];
}
static void emu_cp_async_wait(int pending) {
  int t = emu_thread;
  if (emu_group_count[t] <= pending) return;
  int done_groups = emu_group_count[t] - pending, done = emu_group_end[t][done_groups - 1];
  for (int i = 0; i < done; ++i) memcpy(emu_shared(emu_copies[t][i].dst), emu_copies[t][i].src, emu_copies[t][i].bytes);
  memmove(emu_copies[t], emu_copies[t] + done, sizeof(EmuCopy) * (emu_copy_count[t] - done));
  emu_copy_count[t] -= done;
  for (int g = done_groups; g < emu_group_count[t]; ++g) emu_group_end[t][g - done_groups] = emu_group_end[t][g] - done;
  emu_group_count[t] -= done_groups;
}
// A thread's start in a block: its warp-wide count and its queued copies begin again.
static void emu_thread_start() {
  emu_collectives[emu_thread] = 0;
  emu_copy_count[emu_thread] = emu_group_count[emu_thread] = 0;
}
// CUDA's device math that the host's library lacks
static float rsqrtf(float x) { return 1.0f / sqrtf(x); }
"""


# The fibers of each block and their barriers, compiled once (_runtime_object) and linked into every emulation.
RUNTIME = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
struct EmuDim { unsigned x, y, z; };
EmuDim emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
int emu_thread, emu_reverse;
unsigned long emu_progress;  // counted up by whatever may let a thread that waits (emu_yield) go on
void (*emu_block_start)();  // called before each block's threads start, where a program sets it
namespace {
enum State : unsigned char { RUNNABLE, AT_BLOCK, AT_WARP, AT_WARPGROUP, YIELDED, DONE };
struct Fiber { void* sp; State state; };
constexpr long STACK = 256 << 10;  // per thread; a guard page below each
constexpr int MAX_THREADS = 1024;
Fiber fibers[MAX_THREADS];
int threads, live, at_block, cursor;
int warp_live[MAX_THREADS / 32], warp_waiting[MAX_THREADS / 32];
int warpgroup_live[MAX_THREADS / 128], warpgroup_waiting[MAX_THREADS / 128];
unsigned long progress_seen;  // emu_progress when the threads that wait last tried again
char* stacks;
void* main_sp;
void (*thread_main)();
unsigned long epoch;  // of the block running
struct Fresh { void* at; unsigned long epoch; };
Fresh fresh[512];
int fresh_count;
}
// Callee-saved registers pushed on the stack being left, its pointer saved, the other's popped (x86-64 SysV).
#if !defined(__x86_64__)
#error "the CPU emulation switches between its threads' stacks in x86-64 assembly"
#endif
extern "C" void emu_switch_stacks(void** save, void* to);
asm(R"(
  .text
  .p2align 4
  .globl emu_switch_stacks
  .type emu_switch_stacks, @function
emu_switch_stacks:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch_stacks, .-emu_switch_stacks
)");
namespace {
void finish();
void fiber_main() {
  thread_main();
  finish();
}
// A fresh stack that starts fiber_main: six zero registers, then fiber_main as the return address, above it
// a null one (fiber_main never returns), so that fiber_main starts as if called with an aligned stack.
void* new_stack(int t) {
  void** top = (void**)(stacks + (long)(t + 1) * STACK);
  top[-1] = nullptr;
  top[-2] = (void*)&fiber_main;
  for (int i = 3; i <= 8; ++i) top[-i] = nullptr;
  return top - 8;
}
void enter(int next) {
  emu_thread = next;
  unsigned t = (unsigned)next;
  emu_threadIdx = EmuDim{t % emu_blockDim.x, t / emu_blockDim.x % emu_blockDim.y,
                         t / (emu_blockDim.x * emu_blockDim.y)};
}
// The next thread to run: the lowest-numbered runnable one (the highest in reverse); none below the cursor
// (above it in reverse) is runnable.
int scan() {
  if (!emu_reverse) {
    for (int i = cursor; i < threads; ++i)
      if (fibers[i].state == RUNNABLE) return cursor = i;
  } else {
    for (int i = cursor; i >= 0; --i)
      if (fibers[i].state == RUNNABLE) return cursor = i;
  }
  return -1;
}
// With none runnable, the threads that wait for another's step (emu_yield) try again, if a step was taken since
// they last tried (else nothing can change: a deadlock).
int pick() {
  int next = scan();
  if (next >= 0 || emu_progress == progress_seen) return next;
  progress_seen = emu_progress;
  bool waiting = false;
  for (int i = 0; i < threads; ++i)
    if (fibers[i].state == YIELDED) fibers[i].state = RUNNABLE, waiting = true;
  if (!waiting) return -1;
  cursor = emu_reverse ? threads - 1 : 0;
  return scan();
}
const char* where(State state) {
  return state == AT_BLOCK ? "__syncthreads()" : state == AT_WARP ? "a warp-wide step"
       : state == AT_WARPGROUP ? "a warpgroup-wide step" : state == YIELDED ? "an mbarrier" : "done";
}
// The thread that stopped (waiting or done) hands over to the next; back to the launch once every thread is done.
void run_next(int from) {
  int next = pick();
  if (next == from) return;
  if (next < 0) {
    if (live) {
      fprintf(stderr, "deadlock in block (%u, %u, %u): no thread can run;", emu_blockIdx.x, emu_blockIdx.y,
              emu_blockIdx.z);
      for (int i = 0, shown = 0; i < threads && shown < 8; ++i)
        if (fibers[i].state != DONE && (i == 0 || fibers[i].state != fibers[i - 1].state))
          fprintf(stderr, " thread %d waits at %s;", i, where(fibers[i].state)), ++shown;
      fprintf(stderr, "\n");
      exit(3);
    }
    emu_switch_stacks(&fibers[from].sp, main_sp);
    return;
  }
  enter(next);
  emu_switch_stacks(&fibers[from].sp, fibers[next].sp);
}
void release_block() {
  for (int i = 0; i < threads; ++i)
    if (fibers[i].state == AT_BLOCK) fibers[i].state = RUNNABLE;
  at_block = 0;
  cursor = emu_reverse ? threads - 1 : 0;
}
/* The threads of one group of ``width`` (a warp, a warpgroup) waiting in ``state`` go on. */
void release_group(int group, int width, int state, int *waiting) {
  int low = group * width, high = low + width < threads ? low + width - 1 : threads - 1;
  for (int i = low; i <= high; ++i)
    if (fibers[i].state == state) fibers[i].state = RUNNABLE;
  waiting[group] = 0;
  if (emu_reverse) cursor = cursor > high ? cursor : high;
  else cursor = cursor < low ? cursor : low;
}
void release_warp(int warp) { release_group(warp, 32, AT_WARP, warp_waiting); }
void release_warpgroup(int group) { release_group(group, 128, AT_WARPGROUP, warpgroup_waiting); }
void finish() {
  int me = emu_thread, warp = me / 32, group = me / 128;
  fibers[me].state = DONE;
  --live;
  --warp_live[warp];
  --warpgroup_live[group];
  if (at_block && at_block == live) release_block();
  if (warp_waiting[warp] && warp_waiting[warp] == warp_live[warp]) release_warp(warp);
  if (warpgroup_waiting[group] && warpgroup_waiting[group] == warpgroup_live[group]) release_warpgroup(group);
  run_next(me);
}
}
void emu_sync() {
  int me = emu_thread;
  fibers[me].state = AT_BLOCK;
  if (++at_block == live) release_block();
  run_next(me);
}
void emu_sync_warp() {
  int me = emu_thread, warp = me / 32;
  fibers[me].state = AT_WARP;
  if (++warp_waiting[warp] == warp_live[warp]) release_warp(warp);
  run_next(me);
}
void emu_sync_warpgroup() {
  int me = emu_thread, group = me / 128;
  fibers[me].state = AT_WARPGROUP;
  if (++warpgroup_waiting[group] == warpgroup_live[group]) release_warpgroup(group);
  run_next(me);
}
// The thread waits for another's step: every other thread that can run does first.
void emu_yield() {
  int me = emu_thread;
  fibers[me].state = YIELDED;
  run_next(me);
}
// A shared array as a block's first thread declares it: 0xFF bytes (NaN as float, half and bfloat16).
void emu_fresh(void* shared, unsigned long bytes) {
  for (int i = 0; i < fresh_count; ++i)
    if (fresh[i].at == shared) {
      if (fresh[i].epoch != epoch) memset(shared, 0xFF, bytes), fresh[i].epoch = epoch;
      return;
    }
  if (fresh_count == 512) { fprintf(stderr, "more than 512 shared arrays\n"); exit(3); }
  fresh[fresh_count++] = Fresh{shared, epoch};
  memset(shared, 0xFF, bytes);
}
// Global buffers: each ends where an inaccessible page begins, and one lies before it, so that a kernel that reads
// or writes past its end stops at once (SIGSEGV; before its start, past the page's slack), and the handler says where.
namespace {
struct Global { char* start; unsigned long bytes; const char* name; };
Global globals[64];
int global_count;
void out_of_bounds(int, siginfo_t* info, void*) {
  char* at = (char*)info->si_addr;
  long page = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < global_count; ++i) {
    Global& g = globals[i];
    if (at >= g.start + g.bytes && at < g.start + g.bytes + page)
      fprintf(stderr, "out of bounds: a thread read or wrote %s at byte %ld, past its end (%lu bytes)\n", g.name,
              (long)(at - g.start), g.bytes);
    else if (at < g.start && at >= g.start - page - (long)((uintptr_t)g.start % page))
      fprintf(stderr, "out of bounds: a thread read or wrote %s before its start (%ld bytes before)\n", g.name,
              (long)(g.start - at));
    else
      continue;
    fprintf(stderr, "in block (%u, %u, %u), thread (%u, %u, %u)\n", emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z,
            emu_threadIdx.x, emu_threadIdx.y, emu_threadIdx.z);
    _exit(4);
  }
  if (stacks && at >= stacks && at < stacks + STACK * MAX_THREADS)
    fprintf(stderr, "a thread's stack overflowed (%ld KB each)\n", STACK >> 10);
  else
    fprintf(stderr, "segmentation fault at %p, outside every buffer\n", (void*)at);
  _exit(4);
}
}
void* emu_global(unsigned long bytes, const char* name) {
  long page = sysconf(_SC_PAGESIZE);
  if (!global_count) {
    static char alternate[64 << 10];  // the handler's stack: a thread's own may be what overflowed
    stack_t stack{};
    stack.ss_sp = alternate, stack.ss_size = sizeof(alternate);
    sigaltstack(&stack, nullptr);
    struct sigaction action{};
    action.sa_sigaction = out_of_bounds, action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
  }
  if (global_count == 64) { fprintf(stderr, "more than 64 global buffers\n"); exit(3); }
  // The buffer ends at the page: its start is as aligned as its size is (16 bytes for vectors of 4 floats).
  unsigned long pages = (bytes + page - 1) / page;
  char* region = (char*)mmap(nullptr, (pages + 2) * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                             -1, 0);
  if (region == MAP_FAILED) { perror("mmap"); exit(3); }
  mprotect(region + page, pages * page, PROT_READ | PROT_WRITE);
  char* start = region + (pages + 1) * page - bytes;
  globals[global_count++] = Global{start, bytes, name};
  return start;
}
// Each block in turn (in reverse order with the threads), its threads started on fresh stacks.
void emu_launch(int grid_x, int grid_y, int grid_z, int block_x, int block_y, int block_z, void (*main)()) {
  threads = block_x * block_y * block_z;
  if (threads > MAX_THREADS) { fprintf(stderr, "more than %d threads in a block\n", MAX_THREADS); exit(3); }
  if (!stacks) {
    long page = sysconf(_SC_PAGESIZE);
    stacks = (char*)mmap(nullptr, STACK * MAX_THREADS, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) { perror("mmap"); exit(3); }
    for (int t = 0; t < MAX_THREADS; ++t) mprotect(stacks + (long)t * STACK, page, PROT_NONE);
  }
  thread_main = main;
  emu_blockDim = EmuDim{(unsigned)block_x, (unsigned)block_y, (unsigned)block_z};
  emu_gridDim = EmuDim{(unsigned)grid_x, (unsigned)grid_y, (unsigned)grid_z};
  long blocks = (long)grid_x * grid_y * grid_z;
  for (long n = 0; n < blocks; ++n) {
    long b = emu_reverse ? blocks - 1 - n : n;
    emu_blockIdx = EmuDim{(unsigned)(b % grid_x), (unsigned)(b / grid_x % grid_y), (unsigned)(b / grid_x / grid_y)};
    ++epoch;
    for (int t = 0; t < threads; ++t) fibers[t] = Fiber{new_stack(t), RUNNABLE};
    live = threads;
    at_block = 0;
    for (int w = 0; w * 32 < threads; ++w) {
      warp_live[w] = threads - w * 32 < 32 ? threads - w * 32 : 32;
      warp_waiting[w] = 0;
    }
    for (int g = 0; g * 128 < threads; ++g) {
      warpgroup_live[g] = threads - g * 128 < 128 ? threads - g * 128 : 128;
      warpgroup_waiting[g] = 0;
    }
    progress_seen = emu_progress - 1;
    if (emu_block_start) emu_block_start();
    cursor = emu_reverse ? threads - 1 : 0;
    int first = pick();
    enter(first);
    emu_switch_stacks(&main_sp, fibers[first].sp);
  }
}
"""


@functools.cache
def host_compiler() -> list[str]:
    """The C++ compiler nvcc runs for host code, with the include folders it gives it (``nvcc --dryrun``
    names them). The emulated kernels are host code only: nvcc itself would also run its own front end
    and its device passes on a file with no kernel left, 2.9 s of each emulation against 0.8 s here."""
    dryrun = subprocess.run([nvcc_path(), "--dryrun", "-x", "cu", "-E", "/dev/null"], capture_output=True,
                            text=True, check=True)
    flags = [flag for value in re.findall(r"^#\$ (?:SYSTEM_)?INCLUDES=(.*)$", dryrun.stderr, re.M)
             for flag in shlex.split(value)]
    return [shutil.which("g++") or "c++", *flags]


# The headers of every emulation (PRELUDE's, hopper_on_cpu's and those of TVM's generated CUDA), compiled once
# (_precompiled_headers): parsing them was 0.4-0.6 s of each 0.6-1.1 s compile. Including them again in a source
# changes nothing (their include guards), so a header missing here is only parsed where it is included.
HEADERS = ("array", "barrier", "cmath", "condition_variable", "cstdint", "cstdio", "cstdlib", "cstring", "map", "mutex",
           "thread", "type_traits", "vector", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "cuda/std/cstdint",
           "cuda/std/type_traits")
# An emulation's, and its precompiled headers' (they must agree); linked at low addresses (no PIE), where a shared
# array's address fits in 32 bits.
FLAGS = ("-std=c++20", "-O1", "-w", "-pthread", "-fno-pie", "-no-pie")


@functools.cache
def _compiler_stamp() -> str:
    """The host compiler's file (its time and size): a compiler installed since changes what it makes."""
    made = os.stat(os.path.realpath(host_compiler()[0]))
    return f"{made.st_mtime_ns}:{made.st_size}"


def _made_once(kind: str, source_name: str, text: str, made_name: str, options: list[str]) -> Path:
    """``text`` written to ``source_name`` and compiled with FLAGS and ``options`` into ``made_name`` beside it,
    once for every test process and run: in the temporary folder, under the hash of what makes it, and built
    under a lock by the first process that needs it. The path of the source."""
    command = [*host_compiler(), *FLAGS, *options]
    made_of = hashlib.sha256("\0".join([text, *command, _compiler_stamp()]).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"explorer-emulation-{kind}-{made_of}"
    folder.mkdir(exist_ok=True)
    source, made = folder / source_name, folder / made_name
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            source.write_text(text)
            partial = folder / f"{made_name}.{os.getpid()}"
            compiled = subprocess.run([*command, str(source), "-o", str(partial)],
                                      capture_output=True, text=True, timeout=300)
            if compiled.returncode:
                raise RuntimeError(compiled.stderr[-3000:])
            partial.rename(made)
    return source


@functools.cache
def _precompiled_headers() -> str:
    """A header including HEADERS, compiled beside it (g++ reads ``headers.h.gch`` for ``-include headers.h``)."""
    text = "".join(f"#include <{header}>\n" for header in HEADERS)
    return str(_made_once("headers", "headers.h", text, "headers.h.gch", ["-x", "c++-header"]))


@functools.cache
def _runtime_object() -> str:
    """RUNTIME compiled to an object file, which run_on_cpu's programs link."""
    source = _made_once("runtime", "runtime.cc", RUNTIME, "runtime.o", ["-include", _precompiled_headers(), "-c"])
    return str(source.with_suffix(".o"))


@contextlib.contextmanager
def _one_core():
    """A core for an emulation: one that no other test process's emulation holds (a lock per core, held while
    it runs), so that two emulations at once run on two cores, not one; with every core held, one chosen by
    this process's id."""
    cores = sorted(os.sched_getaffinity(0))
    mine = os.getpid() % len(cores)
    for core in cores[mine:] + cores[:mine]:
        with open(os.path.join(tempfile.gettempdir(), f"explorer-emulation-core-{core}.lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            yield core
            return
    yield cores[mine]


def _compiled(source: str, objects: tuple[str, ...] = ()) -> Path:
    """The program compiled from ``source`` and linked with ``objects``, kept in the temporary folder under the
    hash of the source and of the compile: a source emulated before (the same setting in another test, or in an
    earlier run) is not compiled again (0.2-0.8 s of g++ each). Written whole: a program is renamed into place
    once compiled."""
    command = [*host_compiler(), *FLAGS, "-include", _precompiled_headers()]
    key = hashlib.sha256("\0".join([*command, *objects, _compiler_stamp(), source]).encode()).hexdigest()[:32]
    program = Path(tempfile.gettempdir()) / "explorer-emulations" / key
    if program.exists():
        return program
    program.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="explorer-cpu-cuda-") as tmp:
        (Path(tmp) / "kernel.cu").write_text(source)
        compiled = subprocess.run([*command, "-o", f"{tmp}/kernel", "-x", "c++", f"{tmp}/kernel.cu", "-x", "none",
                                   *objects],
                                  capture_output=True, text=True, timeout=300)
        if compiled.returncode:
            raise RuntimeError(compiled.stderr[-3000:])
        os.replace(f"{tmp}/kernel", program)
    return program


def compile_and_run(source: str, inputs: list[np.ndarray], output_dtype, timeout_s: int,
                    objects: tuple[str, ...] = (), arguments: tuple[str, ...] = ()) -> np.ndarray:
    """``source`` (a program whose arguments are ``arguments``, the files of ``inputs``, then the file its
    output is written to) compiled as host code, linked with ``objects``, and run: the output, flat."""
    program = _compiled(source, objects)
    with tempfile.TemporaryDirectory(prefix="explorer-cpu-cuda-") as tmp:
        tmp = Path(tmp)
        paths = []
        for number, array in enumerate(inputs):
            path = tmp / f"input{number}.bin"
            np.ascontiguousarray(array).tofile(path)
            paths.append(str(path))
        result = tmp / "out.bin"
        with _one_core() as core:
            ran = subprocess.run([str(program), *arguments, *paths, str(result)], capture_output=True, text=True,
                                 timeout=timeout_s, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
        if ran.returncode:
            raise RuntimeError(ran.stderr[-3000:] or f"the emulation ended with status {ran.returncode}")
        return np.fromfile(result, output_dtype)


# -- the generated CUDA as host code -------------------------------------------------------------------------------

ASM = re.compile(r"\b(?:asm|__asm__)\s+(?:volatile|__volatile__)\s*\(")


def _balanced(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at ``start`` (string literals skipped)."""
    depth, i = 0, start
    while True:
        char = text[i]
        if char == '"':
            i = text.index('"', i + 1)
            while text[i - 1] == "\\":
                i = text.index('"', i + 1)
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def _top_level_split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside parentheses and string literals."""
    parts, depth, current, in_string = [], 0, [], False
    for i, char in enumerate(text):
        if in_string:
            in_string = not (char == '"' and text[i - 1] != "\\")
        elif char == '"':
            in_string = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _operands(part: str) -> list[str]:
    """The expressions of an asm operand list (``"=r"(x), "l"(p)``)."""
    out = []
    for operand in _top_level_split(part, ","):
        found = re.match(r'\s*"[^"]*"\s*\((.*)\)\s*$', operand, re.S)
        if found:
            out.append(found.group(1))
    return out


def _emulated_asm(instruction: str, outputs: list[str], inputs: list[str]) -> str:
    """The host code of one PTX asm statement (its instruction text, outputs and inputs), or an error naming it."""
    text = " ".join(instruction.replace("\\n", " ").split())
    if text.startswith("ldmatrix.sync.aligned.m8n8.x4") and ".b16" in text:
        trans = "true" if ".trans" in text else "false"
        pointers = ", ".join(f"(unsigned*)&({out})" for out in outputs)
        return f"emu_ldmatrix_x4({inputs[0]}, {trans}, {pointers});"
    mma = re.match(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(f16|bf16)\.\1\.f32", text)
    if mma:
        pointers = ", ".join(f"&({out})" for out in outputs)
        return f"emu_mma_m16n8k16<emu_{mma.group(1)}>({', '.join(inputs)}, {pointers});"
    copy = re.match(r"cp\.async\.c[ag]\.shared\.global \[%0\], \[%1\], (%2|\d+);$", text)
    if copy:
        size = inputs[2] if copy.group(1) == "%2" else copy.group(1)
        return f"emu_cp_async({inputs[0]}, {inputs[1]}, {size});"
    # TVM's predicated copy: the copy where the predicate is 1, else a store of zeros (st.shared, at once)
    predicated = re.match(r"\{ \.reg \.pred p; setp\.eq\.u32 p, %3, 1; @p cp\.async\.c[ag]\.shared\.global "
                          r"\[%0\], \[%1\], %2; @!p st\.shared\.(?:v\d\.)?u32 \[%0\], \{[%\d, ]+\}; \}$", text)
    if predicated:
        dst, src, size, predicate = inputs[:4]
        return (f"if (({predicate}) == 1) emu_cp_async({dst}, {src}, {size}); "
                f"else memset(emu_shared({dst}), 0, {size});")
    if text == "cp.async.commit_group;":
        return "emu_cp_async_commit();"
    wait = re.match(r"cp\.async\.wait_group (\d+);$", text)
    if wait:
        return f"emu_cp_async_wait({wait.group(1)});"
    if text == "cp.async.wait_all;":
        return "emu_cp_async_commit(); emu_cp_async_wait(0);"
    raise NotImplementedError(f"no CPU emulation of the PTX {text!r}")


def _without_asm(source: str) -> str:
    """Every inline PTX statement of ``source`` (in TVM's helpers and in the kernels) replaced by its emulation."""
    out, position = [], 0
    for found in ASM.finditer(source):
        if found.start() < position:
            continue
        end = _balanced(source, found.end() - 1)
        parts = _top_level_split(source[found.end():end - 1], ":")
        instruction = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', parts[0]))
        outputs = _operands(parts[1]) if len(parts) > 1 else []
        inputs = _operands(parts[2]) if len(parts) > 2 else []
        out.append(source[position:found.start()])
        out.append(_emulated_asm(instruction, outputs, inputs))
        semicolon = re.match(r"\s*;", source[end:])
        position = end + (semicolon.end() if semicolon else 0)
    out.append(source[position:])
    return "".join(out)


DYNAMIC_SHARED_BYTES = 1 << 18  # more than a block may opt in to (227 KB on the H100)


def _host_source(cuda: str) -> str:
    body = _without_asm(cuda)
    # Shared arrays keep their alignment (vector loads need it on the host too) and start each block as 0xFF bytes.
    body = re.sub(r"extern __shared__ ((?:__align__\(\d+\) )?\w+) (\w+)\[\];",
                  rf"static \1 \2[{DYNAMIC_SHARED_BYTES}]; emu_fresh(\2, sizeof(\2));", body)
    body = re.sub(r"__shared__ (alignas\(\d+\) )?([\w ]+?) (\w+)((?:\[\d+\])+);",
                  r"\1static \2 \3\4; emu_fresh(\3, sizeof(\3));", body)
    for pattern, replacement in ((r'extern "C" __global__ void __launch_bounds__\(\d+(?:, ?\d+)?\)', "void"),
                                 (r'extern "C" __global__ void', "void"),
                                 (r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", r"emu_\1"),
                                 (r"__syncthreads\(\)", "emu_sync()"), (r"__syncwarp\([^)]*\)", "emu_sync_warp()"),
                                 (r"__shfl_sync\b", "emu_shfl"), (r"__shfl_xor_sync\b", "emu_shfl_xor"),
                                 (r"__shfl_down_sync\b", "emu_shfl_down"), (r"__shfl_up_sync\b", "emu_shfl_up"),
                                 (r"__activemask\(\)", "0xffffffffu"),
                                 (r"(?<![\w.])max\(", "emu_max("), (r"(?<![\w.])min\(", "emu_min(")):
        body = re.sub(pattern, replacement, body)
    return body


CTYPES = {"float16": "half", "float32": "float", "bfloat16": "nv_bfloat16"}


def scratch_buffers(built) -> dict[str, tuple[tuple[int, ...], str]]:
    """The global buffers TVM's host code allocates for ``built``'s kernels (name: (shape, dtype)): the buffers
    it declares that a kernel takes and the workload does not (named as the CUDA names them: B.rf is B_rf)."""
    workload = built.spec.workload
    taken = set(re.findall(r"(\w+?)_ptr(?:_\d+)?\b", built.cuda)) - {*workload.input_names, workload.output_name}
    found = {}
    for stmt, _ in walk(built.host_mod["main"].body):
        if type(stmt).__name__ == "DeclBuffer":
            name = re.sub(r"\W", "_", stmt.buffer.name)
            if name in taken:
                found[name] = (tuple(int(d) for d in stmt.buffer.shape), str(stmt.buffer.dtype))
    return found


def _arrays(built, inputs: list[np.ndarray] | None, scratch: dict) -> dict[str, np.ndarray]:
    """The global buffers of ``built``'s kernels: its workload's inputs (``inputs``, or empty ones of their
    shapes), its output and ``scratch``, the output and scratch NaN."""
    workload = built.spec.workload
    if inputs is None:
        inputs = [np.empty(shape, numpy_dtype(dtype))
                  for shape, dtype in zip(workload.input_shapes(), workload.input_dtypes(), strict=True)]
    arrays = dict(zip(workload.input_names, inputs, strict=True))
    arrays[workload.output_name] = np.full(workload.output_shape(), np.nan, numpy_dtype(workload.output_dtype()))
    return arrays | {name: np.full(shape, np.nan, numpy_dtype(dtype)) for name, (shape, dtype) in scratch.items()}


def launches(built) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """The kernel launches of ``built``'s host code, in its order: each kernel's name and the host loops around
    it (variable, start, extent), outermost first (a template may launch a kernel once per channel)."""
    found = []
    for stmt, loops in walk(built.host_mod["main"].body):
        call = getattr(stmt, "value", None) if type(stmt).__name__ == "Evaluate" else None
        if getattr(getattr(call, "op", None), "name", "") == "tirx.tvm_call_packed_lowered":
            name = str(call.args[0].value)
            if name != "__tvm_set_device":
                found.append((name, [(str(loop.loop_var), int(loop.min), int(loop.extent)) for loop in loops]))
    return found


def _setting(built, arrays: dict[str, np.ndarray]) -> str:
    """``built``'s kernels as host code, with ``int run(char** files)``: the buffers read from the files of
    ``arrays`` but the last (the output, written to the last file), each kernel launched as the host code does."""
    names = list(arrays)
    ctypes = {name: CTYPES[str(array.dtype)] for name, array in arrays.items()}
    host = _host_source(built.cuda)
    program = [f"static {ctypes[name]}* {name}_buf;" for name in names]
    run = ["int run(char** files) {"]
    for i, name in enumerate(names):
        size, ctype = arrays[name].size, ctypes[name]
        run.append(f"  {name}_buf = ({ctype}*)emu_global(sizeof({ctype}) * {size}, \"{name}\");")
        run.append(f"  {{ FILE* f = fopen(files[{i}], \"rb\"); fread({name}_buf, sizeof({ctype}), {size}, f); "
                   f"fclose(f); }}")
    kernels = {kernel.name: kernel for kernel in built.kernels}
    host_variables = set()
    for number, (name, loops) in enumerate(launches(built)):
        signature = re.search(rf"void {name}\(([^)]*)\)", host).group(1)
        arguments = []
        for parameter in signature.split(","):
            pointer = re.fullmatch(r"\s*(\w+)\* __restrict__ (\w+?)_ptr(?:_\d+)?\s*", parameter)
            scalar = re.fullmatch(r"\s*int (\w+)\s*", parameter)
            if pointer:
                arguments.append(f"({pointer.group(1)}*){pointer.group(2)}_buf")
            elif scalar and scalar.group(1) in [var for var, _, _ in loops]:
                arguments.append(f"emu_host_{scalar.group(1)}")
                host_variables.add(scalar.group(1))
            else:
                raise NotImplementedError(f"no CPU emulation of kernel {name}'s parameter {parameter.strip()!r}")
        program.append(f"static void emu_thread_{number}() {{ emu_thread_start(); {name}({', '.join(arguments)}); }}")
        dims = ", ".join(map(str, (*kernels[name].grid, *kernels[name].block)))
        for var, start, extent in loops:
            run.append(f"  for (int {var} = {start}; {var} < {start + extent}; ++{var})")
        assigned = "".join(f"emu_host_{var} = {var}; " for var, _, _ in loops)
        run.append(f"  {{ {assigned}emu_launch({dims}, emu_thread_{number}); }}")
    out = built.spec.workload.output_name
    run.append(f"  {{ FILE* f = fopen(files[{len(names)}], \"wb\"); fwrite({out}_buf, sizeof({ctypes[out]}), "
               f"{arrays[out].size}, f); fclose(f); }}")
    run.append("  return 0;\n}")
    program[:0] = [f"static int emu_host_{var};" for var in sorted(host_variables)]
    return host + "\n" + "\n".join(program + run)


def program_source(settings: list) -> str:
    """The program of ``settings`` ((build, scratch) each): each setting's code in a namespace of its own, their
    headers included once before; ``program SETTING ORDER FILES...`` runs the setting numbered SETTING in ORDER
    (0 forward, 1 reverse) on FILES."""
    parts, includes = [], {}
    for number, (setting, its_scratch) in enumerate(settings):
        code = _setting(setting, _arrays(setting, None, its_scratch))
        lines = code.splitlines()
        includes |= dict.fromkeys(line.strip() for line in lines if line.strip().startswith("#include"))
        body = "\n".join(line for line in lines if not line.strip().startswith("#include"))
        parts.append(f"namespace emu_setting_{number} {{\n{body}\n}}")
    cases = " ".join(f"case {number}: return emu_setting_{number}::run(argv + 3);" for number in range(len(settings)))
    main = (f"int main(int argc, char** argv) {{ emu_reverse = atoi(argv[2]); switch (atoi(argv[1])) {{ {cases} }} "
            f"return 2; }}")
    return "\n".join([PRELUDE, *includes, *parts, main])


def run_on_cpu(built, inputs: list[np.ndarray], scratch: dict[str, tuple[tuple[int, ...], str]] | None = None,
               together: list | None = None, order: str = "forward") -> np.ndarray:
    """The output of ``built``'s kernels, launched in order on ``inputs`` (the workload's) with the threads of a
    block in ``order`` (ORDERS), ``scratch`` naming the global buffers that TVM's host code allocates between
    them (name: (shape, dtype); scratch_buffers(built) by default). ``together``: the (build, scratch) of every
    setting of a test file, ``built`` among them, compiled into one program (program_source) that runs the one it
    is asked for: the file's settings compile once (a compile's start, headers and link are 0.13 CPU-s of each),
    and its later runs find the program kept."""
    scratch = scratch_buffers(built) if scratch is None else scratch
    settings = together if together is not None else [(built, scratch)]
    (which,) = [number for number, (setting, _) in enumerate(settings) if setting is built]
    arrays = _arrays(built, inputs, settings[which][1])
    out = built.spec.workload.output_name
    output = compile_and_run(program_source(settings), list(arrays.values()), arrays[out].dtype, timeout_s=600,
                             objects=(_runtime_object(),), arguments=(str(which), str(ORDERS.index(order))))
    return output.reshape(built.spec.workload.output_shape()).astype("float32")

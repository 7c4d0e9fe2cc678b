"""The classic shared-memory tree sum (Harris, "Optimizing Parallel Reduction in CUDA", kernels 1–7).

This template is not a schedule of the workload's TensorIR: it is a kernel written in plain TIR
(TVMScript with explicit ``blockIdx.x``/``threadIdx.x`` launches, a ``shared`` buffer and
``tvm_storage_sync``), and the knobs change how it is written. It is lowered by TVM's TIRx pipeline,
which keeps the barriers as written: the default pipeline plans its own (ThreadSync adds a
``__syncthreads()`` wherever one thread reads what another wrote), which cannot express the
warp-synchronous steps of ``last_warp = unrolled``.

Two kernels. The first gives each block of ``threads`` threads a slice of the vector: every
thread sums ``elements_per_thread`` elements in a register (1: one load; 2: Harris's "first add
during load", two loads ``threads`` apart; more: his kernel 7, a grid-stride loop over pairs of
loads, each thread stepping over the whole grid's span), stores that to ``sdata[tid]`` in shared
memory, and the block adds the ``threads`` values in a tree of ``log2(threads)`` steps, each ended
by ``__syncthreads()``; thread 0 writes the block's partial sum to a global buffer. The second
kernel, one block of the same shape, sums those partial sums the same way into ``B[0]``.

``addressing`` picks the tree (Harris's kernels 1–3):

- ``interleaved_divergent``: step s = 1, 2, 4 …; thread tid adds ``sdata[tid + s]`` into
  ``sdata[tid]`` if ``tid % (2s) == 0``: the active threads are spread over every warp, so every
  warp diverges, and the ``%`` is computed at each step.
- ``interleaved_strided``: the same pairs, but thread tid handles ``index = 2·s·tid``: the active
  threads are the first ones (whole warps idle), but a warp's lanes touch words ``2s`` apart, so
  they hit the same shared-memory banks (2-way conflicts at s = 1, 4-way at s = 2 …).
- ``sequential``: s halves from ``threads / 2``; thread tid adds ``sdata[tid + s]`` if tid < s:
  contiguous threads, consecutive words, no conflicts.

``last_warp`` (sequential addressing only; Harris's kernel 5) ends the tree differently once 32
or fewer sums remain, which the first warp holds alone:

- ``tree``: the same loop down to s = 1, each step ending in ``__syncthreads()``.
- ``unrolled``: the steps s = 32 … 1 written out for the first warp, with no ``__syncthreads()``
  and no ``if``: warp-synchronous code. Harris relied on the 32 lanes running in lockstep and on a
  ``volatile`` shared pointer; since Volta's independent thread scheduling that needs
  ``__syncwarp()`` between a lane's read and the write another lane reads: ``volatile`` (which TIR
  writes for a buffer annotated ``tirx.volatile``) keeps each access in memory but does not order
  the lanes. So each step keeps the running sum in a register, reads, ``__syncwarp()``, writes,
  ``__syncwarp()`` (the form NVIDIA's "Using CUDA Warp-Level Primitives" gives).
- ``shuffle``: the first warp's 32 sums never go back to shared memory: five
  ``__shfl_down_sync`` steps (``tvm_warp_shuffle_down``) add them in registers.

``unroll`` (Harris's kernel 6) writes the whole tree out with constant step sizes (TVM unrolls
the loop in its IR), so the loop counter, the shifts and the comparison with the step disappear.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import tvm
from tvm.s_tir import Schedule
from tvm.script import tirx as T

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..targets import FULL_MASK, WARP_SIZE
from ..workloads import DTYPE, SUM_MAX_RUN, Sum
from .common import Template
from .parsing import parsed_once_per_plan

ADDRESSING = ("interleaved_divergent", "interleaved_strided", "sequential")
LAST_WARP = ("tree", "unrolled", "shuffle")


@dataclass(frozen=True)
class ReduceTreeKnobs(KnobSet):
    owner: ClassVar[str] = "reduce_tree"

    addressing: str = knob("sequential", "Which thread adds which pair at each tree step: interleaved_divergent "
                           "(if tid % 2s == 0: divergent warps), interleaved_strided (index 2·s·tid: bank "
                           "conflicts) or sequential (tid < s adds tid + s: neither).", choices=ADDRESSING)
    threads: int = knob(256, "Threads per block = values the shared-memory tree adds (log2 steps).",
                        choices=(64, 128, 256, 512, 1024))
    elements_per_thread: int = knob(32, "Elements each thread sums in a register before the tree: 1 = one load, "
                                    "2 = first add during load, more = a grid-stride loop over pairs of loads.",
                                    choices=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
    last_warp: str = knob("shuffle", "How the last 32 sums are added (sequential addressing): tree (with "
                          "__syncthreads), unrolled (warp-synchronous, __syncwarp) or shuffle (__shfl_down_sync "
                          "in registers).", choices=LAST_WARP)
    unroll: bool = knob(True, "Write the tree's steps out with constant step sizes instead of a loop.")


@dataclass(frozen=True)
class Plan:
    """The sizes the kernels are written with."""

    n: int
    k: ReduceTreeKnobs

    @property
    def span(self) -> int:
        """Elements one block sums."""
        return self.k.threads * self.k.elements_per_thread

    @property
    def blocks(self) -> int:
        return self.n // self.span

    @property
    def second_run(self) -> int:
        """Partial sums each thread of the second kernel adds before its tree."""
        return -(-self.blocks // self.k.threads)


def check_knobs(workload: Sum, k: ReduceTreeKnobs) -> Plan:
    """Refuse, one sentence each, what cannot make a correct kernel; return the plan otherwise."""
    plan = Plan(workload.n, k)
    if workload.n % plan.span:
        raise InvalidKnobs(f"This kernel has no partial blocks: n = {workload.n:,} must be a multiple of threads × "
                           f"elements_per_thread = {plan.span:,}.", ("threads", "elements_per_thread"))
    if k.last_warp != "tree" and k.addressing != "sequential":
        raise InvalidKnobs(f"last_warp = {k.last_warp} hands the last 32 sums to the first warp, which holds them "
                           f"only with sequential addressing (interleaved trees keep their sums 2s apart).",
                           ("last_warp", "addressing"))
    if k.elements_per_thread + plan.second_run > SUM_MAX_RUN:
        raise InvalidKnobs(f"A thread would add {k.elements_per_thread} elements and then {plan.second_run} partial "
                           f"sums in one float32 register, more than {SUM_MAX_RUN} in a row (the rounding grows "
                           f"with the run): use more threads or a different elements_per_thread.",
                           ("elements_per_thread", "threads"))
    return plan


def schedule(workload: Sum, k: ReduceTreeKnobs) -> Schedule:
    """The kernels as a module (a Schedule with an empty trace: they are written, not scheduled)."""
    plan = check_knobs(workload, k)
    return Schedule(tvm.IRModule({"main": parsed_kernel(plan)}))


def tree_steps(threads: int, addressing: str, last_warp: str) -> tuple[int, ...]:
    """The step sizes s of the loop that ends each step with __syncthreads(), in order."""
    steps = threads.bit_length() - 1
    if addressing != "sequential":
        return tuple(1 << i for i in range(steps))
    stop = WARP_SIZE if last_warp != "tree" else 0  # the last warp's steps are written apart
    return tuple(s for s in (threads >> (i + 1) for i in range(steps)) if s > stop)


def kernel(p: Plan):  # noqa: PLR0915 - two kernels, read top to bottom
    k = p.k
    N, THREADS, E, BLOCKS, RUN2 = p.n, k.threads, k.elements_per_thread, p.blocks, p.second_run
    LOG = THREADS.bit_length() - 1
    STEPS = len(tree_steps(THREADS, k.addressing, k.last_warp))
    ADDR, LAST = k.addressing, k.last_warp
    PAIRS = E // 2  # loads per thread come in pairs threads apart (kernel 4's first add during load)
    GRID_SPAN = 2 * THREADS * BLOCKS  # a grid-stride step over pairs (kernel 7)
    steps = T.unroll if k.unroll else T.serial

    @T.inline
    def tree(sdata, tx, total, out, at):
        # sdata[0 .. THREADS) holds one sum per thread; thread 0 writes their sum to out[at].
        if ADDR == "interleaved_divergent":
            for i in steps(LOG):
                if tx % (2 << i) == 0:
                    sdata[tx] = sdata[tx] + sdata[tx + (1 << i)]
                T.tvm_storage_sync("shared")
        elif ADDR == "interleaved_strided":
            for i in steps(LOG):
                if 2 * (1 << i) * tx < THREADS:
                    sdata[2 * (1 << i) * tx] = sdata[2 * (1 << i) * tx] + sdata[2 * (1 << i) * tx + (1 << i)]
                T.tvm_storage_sync("shared")
        else:
            for i in steps(STEPS):
                if tx < (THREADS >> (i + 1)):
                    sdata[tx] = sdata[tx] + sdata[tx + (THREADS >> (i + 1))]
                T.tvm_storage_sync("shared")
        if LAST == "tree":
            if tx == 0:
                out[at] = sdata[0]
        elif LAST == "unrolled":
            # Warp-synchronous: only the first warp, no __syncthreads(); each lane reads its
            # partner's word, waits for the warp, then writes its own.
            if tx < WARP_SIZE:
                total[0] = sdata[tx]
                for j in T.unroll(6):
                    total[0] = total[0] + sdata[tx + (WARP_SIZE >> j)]
                    T.call_extern("void", "__syncwarp")
                    sdata[tx] = total[0]
                    T.call_extern("void", "__syncwarp")
                if tx == 0:
                    out[at] = total[0]
        else:
            # The first warp adds the last 64 sums: one shared load each, then registers only.
            if tx < WARP_SIZE:
                total[0] = sdata[tx] + sdata[tx + WARP_SIZE]
                for j in T.unroll(5):
                    total[0] = total[0] + T.tvm_warp_shuffle_down(T.uint32(FULL_MASK), total[0],
                                                                  WARP_SIZE >> (j + 1), WARP_SIZE, WARP_SIZE)
                if tx == 0:
                    out[at] = total[0]

    @T.prim_func
    def main(A: T.Buffer((N,), DTYPE), B: T.Buffer((1,), DTYPE)):
        partial = T.alloc_buffer((BLOCKS,), DTYPE)
        # Kernel 1: each block's sum into partial[bx].
        with T.launch_thread("blockIdx.x", BLOCKS) as bx:
            tx = T.launch_thread("threadIdx.x", THREADS)
            sdata = T.alloc_buffer((THREADS,), DTYPE, scope="shared")
            total = T.alloc_buffer((1,), DTYPE, scope="local")
            if E == 1:
                sdata[tx] = A[bx * THREADS + tx]
            else:
                total[0] = T.float32(0)
                for j in T.serial(PAIRS):
                    total[0] = total[0] + (A[j * GRID_SPAN + bx * 2 * THREADS + tx]
                                           + A[j * GRID_SPAN + bx * 2 * THREADS + THREADS + tx])
                sdata[tx] = total[0]
            T.tvm_storage_sync("shared")
            tree(sdata, tx, total, partial, bx)
        # Kernel 2: one block sums the partial sums into B[0].
        with T.launch_thread("blockIdx.x", 1):
            tx = T.launch_thread("threadIdx.x", THREADS)
            sdata = T.alloc_buffer((THREADS,), DTYPE, scope="shared")
            total = T.alloc_buffer((1,), DTYPE, scope="local")
            total[0] = T.float32(0)
            for j in T.serial(RUN2):
                if j * THREADS + tx < BLOCKS:
                    total[0] = total[0] + partial[j * THREADS + tx]
            sdata[tx] = total[0]
            T.tvm_storage_sync("shared")
            tree(sdata, tx, total, B, 0)

    return main


TEMPLATE = Template(
    name="reduce_tree",
    title="Sum — the shared-memory tree, written as a kernel (Harris's reduction kernels 1–7)",
    summary="A kernel written in plain TIR: each thread sums a few elements, the block adds its threads' sums "
            "in a shared-memory tree (interleaved or sequential addressing, the last warp by tree, "
            "warp-synchronous steps or shuffles), and a second one-block kernel adds the blocks' partial sums.",
    workload=Sum,
    knobs=ReduceTreeKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("threads", "elements_per_thread"), "threadIdx.x": ("threads",)},
    shared_knobs=("threads",),
    # TVM's default pipeline plans shared-memory barriers itself (it adds a __syncthreads() wherever it sees
    # a hazard, and refuses to inside the first warp's `if`); this kernel writes its own, warp-synchronous
    # steps included, which the TIRx pipeline keeps as written.
    pipeline="tirx",
)


parsed_kernel = parsed_once_per_plan(kernel)  # its T.inline calls ask inspect for the stack each

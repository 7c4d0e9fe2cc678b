"""The sum the TVM way: scheduled TensorIR, ``rfactor`` and a reduction loop bound to threadIdx.x.

The workload's one reduction over n elements is split into
``[loads per thread, blocks, threads, vector]``, a grid-stride order: step j of thread tx of block
bx reads the ``vector`` consecutive elements at ``j·(blocks·threads·vector) + (bx·threads + tx)·vector``,
so a warp's loads are contiguous. Two ``rfactor`` steps turn the one reduction into three:

1. ``B_rf_rf[tx, bx]`` (in a register): a thread's serial sum of its elements;
2. ``B_rf[bx]`` (a global buffer): the sum over the block's threads, a reduction loop bound to
   threadIdx.x, which TVM's LowerCrossThreadReduction turns into ``tvm_thread_allreduce`` and then
   into warp shuffles (``__shfl_down_sync``) plus one shared-memory exchange between warps;
3. ``B[0]``: a second kernel of one block, whose threads each add a few of the partial sums and
   then meet in the same cross-thread reduction.

``vector`` > 1 copies each step's elements into registers first (``cache_read`` 'local' with a
vectorized loop: one ``float2``/``float4`` load); the adds that follow cannot be vectorized, since
they all add into one accumulator.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import SUM_MAX_RUN, Sum
from .common import Template, bind, new_schedule, schedule_errors


@dataclass(frozen=True)
class ReduceRfactorKnobs(KnobSet):

    threads: int = knob(256, "Threads per block: the reduction loop bound to threadIdx.x (TVM adds their sums "
                        "with warp shuffles and shared memory).", choices=(32, 64, 128, 256, 512, 1024))
    elements_per_thread: int = knob(32, "Elements each thread sums serially in a register before the threads "
                                    "meet (blocks = n / (threads × elements_per_thread)).",
                                    choices=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
    vector: int = knob(4, "Elements per load instruction (4 = float4): consecutive elements copied to "
                       "registers together.", choices=(1, 2, 4))


def blocks(workload: Sum, k: ReduceRfactorKnobs) -> int:
    return workload.n // (k.threads * k.elements_per_thread)


def check_knobs(workload: Sum, k: ReduceRfactorKnobs) -> None:
    span = k.threads * k.elements_per_thread
    if k.elements_per_thread % k.vector:
        raise InvalidKnobs(f"Each thread loads vector = {k.vector} elements at a time, so elements_per_thread = "
                           f"{k.elements_per_thread} must be a multiple of it.", ("vector", "elements_per_thread"))
    if workload.n % span:
        raise InvalidKnobs(f"This schedule has no partial blocks: n = {workload.n:,} must be a multiple of threads × "
                           f"elements_per_thread = {span:,}.", ("threads", "elements_per_thread"))
    second = -(-blocks(workload, k) // k.threads)
    if k.elements_per_thread + second > SUM_MAX_RUN:
        raise InvalidKnobs(f"A thread would add {k.elements_per_thread} elements and then {second} partial sums in "
                           f"one float32 register, more than {SUM_MAX_RUN} in a row (the rounding grows with the "
                           f"run): use more threads or a different elements_per_thread.",
                           ("elements_per_thread", "threads"))


def schedule(workload: Sum, k: ReduceRfactorKnobs):
    check_knobs(workload, k)
    grid = blocks(workload, k)
    with schedule_errors(k):
        sch = new_schedule(workload)
        total = sch.get_sblock("B")
        _, r = sch.get_loops(total)
        sch.split(r, factors=[k.elements_per_thread // k.vector, grid, k.threads, k.vector])
        # Kernel 1: one partial sum per block (B_rf[bx]), from one serial sum per thread (B_rf_rf).
        partial = sch.rfactor(sch.get_loops(total)[2], factor_axis=0)
        own = sch.rfactor(sch.get_loops(partial)[3], factor_axis=0)
        _, bx, tx = sch.get_loops(partial)
        bind(sch, bx, "blockIdx.x")
        bind(sch, tx, "threadIdx.x")
        sch.compute_at(own, tx)
        sch.set_scope(own, 0, "local")
        step, _ = sch.get_loops(own)[-2:]
        if k.vector > 1:
            loaded = sch.cache_read(own, 0, "local")
            sch.compute_at(loaded, step)
            sch.vectorize(sch.get_loops(loaded)[-1])
        sch.decompose_reduction(own, step)
        # Kernel 2: one block adds the partial sums, a few per thread, then across its threads.
        _, r = sch.get_loops(total)
        threads2 = min(k.threads, grid)
        sch.split(r, factors=[None, threads2])
        rest = sch.rfactor(sch.get_loops(total)[2], factor_axis=0)
        one, tx = sch.get_loops(total)
        bind(sch, one, "blockIdx.x")
        bind(sch, tx, "threadIdx.x")
        sch.compute_at(rest, tx)
        sch.set_scope(rest, 0, "local")
        sch.decompose_reduction(rest, sch.get_loops(rest)[-1])
        return sch


TEMPLATE = Template(
    name="reduce_rfactor",
    title="Sum — the TVM way: rfactor + a reduction bound to threadIdx.x (cross-thread reduction)",
    summary="Scheduled TensorIR: the reduction is split into loads per thread, blocks, threads and a vector, "
            "rfactor makes per-thread and per-block partial sums, and TVM lowers the reduction over threadIdx.x "
            "to warp shuffles plus shared memory; a second one-block kernel adds the blocks' sums.",
    workload=Sum,
    knobs=ReduceRfactorKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("threads", "elements_per_thread"), "threadIdx.x": ("threads",)},
    shared_knobs=("threads",),
)

"""Matrix multiply C = A·B, from one output per thread to the classic tiled GPU GEMM.

Each CUDA block computes a ``block_m × block_n`` tile of C. Inside it the rows are split
(vthread_y, threads, thread_m) and the columns (vthread_x, threads, thread_n), so the
threads per block follow from the tiles: ``block_m / (vthread_y · thread_m)`` by
``block_n / (vthread_x · thread_n)``. With shared caches, the reduction walks K in steps
of ``block_k``: all threads of a block first copy a ``block_m × block_k`` slice of A and a
``block_k × block_n`` slice of B to shared memory together (cooperative fetching), then
each thread reads its operands from there, optionally through registers.

The naive kernel — one output per thread, every operand read from global memory — is
``thread_m = thread_n = 1``, vthreads 1, all caches off (preset ``matmul-naive-1024``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import Matmul
from .common import Template, bind, check_float32_output, cooperative_fetch, new_schedule, schedule_errors

BLOCK_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
THREAD_TILES = (1, 2, 4, 8, 16)
VTHREADS = (1, 2, 4, 8)


@dataclass(frozen=True)
class MatmulKnobs(KnobSet):

    block_m: int = knob(64, "Rows of C computed by one CUDA block (blockIdx.y tiles).", choices=BLOCK_TILES)
    block_n: int = knob(64, "Columns of C computed by one CUDA block (blockIdx.x tiles).", choices=BLOCK_TILES)
    thread_m: int = knob(4, "Consecutive rows of C each thread computes (per virtual thread).", choices=THREAD_TILES)
    thread_n: int = knob(4, "Consecutive columns of C each thread computes (per virtual thread).",
                         choices=THREAD_TILES)
    vthread_y: int = knob(1, "Virtual threads along the rows: each thread also computes this many row tiles, "
                          "block_m / vthread_y rows apart.", choices=VTHREADS)
    vthread_x: int = knob(1, "Virtual threads along the columns: column tiles block_n / vthread_x apart.",
                          choices=VTHREADS)
    block_k: int = knob(8, "Reduction step with shared caches: columns of A and rows of B copied to shared "
                        "memory per iteration.", choices=(1, 2, 4, 8, 16, 32, 64))
    shared_a: bool = knob(True, "Stage each block_m × block_k slice of A in shared memory, loaded once per block.")
    shared_b: bool = knob(True, "Stage each block_k × block_n slice of B in shared memory, loaded once per block.")
    register_tiles: bool = knob(True, "Copy a thread's A and B operands of each reduction step to registers "
                                "before the multiply-adds (cache_read 'local').")
    local_accumulator: bool = knob(True, "Accumulate C in registers and write it once at the end (cache_write "
                                   "'local'), instead of updating global memory at every step.")
    fetch_vector: int = knob(1, "Elements each thread copies per instruction in the cooperative fetch "
                             "(4 = float4 loads).", choices=(1, 2, 4))
    shared_pad: int = knob(0, "Elements added to each row of the shared tiles (storage_align), so that threads "
                           "reading down a column hit different memory banks; 0 = no padding.",
                           choices=(0, 1, 2, 4, 8))
    transpose_a: bool = knob(False, "Store A's shared tile transposed (block_k × block_m), so that a thread's "
                             "rows of A lie side by side in shared memory and can be read as vectors.")
    read_vector: int = knob(1, "Elements each thread reads per instruction from shared memory into its register "
                            "tiles (4 = float4): B always, A when transpose_a is on.", choices=(1, 2, 4))
    double_buffer: bool = knob(False, "Two copies of each shared tile: the block loads the next K slice while "
                               "it multiplies the current one, one barrier per step (software pipelining).")
    unroll_max_step: int = knob(0, "Unroll the loops of a thread's work whose total trip count is at most this "
                                "(pragma_auto_unroll_max_step); 0 = leave the loops rolled.",
                                choices=(0, 16, 64, 256, 512, 1024))
    hoist_init: bool = knob(False, "Zero the accumulators in their own loop before the reduction "
                            "(decompose_reduction), instead of testing 'first step?' at every multiply-add.")


def threads_per_block(k: MatmulKnobs) -> tuple[int, int]:
    """(threadIdx.y, threadIdx.x) extents implied by the tiles."""
    return k.block_m // (k.vthread_y * k.thread_m), k.block_n // (k.vthread_x * k.thread_n)


def check_knobs(workload: Matmul, k: MatmulKnobs) -> None:
    for block, vthreads, per_thread, axis in (("block_m", "vthread_y", "thread_m", "rows"),
                                              ("block_n", "vthread_x", "thread_n", "columns")):
        step = getattr(k, vthreads) * getattr(k, per_thread)
        if getattr(k, block) % step:
            raise InvalidKnobs(
                f"{block} = {getattr(k, block)} {axis} cannot be shared evenly by threads that each take "
                f"{vthreads} × {per_thread} = {step}; choose {block} as a multiple of {step}.",
                (block, vthreads, per_thread),
            )
    if k.fetch_vector > 1 and (k.shared_a or k.shared_b):
        # A vector load needs whole vectors in every row and addresses aligned to the
        # vector, in global and in shared memory (a misaligned float4 faults at run time).
        v = k.fetch_vector
        rows = {"k": workload.k, "block_k": k.block_k} if k.shared_a else {}
        rows |= {"n": workload.n, "block_n": k.block_n} if k.shared_b else {}
        rows["shared_pad"] = k.shared_pad
        bad = {name: size for name, size in rows.items() if size % v}
        if bad:
            listed = ", ".join(f"{name} = {size}" for name, size in bad.items())
            raise InvalidKnobs(
                f"fetch_vector = {v} copies {v} consecutive elements at once, but {listed} "
                f"{'is' if len(bad) == 1 else 'are'} not a multiple of {v}: the vectors would straddle "
                f"rows or be misaligned.",
                ("fetch_vector", *(name for name in bad if name in k.to_dict())),
            )


    if k.transpose_a and not k.shared_a:
        raise InvalidKnobs("transpose_a changes the layout of A's shared tile, so it needs shared_a on.",
                           ("transpose_a", "shared_a"))
    if k.double_buffer and not (k.shared_a or k.shared_b):
        raise InvalidKnobs("double_buffer doubles the shared tiles, so it needs shared_a or shared_b on.",
                           ("double_buffer", "shared_a", "shared_b"))
    if k.read_vector > 1:
        # A thread's register tile is read from shared memory in vectors: its length and
        # every shared row must hold whole, aligned vectors.
        v = k.read_vector
        sizes = {"thread_n": k.thread_n, "shared_pad": k.shared_pad}
        if k.transpose_a:
            sizes["thread_m"] = k.thread_m
        bad = [name for name, size in sizes.items() if size % v]
        if not k.register_tiles or not k.shared_b:
            raise InvalidKnobs(f"read_vector = {v} vectorises the copy from shared memory into registers, so "
                               f"it needs register_tiles and shared_b on.",
                               ("read_vector", "register_tiles", "shared_b"))
        if bad:
            raise InvalidKnobs(f"read_vector = {v} reads {v} consecutive elements at once, but "
                               f"{', '.join(f'{n} = {sizes[n]}' for n in bad)} "
                               f"{'is' if len(bad) == 1 else 'are'} not a multiple of {v}.",
                               ("read_vector", *bad))


def schedule(workload: Matmul, k: MatmulKnobs):
    check_float32_output(workload, "matmul")
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Matmul, k: MatmulKnobs):
    sch = new_schedule(workload)
    c = sch.get_sblock("C")
    output = sch.cache_write(c, 0, "local") if k.local_accumulator else c
    # (shared stage, length of its rows): A's tile is block_m × block_k, B's block_k ×
    # block_n; TVM clips a tile wider than the matrix to the matrix.
    shared = []
    if k.shared_a:
        a_shared = sch.cache_read(c, 0, "shared")
        if k.transpose_a:
            sch.transform_layout(a_shared, ("write", 0), lambda i, r: (r, i))
        shared.append((a_shared, min(k.block_m, workload.m) if k.transpose_a else min(k.block_k, workload.k)))
    if k.shared_b:
        shared.append((sch.cache_read(c, 1, "shared"), min(k.block_n, workload.n)))
    registers = [sch.cache_read(c, i, "local") for i in (0, 1)] if k.register_tiles else []

    threads_y, threads_x = threads_per_block(k)
    i, j = sch.get_loops(output)[:2]
    by, vy, ty, yi = sch.split(i, factors=[None, k.vthread_y, threads_y, k.thread_m])
    bx, vx, tx, xi = sch.split(j, factors=[None, k.vthread_x, threads_x, k.thread_n])
    sch.reorder(by, bx, vy, vx, ty, tx, yi, xi)
    for loop, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread.y"), (vx, "vthread.x"),
                      (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        bind(sch, loop, tag)

    if k.local_accumulator:
        # Keep unit loops so that the accumulation always has its row/column loops.
        sch.compute_at(c, tx, preserve_unit_loops=True)
    *_, ci, cj, kk = sch.get_loops(c)
    # The reduction goes outside the thread's tile: per step, load its operands once and
    # update all its outputs. With shared caches it walks K in block_k slices.
    if shared:
        ko, ki = sch.split(kk, factors=[None, k.block_k])
        sch.reorder(ko, ki, ci, cj)
    else:
        ki = kk
        sch.reorder(ki, ci, cj)

    # Registers first: compute_at needs the consumer already under the target loop.
    for operand, stage in enumerate(registers):
        sch.compute_at(stage, ki)
        # B's register row is contiguous in shared memory; A's only when transposed.
        if k.read_vector > 1 and (operand == 1 or k.transpose_a):
            inner = sch.get_loops(stage)[-1]
            sch.vectorize(sch.split(inner, factors=[None, k.read_vector])[1])
    for stage, row in shared:
        # ko lies inside the thread loops; the copy's own threadIdx loops have the same
        # extents and TVM merges them with those, so each thread copies only its share.
        sch.compute_at(stage, ko)
        if k.shared_pad:
            # storage_align makes the row stride ≡ offset (mod factor); with factor =
            # row + pad and offset 0 the stride is exactly row + pad elements.
            sch.storage_align(stage, 0, axis=0, factor=row + k.shared_pad, offset=0)
        cooperative_fetch(sch, stage, ko, [("threadIdx.y", threads_y), ("threadIdx.x", threads_x)],
                          vector=k.fetch_vector)
    if k.hoist_init:
        sch.decompose_reduction(c, ko if shared else ki)
    if k.double_buffer:
        # ko's body is [copy A, copy B, multiply] (the copies that exist): copies at stage 0
        # fetch step ko + 1 while the multiply at stage 1 uses step ko.
        sch.annotate(ko, "software_pipeline_stage", [0] * len(shared) + [1])
        sch.annotate(ko, "software_pipeline_order", list(range(len(shared) + 1)))
    if k.unroll_max_step:
        sch.annotate(tx, "pragma_auto_unroll_max_step", k.unroll_max_step)
        sch.annotate(tx, "pragma_unroll_explicit", 1)
    return sch


TEMPLATE = Template(
    name="matmul",
    title="Matmul — block, thread and register tiling",
    summary="Block tiles, per-thread tiles, vthreads, a reduction step staged through shared memory "
            "(cooperative, optionally vectorized fetch, optional row padding) and register tiles.",
    workload=Matmul,
    knobs=MatmulKnobs,
    apply=schedule,
    tag_knobs={
        "blockIdx.y": ("block_m",),
        "blockIdx.x": ("block_n",),
        "vthread.y": ("vthread_y",),
        "vthread.x": ("vthread_x",),
        "threadIdx.y": ("block_m", "vthread_y", "thread_m"),
        "threadIdx.x": ("block_n", "vthread_x", "thread_n"),
    },
    shared_knobs=("block_m", "block_n", "block_k", "shared_a", "shared_b", "shared_pad", "double_buffer"),
)

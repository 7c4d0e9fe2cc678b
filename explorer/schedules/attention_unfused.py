"""Attention as three kernels, the way it reads on paper: S = Q·Kᵀ·scale, P = softmax(S), O = P·V.

The workload's stages scheduled with TensorIR primitives, one kernel each:

1. ``S`` — a product per head, tiled as the matmul template tiles C: a block computes a
   ``score_tile × score_tile`` tile of S, each thread ``thread_tile × thread_tile`` of it in
   registers, and the reduction over head_dim walks in steps of ``block_k`` through shared copies
   of Q's and K's slices. The tile is stored to S in global memory: B·H·N² float32 scores.
2. the softmax of each row of S — the rowwise template's fused schedule (``softmax_threads``
   threads per row: its maximum, then its sum of exponentials, in shared memory), which reads S
   and writes P, again B·H·N² float32.
3. ``O`` — the product P·V, tiled the same way (``output_rows`` rows of O, all head_dim columns, per
   block), its float32 sums rounded to float16 as they are stored.

S and P stay float32: the three kernels then do the fused kernel's arithmetic exactly, and the
steps of the lesson differ only in where the scores live. (A framework running float16 attention
this way stores them in float16, half the bytes; the traffic still grows with N².) With causal
the whole of S is computed and the mask is applied by the softmax: this step does the masked
half's work too.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import ATTENTION_DTYPE, DTYPE, Attention, numpy_dtype
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors
from .rowwise import RowWiseKnobs, schedule_passes

TILES = (16, 32, 64, 128)
THREAD_TILES = (1, 2, 4, 8)
MAX_THREADS = 1024
# Buffer indices are 32-bit: a score matrix of more elements cannot be addressed.
MAX_SCORES = 2**31 - 1
WORD = 4  # bytes: a shared-memory bank's width


@dataclass(frozen=True)
class AttentionUnfusedKnobs(KnobSet):

    score_tile: int = knob(64, "Rows and columns of S one CUDA block computes in the first kernel.", choices=TILES)
    output_rows: int = knob(64, "Rows of O one CUDA block computes in the third kernel (all head_dim columns).",
                            choices=TILES)
    thread_tile: int = knob(4, "Rows and columns of each product's tile one thread computes in registers.",
                            choices=THREAD_TILES)
    block_k: int = knob(16, "Reduction step of both products: columns of the left and rows of the right operand "
                        "copied to shared memory per iteration.", choices=(4, 8, 16, 32))
    softmax_threads: int = knob(256, "Threads that share one row of S in the softmax kernel.",
                                choices=(32, 64, 128, 256, 512, 1024))


def check_knobs(workload: Attention, k: AttentionUnfusedKnobs) -> None:
    scores = workload.batch * workload.heads * workload.seq**2
    if scores > MAX_SCORES:
        raise InvalidKnobs(f"The score matrix would hold B·H·N² = {scores:,} elements, more than a 32-bit index "
                           f"reaches: use a smaller batch, fewer heads or a shorter sequence.", ())
    for name, tile, columns in (("score_tile", k.score_tile, k.score_tile),
                                ("output_rows", k.output_rows, workload.head_dim)):
        if tile % k.thread_tile:
            raise InvalidKnobs(f"{name} = {tile} rows cannot be shared by threads of thread_tile = {k.thread_tile} "
                               f"rows each.", (name, "thread_tile"))
        threads = tile // k.thread_tile * (columns // k.thread_tile)
        if threads > MAX_THREADS:
            raise InvalidKnobs(f"A {tile} × {columns} tile with {k.thread_tile} × {k.thread_tile} per thread needs "
                               f"{threads} threads per block, more than the {MAX_THREADS} a CUDA block may have.",
                               (name, "thread_tile"))


def schedule(workload: Attention, k: AttentionUnfusedKnobs):
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Attention, k: AttentionUnfusedKnobs):
    sch = new_schedule(workload)
    # Kernel 1: S, stored from registers.
    scores = sch.get_sblock("S")
    half = numpy_dtype(ATTENTION_DTYPE).itemsize
    tile_product(sch, sch.cache_write(scores, 0, "local"), scores, k.score_tile, k.score_tile, k.thread_tile,
                 k.block_k, shared_rows=((k.block_k, half), (k.block_k, half)))
    # Kernel 2: the row softmax, S → P.
    softmax = RowWiseKnobs(threads=k.softmax_threads, rows_per_block=1, vector=1, fusion="fused")
    schedule_passes(sch, sch.get_sblock("P"), [sch.get_sblock("row_max"), sch.get_sblock("exp_sum")], softmax)
    # Kernel 3: O = P·V, summed in float32 registers and rounded to float16 as it is stored.
    sums = sch.get_sblock("O_float32")
    sch.set_scope(sums, 0, "local")
    tile_product(sch, sch.get_sblock("O"), sums, k.output_rows, workload.head_dim, k.thread_tile, k.block_k,
                 shared_rows=((k.block_k, numpy_dtype(DTYPE).itemsize), (workload.head_dim, half)))
    return sch


def tile_product(sch, output, product, rows: int, columns: int, thread_tile: int, block_k: int,
                 shared_rows: tuple[tuple[int, int], tuple[int, int]]) -> None:
    """Tile a batched product: ``product`` (a sum over the last loop, both operands read from shared
    slices of ``block_k``) accumulates in registers under ``output``, the stage that stores it, whose
    loops are (batch…, row, column). A block computes rows × columns of a matrix (the batch loops on
    blockIdx.z), a thread thread_tile × thread_tile.
    ``shared_rows``: (elements, bytes per element) of a row of each operand's shared slice."""
    *batch, i, j = sch.get_loops(output)
    threads_y, threads_x = rows // thread_tile, columns // thread_tile
    bz = sch.fuse(*batch)
    by, ty, yi = sch.split(i, factors=[None, threads_y, thread_tile])
    bx, tx, xi = sch.split(j, factors=[None, threads_x, thread_tile])
    sch.reorder(bz, by, bx, ty, tx, yi, xi)
    for loop, tag in ((bz, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                      (tx, "threadIdx.x")):
        bind(sch, loop, tag)
    sch.compute_at(product, tx, preserve_unit_loops=True)
    *_, ci, cj, kk = sch.get_loops(product)
    ko, ki = sch.split(kk, factors=[None, block_k])
    sch.reorder(ko, ki, ci, cj)
    threads = [("threadIdx.y", threads_y), ("threadIdx.x", threads_x)]
    for operand in (0, 1):
        stage = sch.cache_read(product, operand, "shared")
        sch.compute_at(stage, ko)
        # Rows one 4-byte word longer: a thread's rows lie thread_tile rows after its neighbour's,
        # and without the pad every thread of a warp would read the same bank.
        row, itemsize = shared_rows[operand]
        sch.storage_align(stage, 0, axis=-2, factor=row + WORD // itemsize, offset=0)
        cooperative_fetch(sch, stage, ko, threads)
    sch.decompose_reduction(product, ko)


TEMPLATE = Template(
    name="attention_unfused",
    title="Attention — three kernels: scores, softmax, output",
    summary="S = Q·Kᵀ·scale tiled like a matmul and stored to global memory, a row softmax that reads S and "
            "writes P, then O = P·V tiled again: the N × N scores of every head go through global memory twice.",
    workload=Attention,
    knobs=AttentionUnfusedKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.y": ("score_tile", "output_rows"), "blockIdx.x": ("score_tile",),
               "threadIdx.y": ("score_tile", "output_rows", "thread_tile"),
               "threadIdx.x": ("score_tile", "thread_tile", "softmax_threads")},
    shared_knobs=("score_tile", "output_rows", "block_k"),
)

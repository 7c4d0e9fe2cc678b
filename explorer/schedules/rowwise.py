"""Row-wise kernels — softmax, LayerNorm, RMSNorm — as one template, the way TVM's dlight rule
``general_reduction`` treats them: every row goes through one or two reductions (softmax: max,
then the sum of exponentials; LayerNorm: the sum, then the sum of squared deviations; RMSNorm:
the sum of squares), then an elementwise pass writes the row out.

Each row is reduced by ``threads`` threads (``threadIdx.x``): the reduction loop is split so
that thread t sums elements t, t + threads, … (neighbouring threads read neighbouring elements:
coalesced), and the loop bound to ``threadIdx.x`` is a cross-thread reduction that TVM lowers
to warp shuffles, plus a shared-memory exchange between warps. ``rows_per_block`` rows share a
CUDA block (``threadIdx.y``). ``fusion`` says where the passes meet:

- ``separate``: each pass is its own kernel; the row statistics go through global memory and
  every kernel reads the whole input again (what framework operators do one by one);
- ``fused``: one kernel per block of rows; the statistics stay in shared memory, but each pass
  reads the row again from global memory (the L2 cache catches some of it) — dlight's schedule;
- ``on_chip``: one kernel, and the block first copies its rows into shared memory: the input
  leaves DRAM once, every pass reads it from shared memory.

``vector`` is the width of the loads and stores TVM vectorizes: the output pass (its stores
and loads) and, with ``on_chip``, the copy into shared memory. The reduction passes read one
element per instruction: TVM vectorizes only loops whose iterations are independent, and a
reduction loop is not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import InvalidKnobs
from ..gpus import DEFAULT
from ..knobs import KnobSet, knob
from ..workloads import LayerNorm, RMSNorm, RowWise, Softmax, numpy_dtype
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors

FUSIONS = ("separate", "fused", "on_chip")
# The largest shared memory a block may opt in to on any GPU the explorer targets (H100); the
# verifier checks the target's own limit.
# The largest on-chip row the template writes (the target's own limit is checked when it is verified).
MAX_SHARED_BYTES = DEFAULT.max_shared_per_block
# Widest load or store of one thread: 16 bytes (float4, or 8 halves).
MAX_VECTOR_BYTES = 16
# The output pass computes in float32 whatever the input's type, and TVM's CUDA code generator
# cannot write a float32 vector wider than 16 bytes (an 8-lane broadcast becomes a make_ulonglong4
# call with 8 arguments, which does not compile): that pass takes at most 4 lanes.
OUTPUT_LANES = 4


@dataclass(frozen=True)
class RowWiseKnobs(KnobSet):
    owner: ClassVar[str] = "rowwise"

    threads: int = knob(256, "Threads that share one row (threadIdx.x): each sums every threads-th element, then "
                        "the threads combine their sums (warp shuffles, then shared memory across warps).",
                        choices=(32, 64, 128, 256, 512, 1024))
    rows_per_block: int = knob(1, "Rows one CUDA block handles side by side (threadIdx.y): threads × rows_per_block "
                               "threads per block.", choices=(1, 2, 4, 8, 16, 32))
    vector: int = knob(1, "Elements per load instruction in the copy into shared memory (4 floats or 8 halves = "
                       "16 bytes) and per store in the output pass (at most 4: its arithmetic is float32).",
                       choices=(1, 2, 4, 8))
    fusion: str = knob("fused", "separate: one kernel per pass, statistics through global memory; fused: one kernel, "
                       "each pass reads the row again from global memory; on_chip: one kernel that copies its rows "
                       "to shared memory once and reads them from there.", choices=FUSIONS)


def row_tile_bytes(workload: RowWise, k: RowWiseKnobs) -> int:
    """Shared memory the on_chip copy of a block's rows takes."""
    return k.rows_per_block * workload.cols * numpy_dtype(workload.dtype).itemsize


def check_knobs(workload: RowWise, k: RowWiseKnobs) -> None:
    if k.threads * k.rows_per_block > 1024:
        raise InvalidKnobs(f"threads × rows_per_block = {k.threads * k.rows_per_block} threads per block, more "
                           f"than the 1024 a CUDA block may have.", ("threads", "rows_per_block"))
    width = k.vector * numpy_dtype(workload.dtype).itemsize
    if width > MAX_VECTOR_BYTES:
        raise InvalidKnobs(f"vector = {k.vector} {workload.dtype} elements are {width} bytes, wider than the 16 bytes "
                           f"one load or store can move.", ("vector",))
    if workload.cols % k.vector:
        raise InvalidKnobs(f"vector = {k.vector} loads {k.vector} consecutive elements at once, but a row of "
                           f"{workload.cols} is not a multiple of {k.vector}: the vectors would straddle rows.",
                           ("vector",))
    if k.fusion == "separate" and workload.rows % k.rows_per_block:
        # Found by the CPU emulation (tests/test_knob_space.py): with rows = 5 and rows_per_block = 8 the
        # statistics kernel's threads y = 5 … 7 write sq_sum[5 … 7], past its 5 entries.
        missing = k.rows_per_block - workload.rows % k.rows_per_block
        raise InvalidKnobs(f"fusion = separate needs rows_per_block = {k.rows_per_block} to divide rows = "
                           f"{workload.rows}: TVM writes each row's statistic from its cross-thread reduction without "
                           f"checking that the row exists, so the last block's {missing} missing rows would write past "
                           f"the end of the statistics' buffer (use fused or on_chip, or a rows_per_block that divides "
                           f"rows).", ("fusion", "rows_per_block"))
    if k.fusion == "on_chip" and row_tile_bytes(workload, k) > MAX_SHARED_BYTES:
        raise InvalidKnobs(f"on_chip keeps {k.rows_per_block} row(s) of {workload.cols} {workload.dtype} elements in "
                           f"shared memory, {row_tile_bytes(workload, k):,} bytes, more than the "
                           f"{MAX_SHARED_BYTES:,} a block may have: use fewer rows_per_block or fusion = fused.",
                           ("fusion", "rows_per_block"))


def schedule(workload: RowWise, k: RowWiseKnobs):
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _rows(sch, loop, k: RowWiseKnobs):
    """Split a row loop into (blockIdx.x, threadIdx.y) and bind them."""
    bx, ty = sch.split(loop, factors=[None, k.rows_per_block])
    bind(sch, bx, "blockIdx.x")
    if k.rows_per_block > 1:
        bind(sch, ty, "threadIdx.y")
    return bx, ty


def _across_threads(sch, loop, k: RowWiseKnobs):
    """Thread t takes elements t, t + threads, …: the loop bound to threadIdx.x goes outside the
    loop each thread walks (for a reduction, TVM makes it a cross-thread reduction)."""
    walk, tx = sch.split(loop, factors=[None, k.threads])
    sch.reorder(tx, walk)
    bind(sch, tx, "threadIdx.x")
    return walk


def _schedule(workload: RowWise, k: RowWiseKnobs):
    sch = new_schedule(workload)
    schedule_passes(sch, sch.get_sblock(workload.output_name),
                    [sch.get_sblock(name) for name in workload.reductions], k)
    return sch


def schedule_passes(sch, output, reductions, k: RowWiseKnobs) -> None:
    """Schedule row reductions and the elementwise pass that reads them (``output``, whose first
    input is the rows): all loops but the last of each stage are its rows (fused into one), the
    last runs along a row. Also the softmax of the attention_unfused template."""
    if k.fusion == "on_chip":
        # One shared copy of X that every pass reads.
        x_shared = sch.cache_read(output, 0, "shared.dyn", consumer_blocks=[*reductions, output])

    *rows, j = sch.get_loops(output)
    bx, _ = _rows(sch, _one_loop(sch, rows), k)
    lanes = min(k.vector, OUTPUT_LANES)
    jo, tx, vec = sch.split(j, factors=[None, k.threads, lanes])
    sch.reorder(tx, jo)
    bind(sch, tx, "threadIdx.x")
    if lanes > 1:
        sch.vectorize(vec)

    for block in reversed(reductions):
        if k.fusion == "separate":
            *rows, col = sch.get_loops(block)
            _rows(sch, _one_loop(sch, rows), k)
        else:
            # Under the output's block loop: one row statistic per row of the block. Its cross-thread
            # reduction leaves the statistic in shared memory (red_result), behind a barrier, for every
            # thread of the row to read. "local" makes each thread read it from there; a "shared" copy
            # is written by thread x = 0 and TVM's barrier insertion takes the copy and its reads,
            # indexed by the innermost thread (threadIdx.y when rows_per_block > 1), for one thread's:
            # no barrier between them, a race.
            sch.set_scope(block, 0, "local")
            sch.compute_at(block, bx, preserve_unit_loops=True)
            row, col = sch.get_loops(block)[-2:]
            if k.rows_per_block > 1:
                bind(sch, row, "threadIdx.y")
        _across_threads(sch, col, k)

    if k.fusion == "on_chip":
        sch.compute_at(x_shared, bx, preserve_unit_loops=True)
        cooperative_fetch(sch, x_shared, bx, [("threadIdx.y", k.rows_per_block), ("threadIdx.x", k.threads)],
                          vector=k.vector)


def _one_loop(sch, loops):
    """The row loops as one (a batch of matrices' rows are rows too)."""
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


TITLES = {Softmax: "Softmax", LayerNorm: "LayerNorm", RMSNorm: "RMSNorm"}

# One template per workload (a template schedules one workload class), one schedule for all three.
TEMPLATES = tuple(
    Template(
        name=workload.kind,
        title=f"{title} — one row per group of threads",
        summary="Threads per row with a cross-thread reduction, rows per block, vector loads, and where the passes "
                "meet: separate kernels, one fused kernel re-reading the row, or the row kept in shared memory.",
        workload=workload,
        knobs=RowWiseKnobs,
        apply=schedule,
        tag_knobs={"blockIdx.x": ("rows_per_block",), "threadIdx.x": ("threads",),
                   "threadIdx.y": ("rows_per_block",)},
        shared_knobs=("fusion", "rows_per_block"),
    )
    for workload, title in TITLES.items()
)

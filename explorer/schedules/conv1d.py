"""The 1-D convolution blog's schedules ("TVM: 1D convolution GPU Optimization", 2025),
translated from TE to TensorIR.

One template covers every version of the blog:

- naive: ``formulation = "full_reduction"`` (sum over all M+N-1 positions), one output per
  CUDA block (``threads_x = threads_y = 1``);
- v1: ``formulation = "filter_reduction"`` (sum over the N filter taps), blocks only;
- v2: ``threads_x = 8``; v3: ``threads_y = threads_x = 4``;
- v4: ``threads_x = 32``, ``local_accumulator``, ``filter_shared``, ``reduction_split = 4``;
- v5: ``threads_y = 8, threads_x = 4``, ``reduction_split = 8``, ``unroll``.

The defaults are v5, the blog's fastest schedule.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import Conv1d
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors

THREADS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# The workload's prim_func variant behind each formulation.
FORMULATIONS = {"filter_reduction": "default", "full_reduction": "full_reduction"}


@dataclass(frozen=True)
class Conv1dKnobs(KnobSet):

    formulation: str = knob("filter_reduction", "How each output is summed: over the N filter taps (the blog's v1 "
                            "rewrite) or over all M+N-1 input positions, most of them zero (the naive baseline).",
                            choices=tuple(FORMULATIONS))
    threads_y: int = knob(8, "Threads per block along threadIdx.y; consecutive groups of threads_x outputs "
                          "(1 = no threadIdx.y).", choices=THREADS)
    threads_x: int = knob(4, "Threads per block along threadIdx.x, one output each (1 with threads_y = 1: one "
                          "output per CUDA block, the blog's naive and v1).", choices=THREADS)
    local_accumulator: bool = knob(True, "Accumulate each output in a register and write it to global memory once "
                                   "(cache_write 'local').")
    filter_shared: bool = knob(True, "Stage the filter in shared memory, reduction_split taps at a time, before the "
                               "threads use them (cache_read 'shared').")
    reduction_split: int = knob(8, "Filter taps per step of the reduction loop: the inner loop's length and the "
                                "shared chunk of the filter (1 = no split).", choices=(1, 2, 4, 8, 16, 32, 64))
    unroll: bool = knob(True, "Unroll the inner reduction loop (the reduction_split taps of one step).")


def schedule(workload: Conv1d, k: Conv1dKnobs):
    if k.unroll and k.reduction_split == 1:
        raise InvalidKnobs(
            "unroll unrolls the inner reduction loop, which has a single step when reduction_split = 1: "
            "split the reduction first.",
            ("unroll", "reduction_split"),
        )
    reduction = workload.filter_length if k.formulation == "filter_reduction" else workload.output_shape()[0]
    if k.reduction_split > reduction:
        raise InvalidKnobs(
            f"reduction_split = {k.reduction_split} is longer than the whole reduction ({reduction} terms with "
            f"the {k.formulation} formulation).",
            ("reduction_split",),
        )
    outputs = workload.output_shape()[0]
    if k.threads_y * k.threads_x > outputs:
        raise InvalidKnobs(
            f"A block of threads_y × threads_x = {k.threads_y * k.threads_x} threads is more than the {outputs} "
            f"outputs: some threads would have no output at all.",
            ("threads_y", "threads_x"),
        )
    if k.filter_shared and k.formulation == "full_reduction":
        # The naive sum reads W[i - k] at a position that depends on the output, and most
        # of the taps it visits lie outside the filter: there is no chunk of W to stage.
        raise InvalidKnobs(
            "filter_shared stages chunks of the filter per reduction step, which only the filter_reduction "
            "formulation has (the full reduction walks the input, not the filter).",
            ("filter_shared", "formulation"),
        )
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Conv1d, k: Conv1dKnobs):
    sch = new_schedule(workload, FORMULATIONS[k.formulation])
    compute = sch.get_sblock("B")
    output = sch.cache_write(compute, 0, "local") if k.local_accumulator else compute
    filter_shared = sch.cache_read(compute, 1, "shared") if k.filter_shared else None

    # The blog splits the output axis by factor (threads_y * threads_x), then that part by
    # threads_x: output i = (bx * threads_y + ty) * threads_x + tx. Unit thread loops are
    # not bound, so the naive and v1 kernels launch one thread per block as in the blog.
    i = sch.get_loops(output)[0]
    threads = [("threadIdx.y", k.threads_y), ("threadIdx.x", k.threads_x)]
    bx, *thread_loops = sch.split(i, factors=[None, *(n for _, n in threads if n > 1)])
    bind(sch, bx, "blockIdx.x")
    for loop, tag in zip(thread_loops, [t for t, n in threads if n > 1], strict=False):
        bind(sch, loop, tag)
    innermost = thread_loops[-1] if thread_loops else bx
    if output is not compute:
        sch.compute_at(compute, innermost)

    if k.reduction_split > 1 or filter_shared is not None:
        r = sch.get_loops(compute)[-1]
        r_outer, r_inner = sch.split(r, factors=[None, k.reduction_split])
        if k.unroll:
            sch.unroll(r_inner)
        if filter_shared is not None:
            # The blog's TE lowering has every thread copy the whole chunk between two
            # barriers: correct but redundant. Here the copy loop is split over the same
            # thread extents as the compute's thread loops, which TVM merges with them, so
            # each tap is loaded by one thread; TVM's storage-sync pass puts a barrier
            # before the copy (no thread overwrites a chunk another still reads) and one
            # after it (no thread reads a tap before it is written).
            sch.compute_at(filter_shared, r_outer)
            cooperative_fetch(sch, filter_shared, r_outer, threads)
    return sch


TEMPLATE = Template(
    name="conv1d",
    title="1-D convolution — from naive to v5",
    summary="Reduction formulation, 1-D and 2-D threads, register accumulator, filter in shared memory, "
            "reduction split and unroll, as in the 1-D convolution blog (2025).",
    workload=Conv1d,
    knobs=Conv1dKnobs,
    apply=schedule,
    tag_knobs={
        "threadIdx.x": ("threads_x",),
        "threadIdx.y": ("threads_y",),
        "blockIdx.x": ("threads_y", "threads_x"),
    },
    shared_knobs=("filter_shared", "reduction_split"),
)

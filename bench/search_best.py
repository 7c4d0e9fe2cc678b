"""Search for the fastest knobs of a template on this machine's GPU; print them as a
ready-to-paste ``[[preset]]`` block.

    python bench/search_best.py --list
    python bench/search_best.py dw-96 [dw-21 ...] [--sample N] [--rounds R] [--workers N]
    python bench/search_best.py all
    python bench/search_best.py dw-96 --tune 256      # MetaSchedule on the same workload instead
    python bench/search_best.py conv2d-async-resnet-last --rounds 1 --max-minutes 3.5
    python bench/search_best.py matmul-async-1024 --rounds 1 --max-minutes 3

A plan names a benchmark (explorer.benchmarks: the workload, its goal and PyTorch's
time), a template, a grid over its knobs, how many grid points to try (a random sample
when the grid is larger) and the knobs to polish afterwards by coordinate descent
(:func:`explorer.search.sweep.refine`: one knob at a time over all its values). Invalid
combinations are skipped with their reason; each kernel is checked against NumPy and timed
by the measurement worker, which stops a kernel past its time limit.

Every finished point is appended to ``<plan>-<gpu>.jsonl`` in ``--results`` (default
``bench/results/search``) the moment it is known. Running a plan again reuses those points
(nothing is compiled or measured twice): an interrupted search resumes, a finished one
continues the descent from its best point. The preset block is also written to
``<plan>-<gpu>.toml`` there. ``--max-minutes`` stops starting new points after that long and
prints the preset of the best point so far: the same command run again goes on from there.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from result_files import RESULTS, gpu_slug

from explorer.analysis.ranking import static_score
from explorer.benchmarks import Benchmark, get_benchmark
from explorer.build import Spec
from explorer.errors import ExplorerError
from explorer.measure import gpu_measurer
from explorer.schedules import get_template
from explorer.search.grid import Grid
from explorer.search.results import Point
from explorer.search.sweep import compile_pool, refine, run

SEARCH_RESULTS = RESULTS / "search"  # default of --results

# Depthwise: the blog's knobs plus the structure a fast kernel may need on a small image
# (more, smaller blocks; no shared staging and no barrier, relying on L1: one round trip to
# memory) or a large one (whole rows per block, several outputs per thread, register
# windows, vthreads so that neighbouring threads store neighbouring addresses). Thread
# counts and vthreads that exceed a block are rejected in milliseconds, so the grid can
# be generous and sampled.
DEPTHWISE_GRID = (
    "blocking_h=4,8,16,32,0",
    "blocking_w=8,16,32,64,0",
    "num_thread_y=1,2,4,8,16",
    "num_thread_x=4,8,16,32,64",
    "num_vthread_x=1,2,4",
    "input_cache=shared,local,none",
    "filter_cache=shared,local,none",
    "unroll=true",
)
DEPTHWISE_REFINE = ("blocking_h", "blocking_w", "num_thread_y", "num_thread_x", "num_vthread_y", "num_vthread_x",
                    "input_cache", "filter_cache", "unroll")
# Flattened depthwise: every combination of block size and run length (168 points), unrolled.
DEPTHWISE_FLAT_GRID = ("threads=all", "outputs_per_thread=all", "input_cache=all", "filter_cache=all", "unroll=true")
DEPTHWISE_FLAT_REFINE = ("threads", "outputs_per_thread", "input_cache", "filter_cache", "unroll")
# Matmul: the classic register-tiled GEMM space (block tile, thread tile, vthreads, K step,
# vector fetch, shared-row padding against bank conflicts), plus what a fast SIMT SGEMM
# adds: A transposed in shared memory, float4 reads into registers, double buffering,
# unrolling, the accumulator zeroed outside the reduction. The first search (91 points)
# found 2-wide thread tiles, 32-wide block columns and scalar fetches always slower.
MATMUL_GRID = (
    "block_m=32,64,128", "block_n=64,128", "thread_m=4,8", "thread_n=4,8",
    "vthread_y=1,2", "vthread_x=1,2", "block_k=8,16,32", "fetch_vector=4", "shared_pad=0,4",
    "transpose_a=true,false", "read_vector=1,4", "double_buffer=true,false", "unroll_max_step=0,512",
    "hoist_init=true",
)
MATMUL_REFINE = ("block_m", "block_n", "thread_m", "thread_n", "vthread_y", "vthread_x", "block_k", "fetch_vector",
                 "shared_pad", "transpose_a", "read_vector", "double_buffer", "unroll_max_step", "hoist_init")
# Modern fp32 matmul (matmul_async): block, warp and thread tiles, K step, pipeline depth with
# cp.async, register double buffering, split-K. Tiles whose warp is not 32 threads are rejected
# in milliseconds, so the grids are sampled. At 1024³ a 128 × 128 block tile gives 64 blocks
# for 132 SMs: the grid tries smaller blocks, smaller thread tiles (more threads per block) and
# K split 2 or 4 ways. At 4096³ there are blocks enough; the grid tries the large tiles that
# raise the multiply-adds per instruction issued (8 × 8 and 16 × 8 per thread, 128 × 256 per
# block), each with and without register double buffering. All write C in 16-byte stores: at
# 1024³ every block writes its tile at the same moment, with nothing left to hide the stores.
MATMUL_ASYNC_COMMON = ("async_copy=true", "transpose_a=true", "read_vector=4", "shared_pad=4", "dynamic_shared=true",
                       "unroll_max_step=512", "store_vector=4")
MATMUL_ASYNC_1024_GRID = (
    "block_m=64,128", "block_n=64,128", "warp_m=32,64", "warp_n=32,64", "thread_m=4,8", "thread_n=8",
    "split_k=1,2,4", "block_k=8,16,32", "stages=2,3,4", "register_double_buffer=true,false", *MATMUL_ASYNC_COMMON,
)
MATMUL_ASYNC_4096_GRID = (
    "block_m=128", "block_n=128,256", "warp_m=32,64", "warp_n=32,64", "thread_m=8,16", "thread_n=8",
    "split_k=1", "block_k=8,16,32", "stages=2,3,4", "register_double_buffer=true,false", *MATMUL_ASYNC_COMMON,
)
MATMUL_ASYNC_REFINE = ("block_m", "block_n", "block_k", "warp_m", "warp_n", "thread_m", "thread_n", "stages",
                       "register_double_buffer", "transpose_a", "shared_pad", "unroll_max_step", "store_vector")
MATMUL_ASYNC_1024_REFINE = (*MATMUL_ASYNC_REFINE, "split_k")
# Tensor cores (matmul_tensorcore): block and warp tiles, K step, pipeline depth.
MATMUL_TC_GRID = ("block_m=64,128,256", "block_n=64,128,256", "block_k=32,64", "warp_m=32,64", "warp_n=32,64",
                  "stages=2,3,4", "async_copy=true", "shared_pad=0,8", "swizzle=true,false", "dynamic_shared=true")
MATMUL_TC_REFINE = ("block_m", "block_n", "block_k", "warp_m", "warp_n", "stages", "shared_pad", "swizzle")
# Conv1d: the blog's knobs (one output per thread; filter staged in shared or read from L1).
CONV1D_GRID = ("formulation=filter_reduction", "threads_y=1,2,4,8,16", "threads_x=8,16,32,64,128,256",
               "local_accumulator=all", "filter_shared=all", "reduction_split=1,2,4,8,16,32", "unroll=all")
CONV1D_REFINE = ("threads_y", "threads_x", "local_accumulator", "filter_shared", "reduction_split", "unroll")
# Conv2d: the AutoTVM tutorial's whole space (10.4 million points), sampled.
CONV2D_GRID = ("tile_f=all", "tile_y=all", "tile_x=all", "tile_rc=all", "tile_ry=all", "tile_rx=all",
               "auto_unroll_max_step=all", "unroll_explicit=all")
CONV2D_REFINE = ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "auto_unroll_max_step",
                 "unroll_explicit")
# Conv2d as today's GEMMs (conv2d_async): channel tiles and split-K slices (how many blocks for
# 132 SMs), thread tiles along channels and a row (7) or one pixel, K step and pipeline depth,
# the filter tile transposed or not. Thread counts over 1024 and vectors that do not fit the
# tiles are rejected in milliseconds, so the grid is sampled; the descent also tries columns.
CONV2D_ASYNC_GRID = (
    "block_f=16,32,64,128", "thread_f=2,4,8", "thread_y=1", "thread_x=1,7", "split_k=4,8,16,32",
    "block_k=4,8,16", "stages=2,3,4", "async_copy=true", "fetch_vector=4", "transpose_filter=true,false",
    "read_vector=2,4", "shared_pad=0,4", "dynamic_shared=true", "unroll_max_step=512",
)
CONV2D_ASYNC_REFINE = ("block_f", "thread_f", "thread_y", "split_k", "block_k", "stages", "transpose_filter",
                       "read_vector", "shared_pad", "unroll_max_step")


@dataclass(frozen=True)
class Plan:
    id: str
    template: str
    benchmark: Benchmark  # the workload, its goal and PyTorch's time
    grid: tuple[str, ...]
    sample: int | None  # points of the grid to try; None = all
    refine: tuple[str, ...]

    def base(self) -> Spec:
        return Spec(self.template, self.benchmark.workload, get_template(self.template).knobs())


def _plans(*rows) -> dict[str, Plan]:
    """Plans by id from rows (id, template, benchmark id, grid, sample, knobs to refine)."""
    return {id: Plan(id, template, get_benchmark(benchmark), grid, sample, refine)
            for id, template, benchmark, grid, sample, refine in rows}


# The reductions: every knob value (a few hundred points each).
REDUCE_TREE_GRID = ("addressing=sequential", "threads=all", "elements_per_thread=all", "last_warp=all", "unroll=all")
REDUCE_TREE_REFINE = ("threads", "elements_per_thread", "last_warp")
REDUCE_RFACTOR_GRID = ("threads=all", "elements_per_thread=all", "vector=all")
REDUCE_RFACTOR_REFINE = ("threads", "elements_per_thread", "vector")
ROWWISE_GRID = ("threads=all", "rows_per_block=all", "vector=all", "fusion=all")
ROWWISE_REFINE = ("threads", "rows_per_block", "vector", "fusion")
# Attention on tensor cores: every knob value (64 points, fewer after the refusals).
ATTENTION_MMA_GRID = ("block_q=all", "warps=all", "block_kv=all", "stages=all", "pad=all")
ATTENTION_MMA_REFINE = ("block_q", "warps", "block_kv", "stages", "pad")
# Attention on Hopper (wgmma, TMA): every knob value (32 points, fewer after the refusals).
ATTENTION_HOPPER_GRID = ("block_kv=all", "consumers=all", "stages=all", "warp_specialize=all", "overlap=all")
ATTENTION_HOPPER_REFINE = ("block_kv", "consumers", "stages", "warp_specialize", "overlap")
# Attention on CUDA cores, K and V in shared memory (the fastest of part 1's steps): the tiles over the grid
# with float32 tiles and 16-byte loads (fewest instructions beside the multiply-adds); the descent then
# tries float16 tiles and the other load widths from the best point.
ATTENTION_FUSED_GRID = ("block_q=all", "block_kv=all", "rows_per_thread=all", "threads_per_row=all", "kv_shared=true",
                        "float_tiles=true", "vector=4")
ATTENTION_FUSED_REFINE = ("block_q", "block_kv", "rows_per_thread", "threads_per_row", "float_tiles", "vector")

PLANS = _plans(
    ("dw-21", "depthwise_blog", "dw-21", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-32", "depthwise_blog", "dw-32", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-64", "depthwise_blog", "dw-64", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-96", "depthwise_blog", "dw-96", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-21-flat", "depthwise_flat", "dw-21", DEPTHWISE_FLAT_GRID, None, DEPTHWISE_FLAT_REFINE),
    ("dw-32-flat", "depthwise_flat", "dw-32", DEPTHWISE_FLAT_GRID, None, DEPTHWISE_FLAT_REFINE),
    ("dw-96-flat", "depthwise_flat", "dw-96", DEPTHWISE_FLAT_GRID, None, DEPTHWISE_FLAT_REFINE),
    ("dw-96-k5", "depthwise_blog", "dw-96-k5", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-96-m2", "depthwise_blog", "dw-96-m2", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("dw-96-m2-k5", "depthwise_blog", "dw-96-m2-k5", DEPTHWISE_GRID, 500, DEPTHWISE_REFINE),
    ("conv1d-16384", "conv1d", "conv1d-16384", CONV1D_GRID, 600, CONV1D_REFINE),
    ("conv2d-resnet-last", "conv2d_autotvm", "conv2d-resnet-last", CONV2D_GRID, 1500, CONV2D_REFINE),
    ("conv2d-async-resnet-last", "conv2d_async", "conv2d-resnet-last", CONV2D_ASYNC_GRID, 100, CONV2D_ASYNC_REFINE),
    ("matmul-1024", "matmul", "matmul-1024", MATMUL_GRID, 800, MATMUL_REFINE),
    ("matmul-async-1024", "matmul_async", "matmul-1024", MATMUL_ASYNC_1024_GRID, 160, MATMUL_ASYNC_1024_REFINE),
    ("matmul-async-4096", "matmul_async", "matmul-4096", MATMUL_ASYNC_4096_GRID, 100, MATMUL_ASYNC_REFINE),
    ("matmul-tc-fp16-4096", "matmul_tensorcore", "matmul-fp16-4096", MATMUL_TC_GRID, 60, MATMUL_TC_REFINE),
    ("matmul-tc-bf16-4096", "matmul_tensorcore", "matmul-bf16-4096", MATMUL_TC_GRID, 60, MATMUL_TC_REFINE),
    ("sum-hbm-tree", "reduce_tree", "sum-hbm", REDUCE_TREE_GRID, 80, REDUCE_TREE_REFINE),
    ("sum-hbm-rfactor", "reduce_rfactor", "sum-hbm", REDUCE_RFACTOR_GRID, 80, REDUCE_RFACTOR_REFINE),
    ("sum-l2-rfactor", "reduce_rfactor", "sum-l2", REDUCE_RFACTOR_GRID, 80, REDUCE_RFACTOR_REFINE),
    ("softmax-4096", "softmax", "softmax-4096", ROWWISE_GRID, 80, ROWWISE_REFINE),
    ("softmax-vocab-fp16", "softmax", "softmax-vocab-fp16", ROWWISE_GRID, 80, ROWWISE_REFINE),
    ("layer-norm-fp16", "layer_norm", "layer-norm-fp16", ROWWISE_GRID, 80, ROWWISE_REFINE),
    ("rms-norm-fp16", "rms_norm", "rms-norm-fp16", ROWWISE_GRID, 80, ROWWISE_REFINE),
    ("attention-mma-d128", "attention_mma", "attention-4096-d128", ATTENTION_MMA_GRID, None, ATTENTION_MMA_REFINE),
    ("attention-mma-d128-causal", "attention_mma", "attention-4096-d128-causal", ATTENTION_MMA_GRID, None,
     ATTENTION_MMA_REFINE),
    ("attention-mma-d64", "attention_mma", "attention-4096", ATTENTION_MMA_GRID, None, ATTENTION_MMA_REFINE),
    ("attention-hopper-d128", "attention_hopper", "attention-4096-d128", ATTENTION_HOPPER_GRID, None,
     ATTENTION_HOPPER_REFINE),
    ("attention-hopper-d128-causal", "attention_hopper", "attention-4096-d128-causal", ATTENTION_HOPPER_GRID, None,
     ATTENTION_HOPPER_REFINE),
    ("attention-fused-4096", "attention_fused", "attention-4096", ATTENTION_FUSED_GRID, 120, ATTENTION_FUSED_REFINE),
)


def search(plan: Plan, args) -> None:
    # Compile and measuring workers both resolve the target ("auto") to this machine's GPU.
    measurer = None if args.static else gpu_measurer()
    if measurer is None and not args.static:
        raise ExplorerError("No CUDA GPU on this machine: the search must measure kernels (--static for a dry run).")
    from explorer.measure import local_gpu

    device = local_gpu() if measurer else "static"
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"{plan.id}-{gpu_slug(device)}"
    log = args.results / f"{stem}.jsonl"
    base = plan.base()
    previous = _load(log, type(base.knobs))
    if previous:
        print(f"{plan.id}: resuming with {len(previous)} points from {log}", file=sys.stderr)
    start = time.perf_counter()
    deadline = time.monotonic() + 60 * args.max_minutes if args.max_minutes and measurer else None
    with log.open("a") as out:

        def record(point: Point) -> None:
            out.write(json.dumps(point.to_json()) + "\n")
            out.flush()
            if deadline is not None and time.monotonic() > deadline:
                raise OutOfTime

        pool = compile_pool(args.workers, timeout_s=args.compile_timeout)
        try:
            options = dict(target=None, measurer=measurer, scorer=static_score, pool=pool, on_point=record,
                           on_progress=functools.partial(_bar, measured=measurer is not None))
            grid = Grid.parse(base, plan.grid)
            result = run(grid, sample=args.sample or plan.sample, seed=args.seed, previous=previous, **options)
            points = {p.knobs: p for p in (*previous.values(), *result.points)}
            if args.rounds:
                result = refine(base, plan.refine, rounds=args.rounds, previous=points, **options)
            best = result.best
        except OutOfTime:
            best = fastest(_load(log, type(base.knobs)).values())
            print(f"\n{plan.id}: stopped after --max-minutes {args.max_minutes:g}; the same command goes on from "
                  f"here", file=sys.stderr)
        finally:
            pool.shutdown()
    if best is None:
        raise ExplorerError(f"{plan.id}: no valid, correct kernel among the points tried so far.")
    tried = len(_load(log, type(base.knobs)))
    elapsed = time.perf_counter() - start
    if measurer is None:
        print(f"{plan.id}: dry run, {tried} points, this run {elapsed:.0f} s. {result.ranking}\n"
              f"best by the static model: {best.knobs.to_strings()}")
        return
    print(f"{plan.id}: best {best.latency_us:.2f} µs (PyTorch {plan.benchmark.pytorch_us} µs; "
          f"goal {plan.benchmark.goal}); "
          f"{tried} points measured or skipped, this run {elapsed:.0f} s", file=sys.stderr)
    block = preset_block(plan, dataclasses.replace(base, knobs=best.knobs), best.latency_us, device, tried, args)
    (args.results / f"{stem}.toml").write_text(block)
    print(block)


class OutOfTime(Exception):
    """Raised from the point recorder once --max-minutes have passed: it ends the sweep."""


def fastest(points) -> Point | None:
    return min((p for p in points if p.latency_us is not None), key=lambda p: p.latency_us, default=None)


def _load(log: Path, knobs_type) -> dict:
    points = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                point = Point.from_json(knobs_type, json.loads(line))
            except (ValueError, KeyError, ExplorerError):
                continue  # a line cut short by an interruption
            points[point.knobs] = point
    return points


def _bar(progress, measured: bool) -> None:
    filled = round(30 * progress.fraction)
    end = "\n" if progress.fraction >= 1 else ""
    print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {progress.describe(measured)}", end=end, file=sys.stderr,
          flush=True)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a TOML basic string is a JSON string


def _inline(values: dict) -> str:
    return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in values.items()) + " }"


def preset_block(plan: Plan, spec: Spec, latency_us: float, device: str, tried: int, args) -> str:
    command = f"python bench/search_best.py {plan.id}"
    if args.sample:
        command += f" --sample {args.sample}"
    if args.rounds != 2:
        command += f" --rounds {args.rounds}"
    workload = {"kind": spec.workload.kind, **spec.workload.to_dict()}
    versus = f", PyTorch {plan.benchmark.pytorch_us} µs" if plan.benchmark.pytorch_us else ""
    lines = [
        "[[preset]]",
        f'id = "best-{plan.id}"',
        f'title = {json.dumps(f"Fastest found by search: {spec.workload.label()}")}',
        f'source = {json.dumps(f"search on {device}: {tried} configurations of the {spec.template} template")}',
        f'template = "{spec.template}"',
        'claim = '
        f'{json.dumps(f"The fastest of {tried} configurations searched on {device}: {latency_us:.2f} µs{versus}.")}',
        f"found_by = {json.dumps(command)}",
        f"workload = {_inline(workload)}",
        f"knobs = {_inline(spec.knobs.to_dict())}",
        f'reported = [ {{ what = "this schedule, found by search", value_us = {latency_us:.2f}, '
        f'hardware = {json.dumps(device)}, this_schedule = true }} ]',
    ]
    return "\n".join(lines) + "\n"


def tune_plan(plan: Plan, args) -> None:
    from explorer.search.tune import tune

    args.results.mkdir(parents=True, exist_ok=True)
    base = plan.base()
    work_dir = args.results / f"{plan.id}-metaschedule"  # MetaSchedule's own records: a rerun resumes
    result = tune(base.workload, args.tune, work_dir=str(work_dir), workers=args.workers,
                  on_progress=lambda p: print(f"\r{p.describe()}", end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    (work_dir / "best.json").write_text(json.dumps(result.to_json(), indent=2))
    print(f"{plan.id}: MetaSchedule best {result.best_us:.2f} µs after {result.trials} trials "
          f"({result.elapsed_s:.0f} s); PyTorch {plan.benchmark.pytorch_us} µs; trace in {work_dir / 'best.json'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plans", nargs="*", help="plan ids, or 'all'")
    parser.add_argument("--list", action="store_true", help="list the plans and their grids")
    parser.add_argument("--sample", type=int, default=None, help="grid points to try (default: the plan's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2, help="coordinate-descent rounds after the grid (0: none)")
    parser.add_argument("--workers", type=int, default=None, help="compile processes (default: one per core)")
    parser.add_argument("--compile-timeout", type=float, default=120.0, help="seconds per point in a compile worker")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="on a GPU, stop after this long and print the best point so far (a rerun goes on "
                             "from there)")
    parser.add_argument("--tune", type=int, default=None, metavar="TRIALS", help="run MetaSchedule instead")
    parser.add_argument("--results", type=Path, default=SEARCH_RESULTS,
                        help=f"where points and presets go ({SEARCH_RESULTS})")
    parser.add_argument("--static", action="store_true",
                        help="dry run without a GPU: rank by the static analyses (prints no preset)")
    args = parser.parse_args(argv)
    if args.list or not args.plans:
        for plan in PLANS.values():
            grid = Grid.parse(plan.base(), plan.grid)
            print(f"{plan.id:20} {plan.base().workload.label()}: {grid.size:,} grid points, sample {plan.sample}, "
                  f"goal {plan.benchmark.goal}\n{'':20} --grid {' --grid '.join(plan.grid)}")
        return 0
    ids = list(PLANS) if args.plans == ["all"] else args.plans
    unknown = [i for i in ids if i not in PLANS]
    if unknown:
        print(f"error: unknown plan(s) {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    try:
        for plan_id in ids:
            (tune_plan if args.tune else search)(PLANS[plan_id], args)
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

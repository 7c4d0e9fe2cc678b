"""Sweep throughput: configurations per minute end to end — compile (one process per core)
+ verify + check against NumPy + time on the GPU (one kernel at a time) — for the depthwise
template on [1,256,96,96] 3×3, over points sampled from bench/search_best.py's depthwise
grid. Goal: ≥ 200 per minute on the 16-core H100 machine.

    python bench/sweep_throughput.py [--points 400] [--workers N] [--no-write]

The clock includes starting the compile workers, and the CUDA binary cache starts empty
(a fresh EXPLORER_CUDA_CACHE), so every kernel is compiled for real. Invalid combinations
count as configurations (the sweep has to reject them too); the valid ones measured per
minute are reported beside. Without a GPU it reports compile + verify + static analyses
only, and says so. Writes bench/results/runs/sweep-throughput-gpu.md (or -cpu.md) and, on a GPU,
the goal's row of docs/results.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile

# Before explorer is imported: this process and every worker read the cache location once.
os.environ["EXPLORER_CUDA_CACHE"] = tempfile.mkdtemp(prefix="explorer-cuda-cache-")

from docs_section import Result, run_file, write_result, write_section
from search_best import PLANS

from explorer.analysis.ranking import static_score
from explorer.measure import gpu_measurer
from explorer.search.grid import Grid
from explorer.search.results import FAILED, INVALID
from explorer.search.sweep import cpu_count, run

PLAN = PLANS["dw-96"]
GOAL_PER_MINUTE = 200


def goal_result(per_minute: float, valid_per_minute: float, points: int, device: str, workers: int, date: str,
                command: str, run: str = "") -> Result:
    """docs/results.md's row: the goal is the GPU machine's (a CPU-only run measures no kernel)."""
    return Result("measuring", "sweep throughput end to end (compile, verify, check, time), the depthwise template",
                  f"≥ {GOAL_PER_MINUTE} configurations a minute", f"{per_minute:.0f} a minute ({valid_per_minute:.0f} "
                  f"valid; {points} points, {workers} compile processes)", "met" if per_minute >= GOAL_PER_MINUTE
                  else f"missed by {GOAL_PER_MINUTE - per_minute:.0f} a minute", device, date, command, run)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=400, help="grid points to sweep (sampled, fixed seed)")
    parser.add_argument("--workers", type=int, default=None, help="compile processes (default: one per core)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    measurer = gpu_measurer()
    from explorer.measure import local_gpu

    device = local_gpu() if measurer else None
    grid = Grid.parse(PLAN.base(), PLAN.grid)
    result = run(grid, measurer=measurer, scorer=None if measurer else static_score, sample=args.points, seed=1,
                 workers=args.workers,
                 on_progress=lambda p: print(f"\r{p.describe(measurer is not None)}", end="", file=sys.stderr))
    print(file=sys.stderr)
    minutes = result.elapsed_s / 60
    counts = {status: sum(p.status == status for p in result.points) for status in (INVALID, FAILED)}
    valid = len(result.ranked())
    workers = args.workers or cpu_count()
    what = "compile + verify + check + measure" if measurer else "compile + verify + static analyses (no GPU)"
    lines = [
        "| machine | workers | what | points | valid | invalid | failed | seconds | configurations / min | "
        "valid / min |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {device or 'CPU only'} | {workers} | {what} | {len(result.points)} | {valid} | {counts[INVALID]} | "
        f"{counts[FAILED]} | {result.elapsed_s:.1f} | {result.per_minute:.0f} | {valid / minutes:.0f} |",
    ]
    table = "\n".join(lines)
    machine = f"{_cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"
    print(table)
    if measurer:
        print(f"goal ≥ {GOAL_PER_MINUTE}/min: {'met' if result.per_minute >= GOAL_PER_MINUTE else 'NOT met'}")
    if not args.no_write:
        section = "sweep-throughput-gpu" if measurer else "sweep-throughput-cpu"
        if measurer:
            write_result(goal_result(result.per_minute, valid / minutes, len(result.points), device, workers,
                                     str(datetime.date.today()), f"python bench/sweep_throughput.py --points "
                                     f"{args.points}", run_file(section)))
        write_section(section, "\n".join([
            f"## Sweep throughput (depthwise template), {'GPU' if measurer else 'CPU only'}",
            "",
            f"`python bench/sweep_throughput.py --points {args.points}` ({datetime.date.today()}): "
            f"{PLAN.base().workload.label()}, {args.points} points sampled (seed 1) from "
            f"`bench/search_best.py`'s depthwise grid; the clock includes starting the workers, and the CUDA "
            f"binary cache starts empty. Machine: {machine}. Goal: ≥ {GOAL_PER_MINUTE} configurations per "
            "minute end to end on the 16-core H100 machine.",
            "",
            table,
        ]))
    return 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "CPU"


if __name__ == "__main__":
    sys.exit(main())

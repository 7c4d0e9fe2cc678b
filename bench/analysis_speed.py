"""Time the analyses (bank conflicts, tiling, resources) of every shipped preset.

    python bench/analysis_speed.py            # print the table
    python bench/analysis_speed.py --write    # and write its run (bench/results/runs/) and row (docs/results.md)

The target is "all analyses for one setting ≤ 200 ms on the CPU machine": for each preset
the build is made first (it is cached in the app too and timed separately), then the
three analyses run uncached ``--repeat`` times; the median of their sum is reported.
Registers need nvcc (seconds, cached) and are not part of the budget.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

from docs_section import Result, run_file, write_result, write_section

from explorer.analysis import banks, tiling
from explorer.analysis.resources import analyze_resources
from explorer.build import build
from explorer.errors import ExplorerError
from explorer.presets import all_presets

BUDGET_MS = 200.0


def time_preset(preset, repeat: int) -> dict:
    start = time.perf_counter()
    built = build(preset.spec)
    build_ms = (time.perf_counter() - start) * 1000
    runs = {"banks": [], "tiling": [], "resources": [], "total": []}
    for _ in range(repeat):
        banks.analyze_banks.cache_clear()
        tiling._analyze.cache_clear()
        times = {}
        for name, run in (("banks", lambda: banks.analyze_banks(built)),
                          ("tiling", lambda: tiling.analyze_tiling(built)),
                          ("resources", lambda: analyze_resources(built))):
            start = time.perf_counter()
            run()
            times[name] = (time.perf_counter() - start) * 1000
        for name, ms in times.items():
            runs[name].append(ms)
        runs["total"].append(sum(times.values()))
    accesses = sum(len(k.accesses) for k in banks.analyze_banks(built).kernels)
    return {"build": build_ms, "accesses": accesses, **{k: statistics.median(v) for k, v in runs.items()}}


def result(rows: list[tuple], failed: list[str], machine: str, date: str) -> Result:
    """docs/results.md's row: the slowest preset's analyses against the budget."""
    preset, worst = max(rows, key=lambda row: row[1]["total"])
    return Result("app", "the analyses of one setting (bank conflicts, tiling, resources), the slowest preset",
                  f"≤ {BUDGET_MS:.0f} ms", f"{worst['total']:.1f} ms ({preset.id}; {len(rows)} presets"
                  + (f", {len(failed)} did not build" if failed else "") + ")",
                  "met" if worst["total"] <= BUDGET_MS and not failed else
                  f"missed by {max(0.0, worst['total'] - BUDGET_MS):.1f} ms" + (f", {len(failed)} did not build"
                                                                                 if failed else ""),
                  machine, date, "python bench/analysis_speed.py --write", run_file("analysis-speed"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write", action="store_true",
                        help="write the run to bench/results/runs/analysis-speed.md and its row to docs/results.md")
    args = parser.parse_args(argv)
    rows, failed = [], []
    for preset in all_presets().values():
        try:
            rows.append((preset, time_preset(preset, args.repeat)))
        except ExplorerError as error:
            failed.append(f"{preset.id}: {error}")
    lines = [
        "## Analyses per setting (bank conflicts + tiling + resources)",
        "",
        f"`python bench/analysis_speed.py --write` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end: other work on the machine "
        f"slows every row), Python {platform.python_version()}; target: the H100 (no local GPU); "
        f"median of {args.repeat} uncached runs, after the (cached) build. Budget: {BUDGET_MS:.0f} ms.",
        "",
        "| preset | shared accesses | banks ms | tiling ms | resources ms | total ms | build ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for preset, r in rows:
        lines.append(f"| {preset.id} | {r['accesses']} | {r['banks']:.1f} | {r['tiling']:.1f} | {r['resources']:.2f} | "
                     f"{r['total']:.1f} | {r['build']:.0f} |")
    worst = max((r["total"] for _, r in rows), default=0.0)
    lines += ["", f"Slowest: {worst:.1f} ms of {BUDGET_MS:.0f} ms — "
                  f"{'within' if worst <= BUDGET_MS else 'OVER'} budget "
                  f"for all {len(rows)} presets."]
    lines += [f"Could not build {f}" for f in failed]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section("analysis-speed", text)
        write_result(result(rows, failed, f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
                            datetime.date.today().isoformat()))
    return 0 if worst <= BUDGET_MS and not failed else 1


if __name__ == "__main__":
    sys.exit(main())

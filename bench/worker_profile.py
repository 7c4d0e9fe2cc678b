"""The measuring worker's GPU time per measurement, profiled: every lesson step and up to N of its
one-knob neighbours compiled on all cores (as a class server's compile processes do), then measured
one at a time through the real worker process (explorer.measure.measurement.LocalGPU), first with the
short budget a class under load gets (QUICK_SETTINGS), then in full (MeasureSettings()), as the
server measures a quick one again when idle. The worker's own run log gives each measurement's
phases; the table (bench/worker_phases.py) has their medians per template and budget beside the
target, at most 3× the kernel's own time plus 5 ms (issue 50).

    python bench/worker_profile.py [--neighbours 2] [--lessons rowwise attention …] [--write LABEL]

On the H200 test machine (16 cores): about 4 minutes for every lesson with two neighbours each
(the compiles first, a minute or two; then two measurements of each setting). ``--dry-run`` lists
the settings and exits (no GPU needed). Before/after: the same command in a checkout of the older
tree with bench/worker_profile.py and bench/worker_phases.py copied in.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from docs_section import run_file, write_result, write_section
from worker_phases import describe, phase_rows, read_run_line, results

from explorer.analysis.diagnosis.search import neighbours
from explorer.cuda_env import kernel_environment
from explorer.lessons import lessons

ROOT = Path(__file__).resolve().parent.parent
START_METHOD = "spawn"  # this process starts CUDA's worker: its compile processes are spawned, never forked
PROFILED = "the lesson steps and their neighbours, one at a time"  # where the measurements come from, for the rows


def settings_to_profile(lesson_ids: list[str] | None, per_step: int) -> list:
    """Every step of the lessons (all, or ``lesson_ids``), each once, and after each up to
    ``per_step`` of its one-knob neighbours (the first of each knob's directions, in knob order)."""
    chosen = [lesson for lesson in lessons() if not lesson_ids or lesson.id in lesson_ids]
    out = {}
    for lesson in chosen:
        for step in lesson.steps:
            out.setdefault(step.preset.spec, None)
            for moves in neighbours(step.preset.spec)[:per_step]:
                out.setdefault(moves[0][0], None)
    return list(out)


def _compile(spec, directory: str):
    from explorer.server.compiles import compile_library  # the class server's own compile

    result = compile_library(spec, "auto", directory)
    return result if isinstance(result, str) else None  # an ExplorerError: the setting does not build


def compile_all(specs: list, directory: str, workers: int, progress) -> dict:
    """The library of each spec that builds, compiled in ``workers`` processes."""
    os.environ.update(kernel_environment())  # NVRTC's paths, for the processes
    libraries = {}
    context = multiprocessing.get_context(START_METHOD)
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {spec: pool.submit(_compile, spec, directory) for spec in specs}
        for done, (spec, future) in enumerate(futures.items(), start=1):
            try:
                libraries[spec] = future.result()
            except Exception as error:  # a crashed compile process: that setting is left out
                progress(f"compile failed: {spec.template}: {error}")
            if done % 25 == 0:
                progress(f"compiled {done} of {len(specs)}")
    return {spec: path for spec, path in libraries.items() if path}


def measure_all(libraries: dict, budgets: list, run_log: Path, progress) -> list[dict]:
    """Each compiled setting measured through the worker with each budget in turn: the phases its
    run-log line says, with the budget and the kernel's time the measurement says."""
    from explorer.errors import ExplorerError
    from explorer.measure.measurement import LocalGPU
    from explorer.measure.worker import Trial

    gpu = LocalGPU()
    first = next(iter(libraries))
    gpu.warm_up(first, "auto")
    records = []
    for name, settings in budgets:
        started = time.time()
        for spec, library in libraries.items():
            seen = _lines(run_log)
            try:
                result = gpu.measure(Trial(spec, spec.workload, "auto", settings, library))
                kernel_us = result.median_us if result.correct else None
                error = None
            except ExplorerError as failure:  # a crash or a time limit: its row says so
                kernel_us, error = None, str(failure).splitlines()[0]
            new = _lines(run_log)[len(seen):]
            records.append({"template": spec.template, "workload": spec.workload.label(), "budget": name,
                            "kernel_us": kernel_us, "error": error, "line": new[-1] if new else None})
        progress(f"{name}: {len(libraries)} measurements in {time.time() - started:.1f} s")
    gpu.close()
    return records


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def runs_of(records: list[dict]) -> list:
    """The run-log lines of the measurements, with what the bench knows of each in its facts (an
    older worker's line has none)."""
    runs = []
    for record in records:
        if record["line"] is None:
            continue
        run = read_run_line(record["line"])
        facts = {**run.facts, "budget": record["budget"]}
        if record["kernel_us"] is not None:
            facts["kernel_us"] = f"{record['kernel_us']:.2f}"
        elif record["error"] is None:
            facts["check"] = "wrong"
        runs.append(replace(run, facts=facts))
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", help="lesson ids (default: every lesson)")
    parser.add_argument("--neighbours", type=int, default=2, help="one-knob neighbours per step")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="compile processes (default: the cores but one)")
    parser.add_argument("--limit", type=int, help="only the first N settings (a smoke run)")
    parser.add_argument("--out", default=tempfile.gettempdir(), help="where the run log and the results go")
    parser.add_argument("--write", metavar="LABEL",
                        help="write the table to bench/results/runs/worker-profile-LABEL.md and its rows of "
                             "docs/results.md")
    parser.add_argument("--dry-run", action="store_true", help="list the settings and exit")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"[{time.time() - begun:6.1f} s] {message}", file=sys.stderr, flush=True)

    begun = time.time()
    specs = settings_to_profile(args.lessons, args.neighbours)[:args.limit]
    steps = len(settings_to_profile(args.lessons, 0))
    progress(f"{len(specs)} settings: {min(steps, len(specs))} lesson steps and their neighbours")
    if args.dry_run:
        for spec in specs:
            print(spec.template, spec.workload.label(), spec.knobs)
        return 0
    from explorer.measure import QUICK_SETTINGS, MeasureSettings

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_log = out / "worker-profile-runs.log"
    run_log.unlink(missing_ok=True)
    os.environ["EXPLORER_RUN_LOG"] = str(run_log)  # the worker, started below, writes there
    with tempfile.TemporaryDirectory(prefix="worker-profile-") as directory:
        libraries = compile_all(specs, directory, args.workers, progress)
        progress(f"{len(libraries)} of {len(specs)} settings compiled")
        records = measure_all(libraries, [("quick", QUICK_SETTINGS), ("full", MeasureSettings())], run_log, progress)
    (out / "worker-profile.json").write_text(json.dumps(records, indent=1))
    rows = phase_rows(runs_of(records))
    text = describe(rows)
    print(text)
    wall = time.time() - begun
    progress(f"done: {len(records)} measurements; {out / 'worker-profile.json'}, {run_log}")
    if args.write:
        import torch
        import tvm

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        section = f"worker-profile-{args.write}"
        command = f"python bench/worker_profile.py {' '.join(argv or sys.argv[1:])}"
        if not args.lessons and not args.limit:  # every template's steps: the target's current figure
            write_result(*results(rows, PROFILED, f"{gpu}, {os.cpu_count()} cores", time.strftime("%Y-%m-%d"),
                                  command, run_file(section)))
        write_section(section, f"### The measuring worker's phases per measurement: "
                      f"{args.write}\n\n{gpu}, {os.cpu_count()} cores, TVM {tvm.__version__}, PyTorch "
                      f"{torch.__version__}; `{command}`, "
                      f"{time.strftime('%Y-%m-%d')}, {wall:.0f} s: {len(libraries)} settings (lesson steps and "
                      f"one-knob neighbours) measured with the short budget, then in full, one at a time through "
                      f"the worker; medians per template (ms; held: every phase, the GPU held).\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

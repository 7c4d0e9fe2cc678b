"""The server's logs of its work, read for a class's report: the measuring workers' kernel runs
(``EXPLORER_RUN_LOG``: no two on one GPU at once, the GPU's busy share, the phases of a run), the
scheduler's jobs (``EXPLORER_JOB_LOG``: where a measurement waited) and the compile processes'
compiles (``EXPLORER_COMPILE_LOG``: where a compile's seconds went)."""
from __future__ import annotations

import collections
import statistics
from pathlib import Path

from explorer.measure.worker import read_run_line
from explorer.server.compiles import COMPILE_LOG_CUBINS, COMPILE_LOG_TIMES


def kernel_runs_by_gpu(log_path: str, since_ns: int) -> dict[str, list[tuple[int, int]]]:
    """(start, end) in ns of each kernel run in the measuring workers' log since ``since_ns``, by the
    GPU that ran it (a server with several GPUs logs ``gpu=N`` before the phases; "" otherwise)."""
    runs = collections.defaultdict(list)
    for line in Path(log_path).read_text().splitlines():
        head = line.split("|", 1)[0].split()
        pid, start, end = head[:3]
        gpu = head[-1][len("gpu="):] if head[-1].startswith("gpu=") else ""
        if int(start) >= since_ns:
            runs[gpu].append((int(start), int(end)))
    return {gpu: sorted(times) for gpu, times in runs.items()}


def kernel_runs(log_path: str, since_ns: int) -> list[tuple[int, int]]:
    """(start, end) in ns of every kernel run in the log since ``since_ns``, whichever GPU ran it."""
    return sorted(run for runs in kernel_runs_by_gpu(log_path, since_ns).values() for run in runs)


def overlapping_runs(log_path: str, since_ns: int) -> tuple[int, int]:
    """(kernel runs in the log since ``since_ns``, pairs that overlapped in time on one GPU)."""
    by_gpu = kernel_runs_by_gpu(log_path, since_ns)
    overlaps = sum(1 for runs in by_gpu.values() for a, b in zip(runs, runs[1:], strict=False) if b[0] < a[1])
    return sum(len(runs) for runs in by_gpu.values()), overlaps


def run_phases(log_path: str, since_ns: int) -> dict[str, float]:
    """Mean milliseconds per kernel run of each phase the measuring workers logged since ``since_ns``
    (load, data, copy, check, time, graph: a phase a run skipped counts 0; bench/worker_phases.py
    has their medians per template)."""
    totals, runs = collections.Counter(), 0
    for line in Path(log_path).read_text().splitlines():
        run = read_run_line(line)
        if run.start_ns < since_ns:
            continue
        runs += 1
        totals.update(run.phases_ms)
    return {name: total / runs for name, total in totals.items()} if runs else {}


def job_stages(log_path: str, since_s: float) -> dict[str, dict]:
    """Where the students' measurements (the scheduler's job log, explorer/server/scheduler.py)
    spent their time since ``since_s``: compiling (asked → in the GPU's line), waiting for the GPU,
    and on it; the percentiles of each, in seconds. Background jobs and full re-measurements are
    counted apart (``others``: how many ran, and their seconds on the GPU)."""
    compile_s, wait_s, run_s, others, others_s = [], [], [], 0, 0.0
    for line in Path(log_path).read_text().splitlines():
        asked, compiled, started, finished, kind = line.split()[:5]
        if float(asked) < since_s or started == "-":  # never reached the GPU (its compile failed)
            continue
        if kind != "student":  # a full re-measurement was compiled for its first, quick one
            others += 1
            others_s += float(finished) - float(started)
            continue
        compile_s.append(float(compiled) - float(asked))
        wait_s.append(float(started) - float(compiled))
        run_s.append(float(finished) - float(started))
    return {"compile": percentiles(compile_s), "wait_for_gpu": percentiles(wait_s), "on_gpu": percentiles(run_s),
            "others": {"n": others, "gpu_s": others_s}}


COMPILE_STAGES = (("for_a_process", "asked", "started"), ("for_the_page_build", "started", "built"),
                  ("generating", "built", "generated"), ("exporting", "generated", "exported"))
COMPILE_STAGE_WORDS = {"for_a_process": "waiting for a compile process",
                       "for_the_page_build": "waiting for the page's build",
                       "generating": "generating the code (NVRTC)", "exporting": "exporting the library"}


def compile_stages(log_path: str, since_s: float) -> dict:
    """Where the compile processes' seconds went (their compile log, explorer/server/compiles.py)
    since ``since_s``: waiting for a compile process, for the page's build, generating the code
    (NVRTC) and exporting the library, the percentiles of each in seconds; the CPU seconds of a
    compile; the binaries compiled, read from the disk and waited for; the builds that were the
    page's ("kept") and those made in the compile process ("here")."""
    stages = {name: [] for name, _, _ in COMPILE_STAGES}
    cpu, cubins, builds, outcomes = [], collections.Counter(), collections.Counter(), collections.Counter()
    for line in Path(log_path).read_text().splitlines():
        fields = iter(line.split())  # the times, the CPU seconds, the binaries counted, the build, the outcome
        times = {name: None if value == "-" else float(value)  # the names first: zip takes no field past them
                 for name, value in zip(COMPILE_LOG_TIMES, fields, strict=False)}
        if (times["started"] or 0) < since_s:
            continue
        for name, start, end in COMPILE_STAGES:
            if times[start] is not None and times[end] is not None:
                stages[name].append(times[end] - times[start])
        cpu.append(float(next(fields)))
        cubins.update({kind: int(next(fields)) for kind in COMPILE_LOG_CUBINS})
        builds[next(fields)] += 1
        outcomes[next(fields)] += 1
    return {"stages": {name: percentiles(values) for name, values in stages.items()}, "cpu_s": percentiles(cpu),
            "cpu_s_total": sum(cpu), "cubins": dict(cubins), "builds": dict(builds), "outcomes": dict(outcomes)}


def gpu_busy(runs: list[tuple[int, int]], seconds: float, gpus: int = 1) -> float:
    """The share of ``seconds`` during which the measuring workers had a kernel on their ``gpus`` GPUs."""
    return sum(end - start for start, end in runs) / 1e9 / seconds / gpus if seconds > 0 else 0.0


def busy_between(runs: list[tuple[int, int]], start: float, end: float, gpus: int = 1) -> float:
    """The share of the seconds ``start``..``end`` during which kernels of ``runs`` (ns) were on the
    ``gpus`` GPUs."""
    if end <= start:
        return 0.0
    lo, hi = start * 1e9, end * 1e9
    return min(1.0, sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in runs) / (hi - lo) / gpus)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"n": len(values), "p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}

"""Every template's knob space checked on this GPU at the lessons' shapes, and a sample under compute-sanitizer.

    python bench/knob_space_check.py                      # on the GPU machine: the check, its report and rows
    python bench/knob_space_check.py --dry-run [--list]   # anywhere: the plan, and what each template accepts
    python bench/knob_space_check.py --racecheck-before   # the row-wise race (6e8f0d9), before and after its fix

1. Spaces: each template's whole knob space (``Grid.whole``) at each workload of its shipped presets (the
   lessons' shapes; a template without presets at its default workload). A space of at most --whole-up-to
   points is checked whole; a larger one by a seeded uniform draw of its points (``Grid.draws``, --seed),
   taken in that order until --sample of them are accepted (or --max-refused are refused).
2. Accepted or refused: each setting drawn is compiled in a pool of processes, one per core
   (``explorer.server.compiles.compile_library``: schedule, verify, lower, NVRTC, a library the measuring
   worker loads). One the template or TVM refuses (InvalidKnobs) is refused; one whose build fails
   otherwise (another ExplorerError, a crash, a compile past the time limit) is failed.
3. Right or wrong: every accepted setting runs once in the measuring worker through the gate
   (``explorer.measure.measure`` with CHECK: the app's own check, the least timing there is); its output
   refused by the gate, a crash or a time-out is wrong. Compiles and checks overlap; no setting is drawn
   after --budget-s seconds (what is compiling by then is still checked).
4. Sanitizers: the first --sanitize accepted settings of each template at a small shape (SMALL: racecheck
   slows a kernel a hundredfold and more, and what it finds does not depend on the size) run under
   ``compute-sanitizer --tool racecheck`` and ``--tool memcheck``, each in a process of its own
   (``--launch``), --sanitizers at a time, beside the check; their hazards and errors are counted.
5. The run's report, bench/results/runs/knob-space.md (date, machine, command, seconds: a table per template
   and every wrong setting with its link), its rows of docs/results.md (Correctness), and
   bench/results/knob-space-<gpu>.json with every setting's outcome.

--racecheck-before builds rowwise-softmax-fused with rows_per_block = 2 and threads = 64 as the template
built it before commit 6e8f0d9 (each row statistic copied to shared memory by thread x = 0 with no barrier
before the other threads read it: old_row_statistics, a monkeypatch of the template's one set_scope call)
and as it builds it now, runs both under racecheck and says what each reported.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import tvm
from docs_section import Result, run_file, write_result, write_section
from tvm.s_tir import Schedule

from explorer.analysis.ncu import spec_from_json, spec_to_json
from explorer.build import Spec, build, runtime_module_of
from explorer.cuda_env import kernel_environment
from explorer.errors import ExplorerError, InvalidKnobs, summary_line
from explorer.measure import MeasureSettings, local_gpu, measure, shutdown
from explorer.measure.gate import compare
from explorer.presets import all_presets, get_preset
from explorer.schedules import TEMPLATES, rowwise
from explorer.search.grid import Grid
from explorer.search.results import INVALID, VALID
from explorer.search.sweep import compile_point, compile_pool, cpu_count
from explorer.server.compiles import compile_library
from explorer.urlstate import to_query
from explorer.workloads import (
    Attention,
    Conv1d,
    Conv2d,
    DepthwiseConv2d,
    LayerNorm,
    Matmul,
    RMSNorm,
    Softmax,
    Sum,
    numpy_dtype,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
NO_GPU_EXIT = 3
SECTION = "knob-space"  # the run's report: bench/results/runs/knob-space.md (docs/knob-space.md says what it checks)

# The gate's check and the least timing measure() does (explorer.measure.timing.time_function): repeats of
# at least 10 µs, the least MeasureSettings takes, within a budget of 1 ms.
CHECK = MeasureSettings(time_limit_s=20, repeats=1, min_repeat_us=10, timing_budget_ms=1, roofline=False,
                        cuda_graph=False)

# Small shapes of each workload, two each: the CPU test's (tests/test_knob_space.py) and the sanitizer runs'
# (the first). A regular one, and one with odd sizes, other strides, paddings, types or masks.
SMALL = {
    "depthwise_conv2d": (DepthwiseConv2d(batch=1, channels=16, height=16, width=16, kernel=3),
                         DepthwiseConv2d(batch=2, channels=8, height=12, width=20, multiplier=2, kernel=5, stride=2,
                                         padding="VALID", epilogue=True)),
    "conv1d": (Conv1d(input_length=1024, filter_length=8), Conv1d(input_length=700, filter_length=33)),
    "conv2d": (Conv2d(in_channels=64, out_channels=128, height=7, width=7),
               Conv2d(in_channels=32, out_channels=64, height=8, width=8, kernel_h=1, kernel_w=3, stride=2,
                      padding=0)),
    "matmul": (Matmul(m=128, n=128, k=64), Matmul(m=96, n=160, k=48)),
    "sum": (Sum(n=1 << 16), Sum(n=1 << 15)),
    "softmax": (Softmax(rows=16, cols=512), Softmax(rows=6, cols=1000, dtype="float16")),
    "layer_norm": (LayerNorm(rows=16, cols=512), LayerNorm(rows=5, cols=768, dtype="float32")),
    "rms_norm": (RMSNorm(rows=16, cols=512), RMSNorm(rows=5, cols=768, dtype="float32")),
    "attention": (Attention(batch=1, heads=1, seq=128, head_dim=64),
                  Attention(batch=1, heads=2, seq=64, head_dim=128, causal=True)),
}
# The templates whose kernels need shapes of their own (16-bit inputs, whole 64- and 128-row tiles).
OWN_SMALL = {
    "matmul_tensorcore": (Matmul(m=128, n=128, k=64, dtype="float16"), Matmul(m=64, n=128, k=64, dtype="bfloat16")),
    "matmul_hopper": (Matmul(m=128, n=128, k=64, dtype="float16"), Matmul(m=256, n=128, k=128, dtype="bfloat16")),
    "attention_hopper": (Attention(batch=1, heads=1, seq=128, head_dim=64),
                         Attention(batch=1, heads=1, seq=256, head_dim=128, causal=True)),
}

RIGHT, WRONG, REFUSED, FAILED, UNCHECKED = "right", "wrong", "refused", "failed", "unchecked"


def small_workloads(name: str) -> tuple:
    return OWN_SMALL.get(name) or SMALL[TEMPLATES[name].workload.kind]


@contextlib.contextmanager
def old_row_statistics():
    """The row-wise template as it was before its row statistics were made local (commit 6e8f0d9): each
    statistic of the fused and on_chip passes copied into a "shared" buffer that thread x = 0 writes and every
    thread of the row reads, with no barrier between them where rows_per_block > 1. Only the template's own
    call is changed (the caller's code is rowwise.schedule_passes), and only inside the ``with``."""
    set_scope = Schedule.set_scope

    def old(sch, block, buffer_index, storage_scope):
        if storage_scope == "local" and sys._getframe(1).f_code is rowwise.schedule_passes.__code__:
            storage_scope = "shared"
        return set_scope(sch, block, buffer_index, storage_scope)

    Schedule.set_scope = old
    try:
        yield
    finally:
        Schedule.set_scope = set_scope


# -- the plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    """One template's knob space at one workload, and how much of it is checked."""

    grid: Grid
    whole: bool
    wanted: int | None  # accepted settings to check; None: every one

    @property
    def template(self) -> str:
        return self.grid.base.template

    @property
    def workload(self):
        return self.grid.base.workload


def lesson_workloads(name: str) -> list:
    """The workloads of the shipped presets of template ``name`` (its default workload where it has none)."""
    found = {preset.spec.workload: None for preset in all_presets().values() if preset.spec.template == name}
    return sorted(found, key=lambda workload: workload.label()) or [TEMPLATES[name].default_workload()]


def plan(names, whole_up_to: int, sample: int) -> list[Space]:
    spaces = []
    for name in names:
        for workload in lesson_workloads(name):
            grid = Grid.whole(Spec(name, workload, TEMPLATES[name].knobs()))
            whole = grid.size <= whole_up_to
            spaces.append(Space(grid, whole, None if whole else sample))
    return spaces


# -- drawing, compiling, checking -----------------------------------------------------------------------------


@dataclass
class Outcome:
    spec: Spec
    status: str
    detail: str = ""

    def to_json(self) -> dict:
        return {"template": self.spec.template, "workload": self.spec.workload.label(),
                "knobs": self.spec.knobs.to_strings(), "status": self.status, "detail": self.detail}


class _Stream:
    """One space's settings in draw order, and what became of them."""

    def __init__(self, space: Space, seed: int, max_refused: int):
        self.space, self.max_refused = space, max_refused
        self.points = iter(space.grid.draws(seed))
        self.accepted = self.refused = self.in_flight = 0
        self.exhausted = False

    def wants_more(self) -> bool:
        if self.exhausted or self.refused >= self.max_refused:
            return False
        return self.space.wanted is None or self.accepted + self.in_flight < self.space.wanted

    def next_spec(self) -> Spec | None:
        point = next(self.points, None)
        if point is None:
            self.exhausted = True
            return None
        self.in_flight += 1
        return Spec(self.space.template, self.space.workload, self.space.grid.knobs_at(point))


def check_spaces(spaces: list[Space], compile_one, check_one, pool, *, seed: int = 0, budget_s: float = 480,
                 max_refused: int = 5000, in_flight: int = 32, progress=None) -> tuple[list[Outcome], list[Space]]:
    """Every space's settings drawn, compiled in ``pool`` (``compile_one(spec)``: a library path, or the
    ExplorerError that refused it, both as values) and the accepted ones checked as they come
    (``check_one(spec, library)``: (status, detail); None: not checked, as in a dry run). No setting is drawn
    after ``budget_s``; at most ``in_flight`` compile at once. The outcomes, and the spaces the budget cut short."""
    streams = [_Stream(space, seed + number, max_refused) for number, space in enumerate(spaces)]  # orders apart
    deadline = time.monotonic() + budget_s
    pending: dict = {}
    ready: collections.deque = collections.deque()
    outcomes: list[Outcome] = []

    def top_up():
        # The spaces one after another: the measuring worker keeps the inputs and reference of a few workloads
        # only (a 4096³ product's reference takes seconds), so the checks go workload by workload.
        while len(pending) < in_flight and time.monotonic() < deadline:
            stream = next((stream for stream in streams if stream.wants_more()), None)
            if stream is None:
                return
            spec = stream.next_spec()
            if spec is not None:
                pending[pool.submit(compile_one, spec)] = (stream, spec)

    spec_checked = [None]  # the workload checked last
    top_up()
    while pending or ready:
        done, _ = concurrent.futures.wait(pending, timeout=0 if ready else None,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
            stream, spec = pending.pop(future)
            stream.in_flight -= 1
            outcome = _compiled(future, spec)
            if outcome is None:
                stream.accepted += 1
                ready.append((spec, future.result()))
            else:
                stream.refused += outcome.status == REFUSED
                outcomes.append(outcome)
        if ready:
            spec, library = min(ready, key=lambda item: item[0].workload != spec_checked[0])  # its workload first
            ready.remove((spec, library))
            spec_checked[0] = spec.workload
            checked = check_one(spec, library)
            outcomes.append(Outcome(spec, *checked) if checked else Outcome(spec, UNCHECKED, "dry run"))
        if progress is not None:
            progress(outcomes, len(pending) + len(ready))
        top_up()
    return outcomes, [stream.space for stream in streams if stream.wants_more()]


def _compiled(future, spec: Spec) -> Outcome | None:
    """None for a setting compiled (its library the future's result), else its refusal or failure."""
    try:
        result = future.result()
    except TimeoutError:
        return Outcome(spec, FAILED, "compiling took longer than the pool's time limit")
    except ChildProcessError:
        return Outcome(spec, FAILED, "the compile process crashed")
    except Exception as error:  # a bug in TVM or a template: counted, not fatal
        return Outcome(spec, FAILED, summary_line(error))
    if isinstance(result, InvalidKnobs):
        return Outcome(spec, REFUSED, str(result))
    if isinstance(result, ExplorerError):
        return Outcome(spec, FAILED, str(result))
    return None


def compile_for_check(spec: Spec, directory: str):
    """In a pool process: ``spec``'s kernel compiled for this machine's GPU into a library (compile_library),
    or the ExplorerError that refused it."""
    result = compile_library(spec, None, directory)
    return "" if result is None else result  # "": no C compiler to export with; the worker compiles it


def accepted_here(spec: Spec, target: str):
    """In a pool process, for a dry run: "" where ``spec`` builds for ``target`` (no binary), else its error."""
    point = compile_point(spec, target, None)
    if point.status == VALID:
        return ""
    return InvalidKnobs(point.reason) if point.status == INVALID else ExplorerError(point.reason)


def check_on_gpu(spec: Spec, library: str) -> tuple[str, str]:
    """The gate's verdict on ``spec``'s kernel, run once in the measuring worker."""
    try:
        result = measure(spec, settings=CHECK, library=library or None)
    except ExplorerError as error:  # a crash, a time-out: a wrong kernel too
        return WRONG, str(error)
    return (RIGHT, "") if result.correct else (WRONG, result.check.describe())


# -- compute-sanitizer ----------------------------------------------------------------------------------------

TOOLS = ("racecheck", "memcheck")
# A report's lines (its summary apart): racecheck's "Error: Race reported between …" and "Warning: …" hazards,
# memcheck's "Invalid __global__ read …", "Program hit …" and the like.
REPORT_LINE = re.compile(r"^========= (?!(?:RACECHECK |ERROR |LEAK )?SUMMARY|COMPUTE-SANITIZER)(?:Error|Warning|"
                         r"Invalid|Program hit|Race|Uninitialized|Barrier|Misaligned|Address)", re.M)
SUMMARY_LINE = re.compile(r"^========= ((?:RACECHECK|ERROR) SUMMARY: .*)$", re.M)


def sanitizer_path() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (path for path in ("/usr/local/cuda/bin/compute-sanitizer",
                           "/usr/local/cuda/compute-sanitizer/compute-sanitizer") if os.path.exists(path)), None)


@dataclass(frozen=True)
class Sanitized:
    spec: Spec
    tool: str
    reports: int  # report lines: hazards (racecheck), errors (memcheck)
    summary: str
    check: str  # the gate's verdict in the sanitized run
    tail: str = ""  # the end of the output, where something went wrong

    def to_json(self) -> dict:
        return {"template": self.spec.template, "workload": self.spec.workload.label(),
                "knobs": self.spec.knobs.to_strings(), "tool": self.tool, "reports": self.reports,
                "summary": self.summary, "check": self.check, "tail": self.tail}


def read_sanitizer(spec: Spec, tool: str, output: str) -> Sanitized:
    """What a sanitized --launch run printed: its report lines, its summary and the gate's verdict."""
    summary = SUMMARY_LINE.findall(output)
    verdict = re.findall(r"^CHECK (.*)$", output, re.M)
    reports = len(REPORT_LINE.findall(output))
    finished = bool(summary and verdict)
    return Sanitized(spec, tool, reports, summary[-1] if summary else "no summary",
                     verdict[-1] if verdict else "did not run to its end",
                     "" if finished and not reports else output[-3000:])


SANITIZE_LIMIT_S = 150  # one sanitized run of the sample (the race's confirmation: 600)


def sanitize(spec: Spec, tool: str, old: bool = False, timeout_s: int = SANITIZE_LIMIT_S) -> Sanitized:
    """``spec``'s kernel run once under compute-sanitizer's ``tool`` in a process of its own (old: built as
    old_row_statistics has it)."""
    command = [sanitizer_path(), "--tool", tool, "--print-limit", "100", sys.executable, __file__, "--launch",
               spec_to_json(spec), *(["--old-row-statistics"] if old else [])]
    try:
        ran = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return Sanitized(spec, tool, 0, f"stopped after {timeout_s} s", "did not run to its end")
    return read_sanitizer(spec, tool, ran.stdout + ran.stderr)


def launch(spec: Spec) -> str:
    """The sanitized program: ``spec`` built for this GPU, run once on its seeded inputs, checked by the gate."""
    built = build(spec)
    workload = built.spec.workload
    device = tvm.cuda(0)
    inputs = workload.random_inputs(0)
    output = tvm.runtime.tensor(np.full(workload.output_shape(), np.nan, numpy_dtype(workload.output_dtype())),
                                device)
    main = tvm.runtime.Executable(runtime_module_of(built)).jit()["main"]
    main(*(tvm.runtime.tensor(x, device) for x in inputs), output)
    device.sync()
    check = compare(output.numpy().astype("float32"), workload.reference(*inputs), workload.reduction_length(),
                    workload.tolerance_floor)
    return check.describe()


def sanitizer_sample(names, count: int, seed: int) -> list[Spec]:
    """The first ``count`` settings each template accepts at its first small shape, in draw order."""
    chosen = []
    for name in names:
        grid = Grid.whole(Spec(name, small_workloads(name)[0], TEMPLATES[name].knobs()))
        found = 0
        for point in grid.draws(seed):
            if found == count:
                break
            spec = Spec(name, grid.base.workload, grid.knobs_at(point))
            try:
                build(spec, "h100")  # accepted (the sanitized run builds it again, for this GPU)
            except ExplorerError:
                continue
            chosen.append(spec)
            found += 1
    return chosen


# -- the document ---------------------------------------------------------------------------------------------


def link(spec: Spec) -> str:
    return "?" + urlencode(to_query(spec))


def render(spaces: list[Space], outcomes: list[Outcome], cut: list[Space], sanitized: list[Sanitized],
           header: dict) -> str:
    """The results section: a table per template (a row per lesson workload; a space the budget cut short
    says so), the sanitizer sample, and every wrong or failed setting with its link."""
    by_space = collections.defaultdict(collections.Counter)
    for outcome in outcomes:
        by_space[(outcome.spec.template, outcome.spec.workload)][outcome.status] += 1
    totals = collections.Counter(outcome.status for outcome in outcomes)
    checked = totals[RIGHT] + totals[WRONG]
    lines = [f"## Results: {header['date']}, {header['device']}", "",
             f"`{header['command']}` — {header['elapsed_s']:.0f} s, {header['cpus']} cores, seed {header['seed']}, "
             f"TVM {header['tvm']}.", "",
             f"**{checked:,} accepted settings checked through the gate: {totals[RIGHT]:,} right, "
             f"{totals[WRONG]:,} wrong**; {totals[REFUSED]:,} refused, {totals[FAILED]:,} failed to build, "
             f"{totals[UNCHECKED]:,} accepted but not checked.", ""]
    for name in dict.fromkeys(space.template for space in spaces):
        lines += [f"### {name}", "", "| workload | space | drawn | accepted | right | wrong | refused | failed |",
                  "|---|---|---|---|---|---|---|---|"]
        for space in (s for s in spaces if s.template == name):
            counts = by_space[(name, space.workload)]
            accepted = counts[RIGHT] + counts[WRONG] + counts[UNCHECKED]
            how = "whole" if space.whole else f"sample of {space.wanted} accepted"
            how += ", cut short by --budget-s" if space in cut else ""
            lines.append(f"| {space.workload.label()} | {space.grid.size:,} points, {how} | {sum(counts.values()):,} "
                         f"| {accepted:,} | {counts[RIGHT]:,} | {counts[WRONG]:,} | {counts[REFUSED]:,} "
                         f"| {counts[FAILED]:,} |")
        mine = [s for s in sanitized if s.spec.template == name]
        for spec in dict.fromkeys(s.spec for s in mine):
            tools = "; ".join(f"{s.tool}: {s.reports} reported ({s.summary})" for s in mine if s.spec == spec)
            verdict = next(s.check for s in mine if s.spec == spec)
            lines.append(f"\nSanitized at {spec.workload.label()}, `{link(spec)}`: {tools}; the gate: {verdict}.")
        lines.append("")
    bad = [o for o in outcomes if o.status in (WRONG, FAILED)]
    if bad:
        lines += ["### Wrong and failed settings", ""]
        lines += [f"- {o.status}: {o.spec.workload.label()} `{link(o.spec)}`: {o.detail}" for o in bad]
        lines.append("")
    return "\n".join(lines)


def results(saved: dict) -> list[Result]:
    """docs/results.md's rows from a run's saved outcomes (the JSON this script writes): every accepted setting
    right, and the sanitizer sample clean."""
    header, outcomes, sanitized = saved["header"], saved["outcomes"], saved["sanitized"]
    counts = collections.Counter(o["status"] for o in outcomes)
    checked, bad = counts[RIGHT] + counts[WRONG], counts[WRONG] + counts[FAILED]
    why = collections.Counter(f"{o['status']}: {o['template']}, {o['detail']}" for o in outcomes
                              if o["status"] in (WRONG, FAILED))
    common = dict(machine=f"{header['device']}, {header['cpus']} cores", date=header["date"],
                  command=header["command"], run=run_file(SECTION))
    spaces = Result(
        "correctness", "every accepted knob setting computes the right result on the GPU (the lessons' shapes)",
        "0 wrong, 0 failed to build",
        f"{counts[RIGHT]:,} of {checked:,} accepted settings right, {counts[WRONG]:,} wrong, {counts[FAILED]:,} failed "
        f"to build ({counts[REFUSED]:,} refused, {counts[UNCHECKED]:,} accepted but not checked)",
        "met" if not bad else f"missed: {bad:,} wrong or failed", **common,
        limit="; ".join(f"{text}{f' ({n}×)' if n > 1 else ''}" for text, n in why.most_common(3)))
    reports = {tool: sum(s["reports"] for s in sanitized if s["tool"] == tool) for tool in TOOLS}
    templates = len({s["template"] for s in sanitized})
    correct = sum(s["check"].startswith("correct") for s in sanitized)
    sample = Result(
        "correctness", "racecheck and memcheck on one accepted setting of each template (a small shape)",
        "nothing reported, the result right",
        f"{templates} templates: {reports['racecheck']} racecheck hazards, {reports['memcheck']} memcheck errors; "
        f"the gate: {correct} of {len(sanitized)} sanitized runs right",
        "met" if sanitized and not any(reports.values()) and correct == len(sanitized) else
        "not run" if not sanitized else "missed", **common)
    return [spaces, sample]


# -- the command ----------------------------------------------------------------------------------------------


def racecheck_before() -> int:
    """rowwise-softmax-fused with rows_per_block = 2, threads = 64: racecheck on the old code and the new."""
    spec = get_preset("rowwise-softmax-fused").spec.with_knobs(rows_per_block=2, threads=64)
    with old_row_statistics():
        old = spec.template_def.apply(spec.workload, spec.knobs).mod.script()
    now = spec.template_def.apply(spec.workload, spec.knobs).mod.script()
    print(f"{spec.workload.label()}, {spec.knobs}: row statistics in shared memory before 6e8f0d9: "
          f"{'row_max_shared' in old}, now: {'row_max_shared' in now}", flush=True)
    if sanitizer_path() is None or not _gpu():
        print("error: needs a CUDA GPU and compute-sanitizer; run it on the GPU machine.", file=sys.stderr)
        return NO_GPU_EXIT
    runs = {"before 6e8f0d9 (shared copy)": sanitize(spec, "racecheck", old=True, timeout_s=600),
            "now (local statistics)": sanitize(spec, "racecheck", timeout_s=600)}
    for label, result in runs.items():
        print(f"{label}: {result.reports} hazards reported ({result.summary}); the gate: {result.check}")
        if result.tail:
            print(result.tail)
    before, now = runs.values()
    found = bool(before.reports and not now.reports)
    write_result(Result(
        "correctness", "the row-wise race of 6e8f0d9 under racecheck: reported before the fix, nothing after",
        "hazards before, 0 after", f"before: {before.summary}, the gate: {before.check.split(':')[0]}; now: "
        f"{now.summary}, the gate: {now.check.split(':')[0]}", "met" if found else "missed", f"{local_gpu()}",
        datetime.date.today().isoformat(), "python bench/knob_space_check.py --racecheck-before"))
    return 0 if found else 1


def _gpu() -> bool:
    return local_gpu() is not None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="TEMPLATE", choices=sorted(TEMPLATES),
                        help="these templates (default: every one)")
    parser.add_argument("--whole-up-to", type=int, default=1000, metavar="N",
                        help="check a space of at most N points whole (default 1000)")
    parser.add_argument("--sample", type=int, default=32, metavar="N",
                        help="accepted settings checked per workload of a larger space (default 32)")
    parser.add_argument("--max-refused", type=int, default=5000, metavar="N",
                        help="stop drawing from a space after N refusals (default 5000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    parser.add_argument("--budget-s", type=float, default=420, metavar="S",
                        help="draw no setting after S seconds (default 420)")
    parser.add_argument("--workers", type=int, default=None,
                        help="compile processes (default: one per core; 0: in this process)")
    parser.add_argument("--sanitize", type=int, default=1, metavar="N",
                        help="settings per template run under racecheck and memcheck (default 1; 0: none)")
    parser.add_argument("--sanitizers", type=int, default=3, metavar="N",
                        help="sanitized processes at a time (default 3)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: build each setting drawn (CUDA source, no binary) and say what would be checked")
    parser.add_argument("--list", action="store_true", help="with --dry-run: print every accepted setting's link")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the report as a section of this document (default: bench/results/runs/"
                             f"{SECTION}.md, and the rows of docs/results.md)")
    parser.add_argument("--racecheck-before", action="store_true", help=racecheck_before.__doc__)
    parser.add_argument("--launch", metavar="SPEC_JSON", help=argparse.SUPPRESS)  # a sanitized run's program
    parser.add_argument("--old-row-statistics", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.launch:
        with old_row_statistics() if args.old_row_statistics else contextlib.nullcontext():
            print(f"CHECK {launch(spec_from_json(args.launch))}", flush=True)
        return 0
    if args.racecheck_before:
        return racecheck_before()
    names = args.only or list(TEMPLATES)
    spaces = plan(names, args.whole_up_to, args.sample)
    if not args.dry_run and not _gpu():
        print("error: no CUDA GPU on this machine; run this on the GPU machine, or use --dry-run.", file=sys.stderr)
        return NO_GPU_EXIT
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="knob-space-") as libraries, _pool(args.workers) as pool:
        if args.dry_run:
            compile_one, check_one, sanitizing = (_Partial(accepted_here, "h100"), lambda spec, library: None,
                                                  None)
        else:
            os.environ.update(kernel_environment())  # the pool's processes compile with NVRTC, as the worker
            compile_one, check_one = _Partial(compile_for_check, libraries), check_on_gpu
            sanitizing = _sanitize_beside(names, args) if args.sanitize and sanitizer_path() else None
        outcomes, cut = check_spaces(spaces, compile_one, check_one, pool, seed=args.seed, budget_s=args.budget_s,
                                max_refused=args.max_refused, in_flight=2 * max(1, args.workers or cpu_count()),
                                progress=_Progress())
        sanitized = sanitizing.result() if sanitizing is not None else []
    elapsed = time.perf_counter() - start
    if args.dry_run:
        _print_plan(spaces, outcomes, cut, args.list)
        return 0
    shutdown()
    header = {"date": datetime.date.today().isoformat(), "device": local_gpu(), "elapsed_s": elapsed,
              "cpus": cpu_count(), "seed": args.seed, "tvm": metadata.version("apache-tvm"),
              "command": "python " + " ".join(shlex.quote(a) for a in ["bench/knob_space_check.py",
                                                                      *(argv if argv is not None else sys.argv[1:])])}
    if args.sanitize and not sanitizer_path():
        header["command"] += " (compute-sanitizer not found: no sanitizer sample)"
    write_section(SECTION, render(spaces, outcomes, cut, sanitized, header), args.out)
    RESULTS.mkdir(parents=True, exist_ok=True)
    device = re.sub(r"[^a-z0-9]+", "-", str(header["device"]).lower()).strip("-")
    saved = {"header": header, "outcomes": [o.to_json() for o in outcomes],
             "sanitized": [s.to_json() for s in sanitized]}
    (RESULTS / f"knob-space-{device}.json").write_text(json.dumps(saved, indent=1))
    if args.out is None and not args.only:  # every template: the target's current figure
        write_result(*results(saved))
    wrong = sum(o.status == WRONG for o in outcomes)
    print(f"wrote {args.out or run_file(SECTION)}: {sum(o.status in (RIGHT, WRONG) for o in outcomes):,} checked, "
          f"{wrong} wrong, in {elapsed:.0f} s", file=sys.stderr)
    return 1 if wrong else 0


@dataclass(frozen=True)
class _Partial:
    """``function(spec, *rest)``, picklable for the pool's processes."""

    function: object
    rest: object

    def __call__(self, spec):
        return self.function(spec, self.rest)


@contextlib.contextmanager
def _pool(workers: int | None):
    if workers == 0:  # in this process (a test's, or to debug one setting)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            yield pool
        return
    # The pool's processes import this module to run its functions (where it is not __main__, which goes whole).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(Path(__file__).parent),
                                                             os.environ.get("PYTHONPATH")]))
    pool = compile_pool(workers, timeout_s=300)
    try:
        yield pool
    finally:
        pool.shutdown(wait=False)


def _sanitize_beside(names, args) -> concurrent.futures.Future:
    """The sanitizer sample, chosen here (TVM builds in this thread only), then run by threads beside the
    check, each waiting on its process: --sanitizers at a time."""
    specs = sanitizer_sample(names, args.sanitize, args.seed)
    runner = concurrent.futures.ThreadPoolExecutor(1)

    def sample():
        with concurrent.futures.ThreadPoolExecutor(args.sanitizers) as each:
            return list(each.map(lambda job: sanitize(*job), [(spec, tool) for spec in specs for tool in TOOLS]))

    future = runner.submit(sample)
    runner.shutdown(wait=False)
    return future


class _Progress:
    """A line on stderr every EVERY_S seconds: the settings done so far, by outcome."""

    EVERY_S = 15

    def __init__(self):
        self.start = self.last = time.monotonic()

    def __call__(self, outcomes: list[Outcome], waiting: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.EVERY_S:
            self.last = now
            counts = collections.Counter(o.status for o in outcomes)
            print(f"{now - self.start:.0f} s: {len(outcomes):,} settings, "
                  + ", ".join(f"{n:,} {status}" for status, n in counts.most_common()) + f"; {waiting} compiling "
                  "or waiting for the GPU", file=sys.stderr, flush=True)


def _print_plan(spaces: list[Space], outcomes: list[Outcome], cut: list[Space], listing: bool) -> None:
    by_space = collections.defaultdict(collections.Counter)
    for outcome in outcomes:
        by_space[(outcome.spec.template, outcome.spec.workload)][outcome.status] += 1
    total = 0
    for space in spaces:
        counts = by_space[(space.template, space.workload)]
        total += counts[UNCHECKED]
        how = ("whole" if space.whole else f"sample of {space.wanted}") + (", cut short" if space in cut else "")
        print(f"{space.template:18} {space.workload.label():44} {space.grid.size:>14,} points ({how}): "
              f"{counts[UNCHECKED]:,} accepted, {counts[REFUSED]:,} refused, {counts[FAILED]:,} failed")
    print(f"{total:,} accepted settings would be checked")
    if listing:
        for outcome in outcomes:
            if outcome.status == UNCHECKED:
                print(f"{outcome.spec.template} {link(outcome.spec)}")


if __name__ == "__main__":
    sys.exit(main())

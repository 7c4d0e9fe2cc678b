"""Measure every preset on this machine's GPU and write docs/lessons-h100.md: each
tutorial's claims with the tutorial's numbers, this GPU's numbers and the verdict.

    python bench/lessons_h100.py                    # every preset, PyTorch beside each workload
    python bench/lessons_h100.py --no-baseline      # without the PyTorch column (no torch import)
    python bench/lessons_h100.py --only dw-blog-final-96 dw-blog-fused-96 --out /tmp/lessons.md

One process, no streamlit or plotly. Kernels run in explorer.measure's worker process, each
checked against NumPy before it is timed: a kernel that is wrong, crashes or hangs loses
its own number (the document says why), never the run. Presets that share a schedule
are measured once. The raw results also go to bench/results/lessons-<arch>.json, and a
summary to docs/benchmarks.md (section ``lessons``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from explorer import lessons as L
from explorer.build import build
from explorer.errors import ExplorerError
from explorer.presets import Preset

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lessons-h100.md"
RESULTS = ROOT / "bench" / "results"
NO_GPU_EXIT = 3
# Evidence thresholds for "why it may differ" (see reasons()).
NEAR_ROOF = 60.0  # % of the roofline above which the machine, not the schedule, sets a kernel's time
FEW_MICROSECONDS = 10.0  # below this, fixed launch costs weigh as much as the schedule


@dataclass(frozen=True)
class Measured:
    """What this run found for one preset (everything the document needs, as plain data)."""

    preset: str
    median_us: float | None
    gflops: float | None
    percent_of_floor: float | None
    floor_us: float | None
    error: str  # why there is no time ("" when there is one)
    evidence: L.Evidence | None
    blocks: int | None  # of the first kernel's grid


def measure_presets(presets: list[Preset], target: str | None, settings, progress) -> dict[str, Measured]:
    """Each distinct spec once (lessons.measure_presets), in the measuring worker, with
    the record's details kept; static evidence from the same build."""
    from explorer.measure import WrongResult, measure

    records = {}

    def measured_us(spec):
        try:
            record = records[spec] = measure(spec, target=target, settings=settings)
        except ExplorerError:
            raise
        except Exception as error:  # a bug on one kernel's path must not end the run: its row says what happened
            raise ExplorerError(f"internal error: {type(error).__name__}: {error}") from error
        if not record.correct:
            raise WrongResult(f"wrong result: {record.check.describe()}")
        return record.median_us

    def done(preset, us, error):
        progress(f"{preset.id}: " + (f"{us:.2f} µs" if us is not None else f"no time ({error})"))

    times, errors = L.measure_presets(presets, measured_us, on_done=done)
    out = {}
    for preset in presets:
        record = records.get(preset.spec) if preset.id in times else None
        evidence, blocks = _static(preset, target)
        out[preset.id] = Measured(
            preset.id, times.get(preset.id), record.gflops if record else None,
            record.percent_of_floor if record else None, record.floor_us if record else None,
            errors.get(preset.id, ""), evidence, blocks,
        )
    return out


def _static(preset: Preset, target: str | None) -> tuple[L.Evidence | None, int | None]:
    """The static evidence and the first kernel's block count (None when it cannot be built)."""
    try:
        built = build(preset.spec, target)
    except ExplorerError:
        return None, None
    grid = built.kernels[0].grid
    return L.evidence(built), grid[0] * grid[1] * grid[2]


def measure_baselines(presets: list[Preset], settings, progress) -> dict[str, tuple[float | None, str]]:
    """PyTorch's median µs per workload label (or why there is none)."""
    from explorer.measure import baseline

    out: dict[str, tuple[float | None, str]] = {}
    for preset in presets:
        label = preset.spec.workload.label()
        if label in out:
            continue
        try:
            b = baseline(preset.spec.workload, settings=settings)
            out[label] = (b.median_us, "" if b.median_us is not None else "PyTorch's output is wrong")
        except ExplorerError as error:
            out[label] = (None, str(error))
        progress(f"PyTorch {label}: " + (f"{out[label][0]:.2f} µs" if out[label][0] is not None else out[label][1]))
    return out


def reasons(check: L.ComparisonCheck, this_step: int, this: Measured, other: Measured | None,
            sm_count: int | None, config: L.LessonConfig | None = None) -> str:
    """For a claim this GPU does not reproduce: what the measurements and the static
    analyses of the two kernels show, in a sentence or two."""
    config = config or L.LessonConfig()
    if check.measured is None or other is None:
        return this.error or (other.error if other is not None else "the compared step was not measured")
    m = check.measured
    notes = []
    if check.comparison.expect != "same_speed":
        if abs(m.ratio - 1) <= config.tolerance:
            notes.append(f"the two differ by less than ±{config.tolerance:.0%} here, within run-to-run noise")
        elif m.ratio < 1:
            notes.append(f"the order is reversed here (×{m.ratio:.2f})")
    floors = [x.percent_of_floor for x in (this, other)]
    if all(f is not None and f >= NEAR_ROOF for f in floors):
        notes.append(f"both run at {min(floors):.0f}% or more of the roofline, so the GPU's bandwidth or peak, not the "
                     f"schedule, sets their time")
    elif m.this_us < FEW_MICROSECONDS and m.other_us < FEW_MICROSECONDS:
        notes.append("both take a few microseconds, where launch cost and the last wave of blocks weigh as much "
                     "as the schedule")
    for step, x in ((this_step, this), (check.other.step, other)):
        if sm_count and x.blocks is not None and x.blocks < sm_count:
            notes.append(f"step {step} launches only {x.blocks} blocks for {sm_count} SMs")
    a, b = this.evidence, other.evidence
    if a is not None and b is not None:
        if a.bank_conflict_degree != b.bank_conflict_degree:
            notes.append(f"the bank model gives {a.bank_conflict_degree}-way against {b.bank_conflict_degree}-way "
                         f"conflicts")
        if abs(a.occupancy - b.occupancy) >= 0.25:
            notes.append(f"occupancy is {a.occupancy:.0%} against {b.occupancy:.0%}")
    if len(notes) < 2:
        hardware = check.tutorial.where if check.tutorial is not None else "the tutorial's GPU"
        notes.append(f"nothing in the static analyses singles out a cause: {hardware} and this GPU differ in "
                     f"cache sizes, memory bandwidth and compiler")
    text = "; ".join(notes[:3])
    return text[0].upper() + text[1:] + "."


# -- the document -------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text that stays inside one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _us(value: float | None) -> str:
    return f"{value:,.2f}" if value is not None else "—"


def _pair(figures: L.Figures | None, digits: int) -> str:
    if figures is None:
        return "—"
    return f"{figures.this_us:,.{digits}f} vs {figures.other_us:,.{digits}f} µs (×{figures.ratio:.2f})"


def render(lessons, measured: dict[str, Measured], torch_us: dict, sm_count: int | None, header: dict,
           target: str | None = None) -> str:
    """The document; ``target`` is the build target of the static checks (None: this GPU)."""
    lines = [
        f"# The tutorials' claims on {header['device']}",
        "",
        f"Measured {header['date']} with `{header['command']}` ({header['elapsed_s']:.0f} s): "
        f"TVM {header['tvm']}, target {header['target']}; every kernel checked against NumPy, then timed with "
        f"TVM's `time_evaluator` (median of {header['repeats']} repeats of ≥ {header['min_repeat_ms']} ms). "
        f"PyTorch ({header['torch']}) is timed with CUDA graphs, TF32 off. % of roofline is the least time the "
        f"measured roofline allows (the workload's FLOPs at the FP32 peak, or its compulsory bytes at the L2 or HBM "
        f"bandwidth) over the kernel's time. A timing claim is reproduced when this GPU's ratio goes "
        f"the tutorial's way by "
        f"more than ±{L.LessonConfig().tolerance:.0%} (or by the claim's own bound); \"same speed\" means within it.",
        "",
    ]
    totals = {L.REPRODUCED: 0, L.NOT_REPRODUCED: 0, L.NEEDS_GPU: 0}
    static_totals = [0, 0]
    body = []
    for lesson in lessons:
        body += [f"## {lesson.title}", "", f"Source: `{lesson.source or '(the project)'}`. {lesson.summary}", "",
                 "| step | preset | tutorial | this GPU µs | GFLOP/s | % of roofline | PyTorch µs | "
                 "the tutorial's other figures |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        times = {pid: m.median_us for pid, m in measured.items() if m.median_us is not None}
        errors = {pid: m.error for pid, m in measured.items() if m.error}
        claims, statics = [], []
        for step in lesson.steps:
            p = step.preset
            m = measured.get(p.id)
            if m is None:
                continue
            own = p.own_reported
            tutorial = f"{own.value_us:g} µs ({own.hardware})" if own is not None else "—"
            torch = torch_us.get(p.spec.workload.label(), (None, ""))[0]
            floor = f"{m.percent_of_floor:.0f}%" if m.percent_of_floor is not None else "—"
            time_cell = _us(m.median_us) if not m.error else f"— ({_cell(m.error)})"
            gflops = f"{m.gflops:,.0f}" if m.gflops is not None else "—"
            others = "; ".join(_cell(str(r)) for r in p.reported if not r.this_schedule) or "—"
            body.append(f"| {step.number} | `{p.id}` | {tutorial} | {time_cell} | {gflops} | {floor} | {_us(torch)} "
                        f"| {others} |")
            for check in L.step_checks(p, times, header["device"], errors):
                verdict = check.verdict
                totals[verdict] += 1
                why = ""
                if verdict != L.REPRODUCED:
                    why = _cell(reasons(check, step.number, m, measured.get(check.other.id), sm_count))
                claims.append(f"| {step.number} | {check.sentence(p)} | {_pair(check.tutorial, 1)} | "
                              f"{_pair(check.measured, 2)} | **{verdict}** | {why} |")
            for check in L.static_checks(p, target):
                ok = check.verdict == L.REPRODUCED
                static_totals[0 if ok else 1] += 1
                if not ok:
                    statics.append(f"- step {step.number} `{p.id}`: {check.label} claimed "
                                   f"{L.format_fact(check.claimed)}, built {L.format_fact(check.actual)}")
        body.append("")
        if claims:
            body += ["| step | timing claim | tutorial | this GPU | verdict | why it may differ |",
                     "| --- | --- | --- | --- | --- | --- |", *claims, ""]
        checked = sum(len(s.preset.static) for s in lesson.steps if s.preset.id in measured)
        body.append(f"Structural claims ({checked}): " + ("all reproduced on this build." if not statics else
                                                         "these are not reproduced:"))
        body += [*statics, ""]
    lines.append(
        f"**{totals[L.REPRODUCED]} timing claims reproduced, {totals[L.NOT_REPRODUCED]} not reproduced, "
        f"{totals[L.NEEDS_GPU]} without a measurement; {static_totals[0]} structural claims reproduced, "
        f"{static_totals[1]} not.**")
    lines.append("")
    return "\n".join(lines + body)


def summary_section(text: str, doc: Path) -> str:
    """The docs/benchmarks.md section: the summary line and where the details are."""
    first = next(line for line in text.splitlines() if line.startswith("**"))
    return f"## Lessons: the tutorials' claims measured\n\n{first}\n\nDetails, per claim: `{doc.relative_to(ROOT)}`."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="PRESET",
                        help="these presets (and those their claims compare with)")
    parser.add_argument("--no-baseline", action="store_true", help="skip PyTorch")
    parser.add_argument("--out", type=Path, default=DOC,
                        help=f"the document to write (default {DOC.relative_to(ROOT)})")
    parser.add_argument("--target", default=None, help="target name for the builds (default: this machine's GPU)")
    args = parser.parse_args(argv)

    from explorer.measure import Settings, local_gpu, shutdown

    device = local_gpu()
    if device is None:
        print("error: no CUDA device on this machine; run this script on the GPU machine.", file=sys.stderr)
        return NO_GPU_EXIT
    start = time.perf_counter()
    lessons = L.lessons()
    presets = [s.preset for lesson in lessons for s in lesson.steps]
    if args.only:
        wanted = {p.id for p in presets if p.id in args.only}
        unknown = sorted(set(args.only) - wanted)
        if unknown:
            print(f"error: no preset named {', '.join(unknown)}", file=sys.stderr)
            return 2
        chosen = [p for p in presets if p.id in wanted]
        presets = list({p.id: p for p in (*chosen, *L.presets_to_time(chosen))}.values())
    settings = Settings()
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    try:
        measured = measure_presets(presets, args.target, settings, progress)
        torch_us = {} if args.no_baseline else measure_baselines(presets, settings, progress)
    finally:
        shutdown()
    target = build(presets[0].spec, args.target).target
    arch = str(target.attrs.get("arch", target.kind.name))
    header = {
        "device": device, "date": datetime.date.today().isoformat(), "elapsed_s": time.perf_counter() - start,
        "command": "python " + " ".join(shlex.quote(a) for a in ["bench/lessons_h100.py", *(argv or sys.argv[1:])]),
        "tvm": metadata.version("apache-tvm"), "target": args.target or arch, "repeats": settings.repeats,
        "min_repeat_ms": settings.min_repeat_ms, "torch": _torch_version() if torch_us else "not measured",
    }
    text = render(lessons, measured, torch_us, _sm_count(), header, args.target)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = {"header": header, "presets": {pid: {k: v for k, v in vars(m).items() if k != "evidence"}
                                         for pid, m in measured.items()},
           "pytorch_us": {label: us for label, (us, _) in torch_us.items()}}
    (RESULTS / f"lessons-{arch}.json").write_text(json.dumps(raw, indent=2))
    if args.out == DOC:
        from docs_section import write_section

        write_section("lessons", summary_section(text, args.out))
    print(f"wrote {args.out} ({header['elapsed_s']:.0f} s)", file=sys.stderr)
    return 0


def _torch_version() -> str:
    try:
        return "PyTorch " + metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "PyTorch not installed"


def _sm_count() -> int | None:
    import tvm

    device = tvm.cuda(0)
    return int(device.multi_processor_count) if device.exist else None


if __name__ == "__main__":
    sys.exit(main())

"""Measure every preset on this machine's GPU and write docs/lessons-gpu.md: each
tutorial's claims with the tutorial's numbers, this GPU's numbers and the verdict.

    python bench/lessons_gpu.py                    # every preset, PyTorch beside each workload
    python bench/lessons_gpu.py --no-baseline      # without the PyTorch column (no torch import)
    python bench/lessons_gpu.py --only dw-blog-final-96 dw-blog-fused-96 --out /tmp/lessons.md

One process, no streamlit or plotly. Kernels run in explorer.measure's worker process, each
checked against NumPy before it is timed: a kernel that is wrong, crashes or hangs loses
its own number (the document says why), never the run. Presets that share a schedule
are measured once. The raw results also go to bench/results/lessons-<arch>.json; a whole run
(no --only, the default --out) also writes the claims' rows of docs/results.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import sys
import time
from importlib import metadata
from pathlib import Path

from ceilings import ceilings_first
from result_files import RESULTS

from explorer import lesson_reasons as R
from explorer import lessons as L
from explorer.build import build
from explorer.errors import ExplorerError
from explorer.presets import Preset

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lessons-gpu.md"
NO_GPU_EXIT = 3


def measure_presets(presets: list[Preset], target: str | None, settings, progress) -> dict[str, R.MeasuredStep]:
    """Each distinct spec once, in the measuring worker, with its static evidence."""
    from explorer.measure import measure

    def measured(spec):
        try:
            return measure(spec, target=target, settings=settings)
        except ExplorerError:
            raise
        except Exception as error:  # a bug on one kernel's path must not end the run: its row says what happened
            raise ExplorerError(f"internal error: {type(error).__name__}: {error}") from error

    def done(preset, us, error):
        progress(f"{preset.id}: " + (f"{us:.2f} µs" if us is not None else f"no time ({error})"))

    return R.measure_steps(presets, measured, lambda spec: build(spec, target), on_done=done)


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


def render(lessons, measured: dict[str, R.MeasuredStep], torch_us: dict, sm_count: int | None, header: dict,
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
        f"the tutorial's way by more than ±{L.ClaimThresholds().tolerance:.0%} (or by the claim's own bound); "
        "\"same speed\" means within it.",
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
            roofline = f"{m.percent_of_roofline:.0f}%" if m.percent_of_roofline is not None else "—"
            time_cell = _us(m.median_us) if not m.error else f"— ({_cell(m.error)})"
            gflops = f"{m.gflops:,.0f}" if m.gflops is not None else "—"
            others = "; ".join(_cell(str(r)) for r in p.reported if not r.this_schedule) or "—"
            body.append(f"| {step.number} | `{p.id}` | {tutorial} | {time_cell} | {gflops} | {roofline} | {_us(torch)} "
                        f"| {others} |")
            for check in L.step_checks(p, times, header["device"], errors):
                verdict = check.verdict
                totals[verdict] += 1
                why = ""
                if verdict != L.REPRODUCED:
                    why = _cell(R.reasons(check, step.number, m, measured.get(check.other.id), sm_count))
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


SUMMARY = re.compile(r"\*\*(\d+) timing claims reproduced, (\d+) not reproduced, (\d+) without a measurement; "
                     r"(\d+) structural claims reproduced, (\d+) not\.\*\*")


def results(text: str, header: dict, doc: Path) -> list:
    """docs/results.md's rows from the document's summary line: the timing claims and the structural ones."""
    from docs_section import Result

    timing, missed, unmeasured, structural, wrong = map(int, SUMMARY.search(text).groups())
    common = dict(machine=header["device"], date=header["date"], command=header["command"],
                  run=str(doc.relative_to(ROOT)))
    return [Result("lessons", "the tutorials' timing claims reproduced on the GPU", "all",
                   f"{timing} of {timing + missed + unmeasured} reproduced; {missed} not, each with the reason it may "
                   f"differ; {unmeasured} without a measurement", "met" if not missed + unmeasured else
                   f"missed by {missed + unmeasured} claims", **common),
            Result("lessons", "the lessons' structural claims (what each step's kernel is) on this build", "all",
                   f"{structural} of {structural + wrong}", "met" if not wrong else f"missed: {wrong} not", **common)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="PRESET",
                        help="these presets (and those their claims compare with)")
    parser.add_argument("--no-baseline", action="store_true", help="skip PyTorch")
    parser.add_argument("--out", type=Path, default=DOC,
                        help=f"the document to write (default {DOC.relative_to(ROOT)})")
    parser.add_argument("--target", default=None, help="target name for the builds (default: this machine's GPU)")
    args = parser.parse_args(argv)

    from explorer.measure import MeasureSettings, local_gpu, shutdown

    device = local_gpu()
    if device is None:
        print("error: no CUDA device on this machine; run this script on the GPU machine.", file=sys.stderr)
        return NO_GPU_EXIT
    ceilings_first(args.target)
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
    settings = MeasureSettings()
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
        "command": "python " + " ".join(shlex.quote(a) for a in ["bench/lessons_gpu.py", *(argv or sys.argv[1:])]),
        "tvm": metadata.version("apache-tvm"), "target": args.target or arch, "repeats": settings.repeats,
        "min_repeat_ms": settings.min_repeat_us / 1000, "torch": _torch_version() if torch_us else "not measured",
    }
    text = render(lessons, measured, torch_us, R.local_sm_count(), header, args.target)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from docs_section import read_section

    kept = read_section("diagnosis", args.out)  # bench/diagnosis_agreement.py's section stays
    args.out.write_text(text + (f"\n{kept}\n" if kept else ""))
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = {"header": header, "presets": {pid: {**{k: v for k, v in vars(m).items() if k != "evidence"},
                                               "blocks": m.blocks} for pid, m in measured.items()},
           "pytorch_us": {label: us for label, (us, _) in torch_us.items()}}
    (RESULTS / f"lessons-{arch}.json").write_text(json.dumps(raw, indent=2))
    if args.out == DOC and not args.only:
        from docs_section import write_result

        write_result(*results(text, header, args.out))
    print(f"wrote {args.out} ({header['elapsed_s']:.0f} s)", file=sys.stderr)
    return 0


def _torch_version() -> str:
    try:
        return "PyTorch " + metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "PyTorch not installed"


if __name__ == "__main__":
    sys.exit(main())

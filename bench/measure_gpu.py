"""Measure every shipped preset on this machine's GPU: correctness gate, latency, the
PyTorch baseline and the roofline bound per workload, knob change -> measured latency,
and (``--ncu``) Nsight Compute's ``gpu__time_duration.sum`` for the same kernels.

    python bench/measure_gpu.py --out OUT [--ncu] [--presets ID ...] [--write-docs]
    python bench/measure_gpu.py --from-json OUT/measure_gpu.json --write-docs   # re-render

Writes ``OUT/measure_gpu.md`` (tables) and ``OUT/measure_gpu.json`` (every figure);
``--write-docs`` also writes them to bench/results/runs/measure-gpu.md and their targets' rows to
docs/results.md (a knob change's measured latency; Nsight Compute's agreement).
Needs no streamlit or plotly (the GPU test machine has neither).

- Presets: ``explorer.measure.measure`` (checked against NumPy, then TVM's time_evaluator
  in the measuring worker), with the roofline bound (the measured ceilings at the workload's intensity).
- Baseline: ``explorer.measure.baseline`` per distinct workload: PyTorch, CUDA graphs, TF32 off.
- Knob change -> latency: wall time of ``measure(spec)`` for specs the worker has never
  built (schedule, lowering, NVRTC, check and timing included), as a user moving a knob
  sees it; the median must stay under 1.0 s.
- ``--ncu``: for each of NCU_PRESETS, ``explorer.analysis.ncu.profile`` runs the kernel
  under ``ncu --csv --metrics gpu__time_duration.sum`` (clocks and caches left alone, like
  the back-to-back timing), and the per-call kernel time is compared with the median.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# A fresh CUDA binary cache (explorer/cuda_compile.py), read at import and inherited by the
# measuring worker: every compile counted below really happens.
os.environ["EXPLORER_CUDA_CACHE"] = tempfile.mkdtemp(prefix="measure-gpu-cuda-")

from ceilings import ceilings_first
from docs_section import Result, run_file, write_result, write_section
from result_files import RESULTS

from explorer.errors import ExplorerError, InvalidKnobs
from explorer.measure import MeasureSettings, baseline, local_gpu, measure, shutdown
from explorer.presets import all_presets, get_preset

SECTION = "measure-gpu"
# Long enough kernels that launch gaps are small against them, plus the blog's final one.
NCU_PRESETS = ("conv2d-autotvm-resnet-last", "conv2d-autotvm-fallback", "matmul-tiled-1024", "matmul-naive-1024",
               "dw-blog-final-96")
NCU_WARMUP_CALLS, NCU_CALLS = 3, 10
KNOB_CHANGES = 12
NCU_AGREEMENT = 0.10


def measure_presets(ids: list[str], settings: MeasureSettings) -> list[dict]:
    rows = []
    for preset_id in ids:
        preset = get_preset(preset_id)
        row = {"preset": preset_id, "workload": preset.spec.workload.label()}
        try:
            result = measure(preset.spec, settings=settings)
            row.update(result.to_dict())
        except ExplorerError as error:
            row.update(correct=False, error=str(error))
        print(f"{preset_id}: {row.get('median_us') or row.get('error')}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def measure_baselines(ids: list[str], settings: MeasureSettings) -> list[dict]:
    rows, seen = [], set()
    for preset_id in ids:
        workload = get_preset(preset_id).spec.workload
        if workload in seen:
            continue
        seen.add(workload)
        try:
            rows.append(baseline(workload, settings=settings).to_dict())
        except ExplorerError as error:
            rows.append({"workload": workload.label(), "error": str(error)})
        print(f"baseline {workload.label()}: {rows[-1].get('median_us') or rows[-1].get('error')}", file=sys.stderr,
              flush=True)
    return rows


def knob_changes(ids: list[str]):
    """Specs one knob away from the presets, round-robin over them, none built before: the
    next value of each choice (or boolean) knob."""
    candidates = []
    for preset_id in ids:
        spec = get_preset(preset_id).spec
        changes = []
        for knob in spec.knobs.fields():
            if knob.choices is None and knob.kind is not bool:
                continue
            values = knob.values(spec.workload)
            following = values[(values.index(getattr(spec.knobs, knob.name)) + 1) % len(values)]
            changes.append((preset_id, knob.name, following, spec.with_knobs(**{knob.name: following})))
        candidates.append(changes)
    seen = {get_preset(i).spec for i in ids}
    for round_ in itertools.zip_longest(*candidates):
        for change in round_:
            if change is not None and change[3] not in seen:
                seen.add(change[3])
                yield change


def time_knob_changes(ids: list[str], settings: MeasureSettings, count: int) -> dict:
    """Wall time of measure() for ``count`` knob changes the template accepts (a rejected
    combination is listed but not counted: it never reaches the GPU)."""
    rows = []
    for preset_id, knob, value, spec in knob_changes(ids):
        if sum(r["counted"] for r in rows) == count:
            break
        start = time.perf_counter()
        counted = True
        try:
            result = measure(spec, settings=settings)
            outcome = f"{result.median_us:.2f} µs" if result.correct else "wrong"
        except InvalidKnobs as error:
            outcome, counted = f"rejected: {error}", False
        except ExplorerError as error:
            outcome = str(error)
        seconds = time.perf_counter() - start
        rows.append({"preset": preset_id, "knob": knob, "value": str(value), "seconds": seconds, "outcome": outcome,
                     "counted": counted})
        print(f"knob change {preset_id} {knob}={value}: {seconds:.2f} s ({outcome})", file=sys.stderr, flush=True)
    times = [r["seconds"] for r in rows if r["counted"]]
    return {"rows": rows, "median_s": statistics.median(times) if times else None,
            "max_s": max(times) if times else None}


# -- Nsight Compute ----------------------------------------------------------------------


def ncu_kernel_us(preset_id: str) -> dict:
    """Kernel time per call of ``main`` (all its kernels) from gpu__time_duration.sum, the
    warm-up calls left out."""
    from explorer.analysis.ncu import DURATION, call_durations_us, ncu_options, profile
    from explorer.build import build

    spec = get_preset(preset_id).spec
    kernels_per_call = len(build(spec).kernels)
    try:
        # Compiled as the measuring worker compiles it, so that both time the same code.
        counters = profile(spec, timeout_s=300, metrics=(DURATION,), calls=NCU_WARMUP_CALLS + NCU_CALLS,
                           undisturbed=True, nvcc=False)
        per_call = call_durations_us(counters, kernels_per_call)[NCU_WARMUP_CALLS:]
    except ExplorerError as error:
        return {"error": str(error)}
    return {"ncu_median_us": statistics.median(per_call), "ncu_min_us": min(per_call),
            "kernels_per_call": kernels_per_call, "command": " ".join(["ncu", *ncu_options((DURATION,), True)])}


def compare_with_ncu(rows: list[dict], ids: list[str]) -> list[dict]:
    measured = {r["preset"]: r for r in rows}
    out = []
    for preset_id in ids:
        median = measured.get(preset_id, {}).get("median_us")
        result = {"preset": preset_id, "median_us": median, **ncu_kernel_us(preset_id)}
        if median and result.get("ncu_median_us"):
            result["difference"] = median / result["ncu_median_us"] - 1
            result["agrees"] = abs(result["difference"]) <= NCU_AGREEMENT
        print(f"ncu {preset_id}: {result}", file=sys.stderr, flush=True)
        out.append(result)
    return out


# -- report ------------------------------------------------------------------------------


def _f(value, digits=2):
    return "—" if value is None else f"{value:.{digits}f}"


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [
        "## Measurements on the GPU (correctness gate, PyTorch baseline, roofline)",
        "",
        f"`{results['command']}` on {env['gpu']}, {env['machine']}, Python {env['python']}, TVM {env['tvm']}"
        f"{', ' + env['torch'] if env.get('torch') else ''}. Every kernel is checked against NumPy before it is timed; "
        f"times are medians of {results['settings']['repeats']} repeats of ≥ {results['settings']['min_repeat_ms']} ms "
        "of back-to-back launches (TVM `time_evaluator`). Roofline µs: the least time the roofline measured on this "
        "GPU allows (FLOPs at the FP32 peak, or compulsory bytes at the L2 or HBM bandwidth; `bench/ceilings.py`); "
        "% of roofline = roofline µs / median.",
        "",
        "| preset | workload | correct | median µs | min | max | std | launches | GB/s | GFLOP/s | "
        "roofline µs | % of roofline |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results["presets"]:
        correct = "yes" if r.get("correct") else f"NO: {r.get('error') or r.get('first_wrong_index')}"
        lines.append(f"| {r['preset']} | {r['workload']} | {correct} | {_f(r.get('median_us'))} "
                     f"| {_f(r.get('min_us'))} "
                     f"| {_f(r.get('max_us'))} | {_f(r.get('std_us'))} | {r.get('launches', '—')} "
                     f"| {_f(r.get('gbps'), 0)} "
                     f"| {_f(r.get('gflops'), 0)} | {_f(r.get('roofline_us'))} "
                     f"| {_f(r.get('percent_of_roofline'), 0)} |")
    bounds = {r["workload"]: r.get("roofline_us") for r in results["presets"] if r.get("roofline_us")}
    lines += ["", "PyTorch baseline per workload (CUDA graphs, TF32 off, cuDNN autotuner on; "
                  "checked against NumPy):", "",
              "| workload | PyTorch µs | min | max | GFLOP/s | roofline µs |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for b in results["baselines"]:
        if b.get("error"):
            lines.append(f"| {b['workload']} | {b['error']} | | | | |")
        else:
            lines.append(f"| {b['workload']} | {_f(b.get('median_us'))} | {_f(b.get('min_us'))} "
                         f"| {_f(b.get('max_us'))} "
                         f"| {_f(b.get('gflops'), 0)} | {_f(bounds.get(b['workload']))} |")
    knobs = results["knob_changes"]
    counted = sum(1 for r in knobs["rows"] if r.get("counted", True))
    lines += ["", f"Knob change → measured latency (wall time of `measure(spec)` for a spec "
                  f"never built before: schedule, "
                  f"lowering, NVRTC, check, timing): median **{_f(knobs['median_s'])} s**, max {_f(knobs['max_s'])} s "
                  f"over {counted} changes (target ≤ 1.0 s median; rejected combinations are listed, not counted).", "",
              "| preset | knob = value | seconds | result |", "| --- | --- | ---: | --- |"]
    lines += [f"| {r['preset']} | {r['knob']} = {r['value']} | {_f(r['seconds'])} | {r['outcome']} |"
              for r in knobs["rows"]]
    if results.get("ncu"):
        command = next((r["command"] for r in results["ncu"] if r.get("command")), "ncu")
        lines += ["", f"Nsight Compute: `{command} python -m explorer.analysis.ncu SPEC CALLS`, "
                      f"the kernel time of one "
                      f"call of `main` (median of {NCU_CALLS} calls after {NCU_WARMUP_CALLS} warm-up calls) "
                      f"against the "
                      f"median above; agreement means within {NCU_AGREEMENT:.0%}.", "",
                  "| preset | median µs | ncu µs | difference | agrees |", "| --- | ---: | ---: | ---: | --- |"]
        for r in results["ncu"]:
            if r.get("error"):
                lines.append(f"| {r['preset']} | {_f(r.get('median_us'))} | error | | {r['error'][:80]!r} |")
            else:
                lines.append(f"| {r['preset']} | {_f(r.get('median_us'))} | {_f(r.get('ncu_median_us'))} "
                             f"| {r.get('difference', 0):+.1%} | {'yes' if r.get('agrees') else 'no'} |")
    return "\n".join(lines) + "\n"


KNOB_TO_LATENCY_S = 1.0  # the target: a knob change's measured latency, median


def results_rows(results: dict) -> list[Result]:
    """docs/results.md's rows: a knob change → measured latency (median), and Nsight Compute's agreement."""
    env = results["environment"]
    common = dict(machine=f"{env['gpu']}, {env['machine']}", date=results.get("date", ""),
                  command=results["command"], run=run_file(SECTION))
    knobs = results["knob_changes"]
    counted = sum(1 for r in knobs["rows"] if r.get("counted", True))
    out = [Result("measuring", "knob change → measured latency (schedule, lower, NVRTC, check, time: a setting never "
                  "built before)", f"median ≤ {KNOB_TO_LATENCY_S:g} s",
                  f"{knobs['median_s']:.2f} s, max {knobs['max_s']:.2f} s over {counted} changes",
                  "met" if knobs["median_s"] <= KNOB_TO_LATENCY_S else
                  f"missed by {knobs['median_s'] - KNOB_TO_LATENCY_S:.2f} s", **common)]
    ncu = [r for r in results.get("ncu") or [] if not r.get("error")]
    if ncu:
        agree = sum(bool(r.get("agrees")) for r in ncu)
        out.append(Result("measuring", "the measured median against Nsight Compute's kernel time",
                          f"within {NCU_AGREEMENT:.0%}", f"{agree} of {len(ncu)} presets (the widest "
                          f"{max(abs(r.get('difference', 0)) for r in ncu):.1%})",
                          "met" if agree == len(ncu) else f"missed by {len(ncu) - agree} presets", **common))
    return out


def environment() -> dict:
    import tvm

    env = {"gpu": local_gpu(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
           "python": platform.python_version(), "tvm": tvm.__version__}
    try:
        import torch

        env["torch"] = f"PyTorch {torch.__version__}"
    except ImportError:
        pass
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"directory for the .md and .json ({RESULTS})")
    parser.add_argument("--presets", nargs="*", help="preset ids (default: every shipped preset)")
    parser.add_argument("--ncu", action="store_true", help="also compare with Nsight Compute for NCU_PRESETS")
    parser.add_argument("--knob-changes", type=int, default=KNOB_CHANGES)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--write-docs", action="store_true",
                        help="write bench/results/runs/measure-gpu.md and the targets' rows of docs/results.md")
    parser.add_argument("--from-json", type=Path, help="render a saved results file instead of measuring")
    args = parser.parse_args()
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        if local_gpu() is None:
            print("no CUDA device found: run this on the GPU machine", file=sys.stderr)
            return 3
        ceilings_first()
        ids = args.presets or list(all_presets())
        settings = MeasureSettings()
        results = {
            "command": "python bench/measure_gpu.py " + " ".join(sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d"),
            "environment": environment(),
            "settings": {"repeats": settings.repeats, "min_repeat_ms": settings.min_repeat_us / 1000,
                         "seed": settings.seed},
            "presets": measure_presets(ids, settings),
            "baselines": [] if args.no_baseline else measure_baselines(ids, settings),
            "knob_changes": time_knob_changes(ids, settings, args.knob_changes),
        }
        shutdown()  # ncu's children should have the GPU to themselves
        if args.ncu:
            results["ncu"] = compare_with_ncu(results["presets"], [p for p in NCU_PRESETS if p in ids])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "measure_gpu.json").write_text(json.dumps(results, indent=2, default=str))
    text = markdown(results)
    if not args.from_json:
        (args.out / "measure_gpu.md").write_text(text)
    print(text)
    if args.write_docs:
        write_section(SECTION, text)
        write_result(*results_rows(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The kernel table: for each benchmark workload (explorer.benchmarks.BENCHMARKS), the
fastest shipped preset on this GPU against PyTorch (CUDA graphs, TF32 off) and the
roofline, and whether the benchmark's goal is met.

    python bench/kernels.py [--no-write]
    python bench/kernels.py --only conv2d "matmul 1024"     # a subset: label contains a TEXT (or equals it)
    python bench/kernels.py --list                           # the workloads' labels
    python bench/kernels.py --only float16 --cold-l2 --ncu   # the 16-bit rows, also cold and under ncu

Every shipped preset of a benchmark's workload is measured (checked against NumPy first, then
timed with the default measurement settings: median of 20 repeats of >= 1 ms), both
launched back to back by ``time_evaluator`` and replayed from a CUDA graph. PyTorch is
timed in the same worker from CUDA graphs, so the ratio and the goals compare the graph
figures (like with like: neither pays a host launch per kernel); the fastest correct
preset by that figure is the row's "best preset". "% of roofline" is the least time the
measured roofline allows over the kernel's time from a graph. Prints one table and
writes it to bench/results/runs/kernels.md, and each benchmark's row of docs/results.md (its goal,
met or by how much). Rows are kept in bench/results/kernels-<gpu>.json, so runs with
``--only`` (each short enough for one session on the GPU machine) add up to the whole table.
The 16-bit matmuls are also measured with the matmul_hopper template's defaults (128×256×64
blocks, which divide every such row's shape: 11008 = 43 × 256) and with persistent tiles,
where no shipped preset has those knobs.

``--cold-l2`` times the best preset and PyTorch again with an L2 that holds none of the inputs
(``MeasureSettings.cold_l2``: a buffer four times the L2 written before each launch, one launch per
repeat). ``--ncu`` takes both kernels' durations from Nsight Compute (gpu__time_duration, ncu's
defaults: clocks locked at base, caches flushed before each launch; the warm-up calls left out).
Needs no streamlit or plotly.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys

from ceilings import ceilings_first
from docs_section import Result, run_file, write_result, write_section
from result_files import RESULTS, gpu_slug

from explorer.analysis.ncu import DURATION, durations_after_warm_up_us, profile, profile_program
from explorer.benchmarks import BENCHMARKS, Benchmark
from explorer.build import Spec
from explorer.errors import ExplorerError
from explorer.measure import MeasureSettings, baseline, local_gpu, measure
from explorer.measure.baseline import workload_to_json
from explorer.presets import all_presets
from explorer.schedules import get_template

TENSOR_CORE_DTYPES = ("float16", "bfloat16")


def _hopper(**changes):
    """The matmul_hopper template's default knobs, with ``changes``, for a 16-bit matmul."""
    return lambda w: (Spec("matmul_hopper", w, get_template("matmul_hopper").knobs(**changes))
                      if w.kind == "matmul" and w.dtype in TENSOR_CORE_DTYPES else None)


# Extra specs measured for a benchmark beside its presets (where no shipped preset has these knobs).
EXTRA_SPECS = {
    "matmul_async defaults": lambda w: Spec("matmul_async", w, get_template("matmul_async").knobs())
    if w.kind == "matmul" and w.dtype == "float32" and w.m == 4096 else None,
    "matmul_hopper defaults": _hopper(),
    "matmul_hopper persistent": _hopper(persistent=True),
}
COLD_L2 = MeasureSettings(cold_l2=True)
NCU_WARM_UP, NCU_CALLS = 2, 5  # calls profiled: the first ones pay lazy loading and cuBLAS's set-up


def candidates(workload) -> dict[str, Spec]:
    """The shipped presets of ``workload`` and the extra specs that differ from all of them, by name."""
    found = {p.id: p.spec for p in all_presets().values() if p.spec.workload == workload}
    for name, make in EXTRA_SPECS.items():
        spec = make(workload)
        if spec is not None and spec not in found.values():
            found[name] = spec
    return found


def row(benchmark: Benchmark) -> dict:
    workload = benchmark.workload
    specs = candidates(workload)
    presets = list(specs)
    best, best_id, wrong = None, None, []
    for name, spec in specs.items():
        try:
            result = measure(spec)
        except ExplorerError as error:
            wrong.append(f"{name}: {error}")
            continue
        if not result.correct:
            wrong.append(f"{name}: wrong result")
            continue
        if best is None or result.versus_pytorch[0] < best.versus_pytorch[0]:
            best, best_id = result, name
        print(f"  {name}: {result.median_us:.2f} µs back to back, {_us(result.graph_us)} µs from a graph",
              file=sys.stderr)
    try:
        torch_us = baseline(workload).median_us
    except ExplorerError as error:
        print(f"  PyTorch baseline: {error}", file=sys.stderr)
        torch_us = None
    tvm_us = best.versus_pytorch[0] if best else None
    percent = None
    if best:
        percent = best.graph_percent_of_roofline if best.graph else best.percent_of_roofline
    out = {"workload": workload.label(), "best": best_id or "—", "back_to_back_us": best.median_us if best else None,
           "graph_us": best.graph_us if best else None, "tvm_us": tvm_us,
           "torch_us": torch_us, "percent_of_roofline": percent, "goal": benchmark.goal, "presets": len(presets),
           "failed": wrong, "date": str(datetime.date.today())}
    out["ratio"] = tvm_us / torch_us if tvm_us and torch_us else None
    out["tvm_tflops"] = workload.flops / tvm_us / 1e6 if tvm_us else None
    out["torch_tflops"] = workload.flops / torch_us / 1e6 if torch_us else None
    out["met"] = benchmark.verdict(tvm_us, torch_us)
    return out


def cold_l2_timings(spec: Spec, workload) -> dict:
    """The kernel and PyTorch timed again with a cold L2 (each checked first, as always)."""
    result = measure(spec, settings=COLD_L2)
    try:
        torch_us = baseline(workload, settings=COLD_L2).median_us
    except ExplorerError as error:
        print(f"  PyTorch baseline, cold L2: {error}", file=sys.stderr)
        torch_us = None
    return {"cold_tvm_us": result.versus_pytorch[0] if result.correct else None, "cold_torch_us": torch_us}


def ncu_timings(spec: Spec, workload) -> dict:
    """Median kernel µs per call under Nsight Compute, of the kernel (compiled as the measuring
    worker compiles it) and of PyTorch's op; ``ncu_error`` says why where ncu could not."""
    calls = NCU_WARM_UP + NCU_CALLS
    try:
        tvm_counters = profile(spec, metrics=(DURATION,), calls=calls, nvcc=False)
        torch_counters = profile_program(["-m", "explorer.measure.baseline", workload_to_json(workload), str(calls)],
                                         metrics=(DURATION,))
        return {"ncu_tvm_us": statistics.median(durations_after_warm_up_us(tvm_counters, calls, NCU_WARM_UP)),
                "ncu_torch_us": statistics.median(durations_after_warm_up_us(torch_counters, calls, NCU_WARM_UP))}
    except ExplorerError as error:
        print(f"  ncu: {error}", file=sys.stderr)
        return {"ncu_error": str(error)}


def extra_timings(workload, best: str, cold_l2: bool, with_ncu: bool) -> dict:
    """``--cold-l2`` and ``--ncu`` figures of the row's best setting (none where nothing was correct)."""
    spec = candidates(workload).get(best)
    if spec is None:
        return {}
    return {**(cold_l2_timings(spec, workload) if cold_l2 else {}), **(ncu_timings(spec, workload) if with_ncu else {})}


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _tflops(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def met(row: dict) -> str:
    """The row's verdict in the benchmark's current words (stored rows keep the figures)."""
    benchmark = next((b for b in BENCHMARKS if b.workload.label() == row["workload"]), None)
    return benchmark.verdict(row["tvm_us"], row["torch_us"]) if benchmark else row["met"]


def table(rows: list[dict]) -> str:
    """The kernel table; the cold-L2 and ncu columns where some row has them."""
    cold = any(r.get("cold_tvm_us") or r.get("cold_torch_us") for r in rows)
    ncu = any(r.get("ncu_tvm_us") for r in rows)
    extra_heads = (["cold L2 µs TVM / PyTorch"] if cold else []) + (["ncu µs TVM / PyTorch"] if ncu else [])
    heads = ["workload", "best preset", "TVM µs, back to back", "TVM µs, CUDA graph", "PyTorch µs, CUDA graph",
             "TVM / PyTorch", "TFLOP/s TVM / PyTorch", "% of roofline", *extra_heads, "goal", "met"]
    aligns = ["---", "---", *["---:"] * (6 + len(extra_heads)), "---", "---"]
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join(aligns) + " |"]
    for r in rows:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        roofline = "—" if r["percent_of_roofline"] is None else f"{r['percent_of_roofline']:.0f}%"
        rates = f"{_tflops(r['tvm_tflops'])} / {_tflops(r['torch_tflops'])}"
        extras = ([f"{_us(r.get('cold_tvm_us'))} / {_us(r.get('cold_torch_us'))}"] if cold else []) + (
            [f"{_us(r.get('ncu_tvm_us'))} / {_us(r.get('ncu_torch_us'))}"] if ncu else [])
        cells = [r["workload"], f"`{r['best']}`", _us(r["back_to_back_us"]), _us(r["graph_us"]), _us(r["torch_us"]),
                 ratio, rates, roofline, *extras, r["goal"], met(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results(gpu: str, rows: list[dict]) -> list[Result]:
    """docs/results.md's row of each benchmark: the best preset against PyTorch, judged by the goal's current
    words; the command that measures that row again."""
    out = []
    for r in rows:
        benchmark = next((b for b in BENCHMARKS if b.workload.label() == r["workload"]), None)
        verdict = met(r)
        verdict = "met" if verdict == "yes" else verdict.replace("no: ", "missed: ", 1)
        if r["tvm_us"] and r["torch_us"]:
            roofline = "" if r["percent_of_roofline"] is None else f"; {r['percent_of_roofline']:.0f}% of roofline"
            now = (f"`{r['best']}` {r['tvm_us']:,.2f} µs, PyTorch {r['torch_us']:,.2f} µs ({r['ratio']:.2f}×; "
                   f"{_tflops(r['tvm_tflops'])} / {_tflops(r['torch_tflops'])} TFLOP/s{roofline})")
        else:
            now = "not measured: " + ("; ".join(r["failed"]) or "no correct preset or no PyTorch time")
        out.append(Result("kernels", r["workload"], benchmark.goal if benchmark else r["goal"], now, verdict, gpu,
                          r.get("date", ""), f"python bench/kernels.py --only {shlex.quote(r['workload'])}",
                          run_file("kernels")))
    return out


def selected(only: list[str] | None) -> tuple[Benchmark, ...]:
    """The benchmarks whose label equals one of ``only`` or contains one that is no label itself
    ("matmul 4096x4096x4096" is the fp32 row alone; "matmul 4096" is all three)."""
    if not only:
        return BENCHMARKS
    labels = {t.workload.label() for t in BENCHMARKS}
    texts = [text.lower() for text in only]
    exact = {text for text in texts if text in {label.lower() for label in labels}}
    return tuple(t for t in BENCHMARKS if any(text == t.workload.label().lower() if text in exact
                                           else text in t.workload.label().lower() for text in texts))


def merged_rows(gpu: str, rows: list[dict], write: bool) -> list[dict]:
    """This run's rows over those of earlier runs on the same GPU, in the order of BENCHMARKS."""
    path = RESULTS / f"kernels-{gpu_slug(gpu)}.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    kept |= {r["workload"]: r for r in rows}
    if write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=1))
    return [kept[label] for label in (t.workload.label() for t in BENCHMARKS) if label in kept]


def section(gpu: str, rows: list[dict]) -> str:
    """The run's report (section "kernels") for these rows."""
    failed = [f for r in rows for f in r["failed"]]
    return "\n".join([
        f"## Kernels: best shipped preset vs PyTorch on {gpu}",
        "",
        f"`python bench/kernels.py` ({measured_on(rows)}). Each kernel is checked against NumPy, then "
        "timed twice (median of 20 repeats of ≥ 1 ms): launched back to back by TVM's `time_evaluator`, and "
        "replayed from a CUDA graph as PyTorch is (TF32 off). The ratio, the goals and the best preset use the "
        "graph figures: back to back, each launch also pays 1–2 µs of host launch cost, which is most of a "
        "small kernel's time. % of roofline: the least time the measured roofline allows (FLOPs at the compute "
        "peak, or compulsory bytes at the L2 or HBM bandwidth) ÷ the kernel's time from a graph; the compute "
        "peak is the CUDA cores' FP32 one for float32 inputs and the tensor cores' (a wgmma chain, on Hopper) "
        "for float16 and bfloat16. Kernels of more than 500 µs are timed back to back only (a launch's host "
        "cost is lost in them). Cold L2 (`--cold-l2`): one launch per repeat after a write of four times the "
        "L2, both sides. ncu (`--ncu`): Nsight Compute's gpu__time_duration per call, median of "
        f"{NCU_CALLS} calls after {NCU_WARM_UP}, at its defaults (clocks locked at base, caches flushed).",
        "",
        table(rows),
        *([""] + [f"- not measured: {f}" for f in failed] if failed else []),
    ])


def measured_on(rows: list[dict]) -> str:
    """The dates of the table's rows: one date, or each date with the rows measured then."""
    dates: dict[str, list[str]] = {}
    for r in rows:
        dates.setdefault(r.get("date", "date not recorded"), []).append(r["workload"])
    if len(dates) == 1:
        return next(iter(dates))
    return "; ".join(f"{date}: {', '.join(labels)}" for date, labels in sorted(dates.items()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="measure only the workloads whose label contains TEXT (or equals it); the table keeps "
                             "the other rows from earlier runs on this GPU")
    parser.add_argument("--list", action="store_true", help="print the workloads' labels and exit")
    parser.add_argument("--cold-l2", action="store_true",
                        help="also time each row's best setting and PyTorch with a cold L2 (a buffer four times the "
                             "L2 written before each launch)")
    parser.add_argument("--ncu", action="store_true",
                        help="also take both kernels' durations from Nsight Compute (gpu__time_duration)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(t.workload.label() for t in BENCHMARKS))
        return 0
    benchmarks = selected(args.only)
    if not benchmarks:
        print(f"error: no workload label contains {' or '.join(args.only)}; see --list.", file=sys.stderr)
        return 2
    gpu = local_gpu()
    if gpu is None:
        print("error: no CUDA GPU on this machine; the kernel table is measured on one.", file=sys.stderr)
        return 2
    ceilings_first()
    rows = []
    for benchmark in benchmarks:
        print(benchmark.workload.label(), file=sys.stderr)
        rows.append(row(benchmark))
        if args.cold_l2 or args.ncu:
            rows[-1] |= extra_timings(benchmark.workload, rows[-1]["best"], args.cold_l2, args.ncu)
        merged_rows(gpu, rows[-1:], write=not args.no_write)  # a run stopped half-way keeps what it measured
    rows = merged_rows(gpu, rows, write=False)
    print(table(rows))
    if not args.no_write:
        write_section("kernels", section(gpu, rows))
        write_result(*results(gpu, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

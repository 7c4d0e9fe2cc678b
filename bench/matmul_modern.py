"""The modern matmul templates on this machine's GPU: each case checked against NumPy, timed
(back to back and from a CUDA graph), beside PyTorch (cuBLAS) on the same workload and dtype.

    python bench/matmul_modern.py                 # lesson presets + candidates, ~2-4 minutes on an H100
    python bench/matmul_modern.py --quick         # the lesson presets only
    python bench/matmul_modern.py --max-minutes 6 --no-write

A case that fails to build, is wrong, crashes or hangs is reported with its reason and the
others go on. Prints one line per case as it finishes, then the table; writes the raw
results to bench/results/matmul-modern-<gpu>.json and the table to
bench/results/runs/matmul_modern.md. Ratios compare CUDA-graph figures (PyTorch is timed that way).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
import traceback

from docs_section import write_section
from result_files import RESULTS, gpu_slug

from explorer.benchmarks import get_benchmark
from explorer.build import Spec
from explorer.measure import baseline, local_gpu, measure
from explorer.measure.settings import MeasureSettings
from explorer.presets import all_presets
from explorer.schedules.matmul_async import MatmulAsyncKnobs
from explorer.schedules.matmul_tensorcore import MatmulTensorCoreKnobs
from explorer.workloads import Matmul

SETTINGS = MeasureSettings(repeats=10)
FP32_1024, FP32_4096, FP16_4096, BF16_4096 = (
    get_benchmark(name).workload for name in ("matmul-1024", "matmul-4096", "matmul-fp16-4096", "matmul-bf16-4096"))


def simt(workload, **knobs) -> Spec:
    return Spec("matmul_async", workload, MatmulAsyncKnobs(**knobs))


def tensorcore(workload, **knobs) -> Spec:
    return Spec("matmul_tensorcore", workload, MatmulTensorCoreKnobs(**knobs))


# Candidates beside the presets: other block shapes (1024³ has only 64 blocks of 128 × 128
# for 132 SMs, 128 of 128 × 64), deeper pipelines, wider K steps.
CANDIDATES = {
    "async-1024-128x128": simt(FP32_1024),
    "async-1024-64x64": simt(FP32_1024, block_m=64, block_n=64, warp_m=32, warp_n=32, thread_m=4, thread_n=8),
    "async-1024-64x128-k8-s4": simt(FP32_1024, block_m=64, block_k=8, stages=4, warp_m=32, warp_n=64),
    "async-1024-128x64-sync": simt(FP32_1024, block_n=64, async_copy=False, stages=2),
    "async-4096-default": simt(FP32_4096),
    "async-4096-k8-s4": simt(FP32_4096, block_k=8, stages=4),
    "async-4096-k32-s3": simt(FP32_4096, block_k=32, stages=3),
    "async-4096-no-transpose": simt(FP32_4096, transpose_a=False, read_vector=4),
    "tc-fp16-4096-128x256": tensorcore(FP16_4096, block_n=256, warp_n=64, warp_m=64),
    "tc-fp16-4096-256x128": tensorcore(FP16_4096, block_m=256, warp_m=64),
    "tc-fp16-4096-s4": tensorcore(FP16_4096, stages=4),
    "tc-fp16-4096-k64-s3": tensorcore(FP16_4096, block_k=64),
    "tc-fp16-4096-warp32x64": tensorcore(FP16_4096, warp_m=32),
    "tc-fp16-4096-swizzle": tensorcore(FP16_4096, swizzle=True, shared_pad=0),
    "tc-fp16-4096-128x256-swizzle-s4": tensorcore(FP16_4096, block_n=256, swizzle=True, shared_pad=0, stages=4),
    "tc-fp16-4096-no-pipeline": tensorcore(FP16_4096, stages=1, async_copy=False),
    "tc-bf16-4096-128x256": tensorcore(BF16_4096, block_n=256),
}


def cases(quick: bool) -> dict[str, Spec]:
    lesson = {pid: p.spec for pid, p in all_presets().items() if pid.startswith("modern-")}
    return lesson if quick else {**lesson, **CANDIDATES}


def measure_case(name: str, spec: Spec) -> dict:
    start = time.perf_counter()
    out = {"case": name, "template": spec.template, "workload": spec.workload.label(),
           "knobs": spec.knobs.to_dict()}
    try:
        result = measure(spec, settings=SETTINGS)
        out |= {"correct": result.correct, "check": result.check.describe(), "back_to_back_us": result.median_us,
                "graph_us": result.graph_us}
    except Exception as error:  # any failure is this case's, never the run's
        out |= {"correct": False, "check": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(limit=3)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def torch_case(workload: Matmul) -> dict:
    try:
        result = baseline(workload, settings=SETTINGS)
        return {"library": result.library, "correct": result.check.correct, "us": result.median_us,
                "check": result.check.describe()}
    except Exception as error:
        return {"correct": False, "us": None, "check": f"{type(error).__name__}: {error}"}


def tflops(workload_flops: int, us: float | None) -> float | None:
    return workload_flops / us / 1e6 if us else None


def table(rows: list[dict], torch: dict, flops: dict) -> str:
    lines = ["| case | workload | TVM µs (graph) | TVM TFLOP/s | PyTorch µs | PyTorch TFLOP/s | TVM / PyTorch time "
             "| % of PyTorch's TFLOP/s | check |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        us = (r.get("graph_us") or r.get("back_to_back_us")) if r["correct"] else None
        t = torch.get(r["workload"], {}).get("us")
        fmt = lambda v, f: "—" if v is None else format(v, f)  # noqa: E731
        ratio = us / t if us and t else None
        check = "correct" if r["correct"] else re.sub(r"\s+", " ", r["check"])[:120].replace("|", "/")
        rate = flops[r["workload"]]
        lines.append(f"| `{r['case']}` | {r['workload']} | {fmt(us, '.2f')} | {fmt(tflops(rate, us), '.1f')} | "
                     f"{fmt(t, '.2f')} | {fmt(tflops(rate, t), '.1f')} | {fmt(ratio, '.2f')} | "
                     f"{fmt(100 / ratio if ratio else None, '.0f')} | {check} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the lesson presets only")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    parser.add_argument("--max-minutes", type=float, default=7.0, help="stop starting new cases after this")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    gpu = local_gpu()
    if gpu is None:
        print("error: no CUDA GPU on this machine.", file=sys.stderr)
        return 2
    todo = cases(args.quick)
    if args.only:
        todo = {k: v for k, v in todo.items() if k in args.only}
    deadline = time.monotonic() + 60 * args.max_minutes
    workloads = {spec.workload.label(): spec.workload for spec in todo.values()}
    torch = {}
    for label, workload in workloads.items():
        torch[label] = torch_case(workload)
        print(f"PyTorch {label}: {torch[label]['us']} µs ({torch[label]['check']})", flush=True)
    rows = []
    for name, spec in todo.items():
        if time.monotonic() > deadline:
            print(f"skipped {name}: past --max-minutes", flush=True)
            continue
        r = measure_case(name, spec)
        rows.append(r)
        print(f"{name}: {r.get('graph_us')} µs graph, {r.get('back_to_back_us')} µs back to back, "
              f"{'correct' if r['correct'] else r['check']} ({r['seconds']} s)", flush=True)
    flops = {label: w.flops for label, w in workloads.items()}
    text = table(rows, torch, flops)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"matmul-modern-{gpu_slug(gpu)}.json").write_text(
            json.dumps({"gpu": gpu, "pytorch": torch, "cases": rows}, indent=1))
        write_section("matmul_modern", "\n".join([
            f"## Modern matmul templates on {gpu}", "",
            f"`python bench/matmul_modern.py` ({datetime.date.today()}): each case checked against NumPy, then "
            "timed from a CUDA graph (median of 10 repeats of ≥ 1 ms), beside `torch.matmul` in the same dtype "
            "(TF32 off for float32).", "", text]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

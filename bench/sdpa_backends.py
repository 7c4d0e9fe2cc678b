"""PyTorch's scaled_dot_product_attention with each of its backends, on the attention benchmarks:
the bar the attention lesson's kernels are held to is the fastest backend, not the one PyTorch
happens to pick.

    python bench/sdpa_backends.py [--no-write] [--only attention-4096-d128 ...]

Each backend (flash, memory-efficient, cuDNN, math) is forced with ``torch.nn.attention.sdpa_kernel``,
checked against the float64 reference on the same seeded inputs as the explorer's kernels, and
timed like the explorer's PyTorch baseline (``explorer.measure.graphs.time_cuda_graph``: replays of
a captured CUDA graph, the default measurement settings). A backend that refuses the shape, or
is wrong, says so in its cell. "default" is PyTorch's own choice. Runs in this process (it needs
the GPU and PyTorch); writes bench/results/runs/sdpa-backends.md and
bench/results/sdpa-<gpu>.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

from docs_section import write_section
from result_files import RESULTS, gpu_slug

from explorer.benchmarks import BENCHMARKS
from explorer.measure import MeasureSettings
from explorer.measure.data import workload_data
from explorer.measure.gate import compare
from explorer.measure.graphs import cuda_torch, time_cuda_graph, torch_tensor

BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def backend_op(workload, tensors, backend_name: str | None):
    """The workload's SDPA call, under one backend (None: PyTorch's own choice)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    op = workload.torch_op(tensors)
    if backend_name is None:
        return op
    backend = getattr(SDPBackend, backend_name)

    def forced():
        with sdpa_kernel(backend):
            return op()

    return forced


def measure_backends(workload, settings: MeasureSettings) -> dict[str, dict]:
    torch = cuda_torch()
    inputs, reference = workload_data(workload, settings.seed)
    tensors = [torch_tensor(x).cuda() for x in inputs]
    cells = {}
    for name in (None, *BACKENDS):
        label = (name or "default").lower()
        try:
            op = backend_op(workload, tensors, name)
            output = op()
            torch.cuda.synchronize()
        except RuntimeError as error:  # the backend does not take this shape or GPU
            cells[label] = {"error": str(error).splitlines()[0][:160]}
            continue
        check = compare(output.float().cpu().numpy(), reference, workload.reduction_length(),
                        workload.tolerance_floor)
        if not check.correct:
            cells[label] = {"error": f"wrong: {check.describe()}"}
            continue
        us = time_cuda_graph(op, settings).median_us
        cells[label] = {"us": us, "tflops": workload.flops / us / 1e6}
        print(f"  {label}: {us:.1f} µs, {cells[label]['tflops']:.1f} TFLOP/s", file=sys.stderr)
        del output
        torch.cuda.empty_cache()
    return cells


def table(rows: list[dict], gpu: str, library: str) -> str:
    labels = ["default", *(b.lower() for b in BACKENDS)]
    lines = [f"### PyTorch's attention backends on the {gpu}", "",
             f"{library}; `python bench/sdpa_backends.py`, {datetime.date.today()}. Time (µs, median of CUDA-graph "
             "replays) and TFLOP/s (causal: the unmasked half's FLOPs) per backend, each checked against the float64 "
             "reference first; the fastest is bold.", "",
             "| benchmark | workload | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for row in rows:
        timed = [c["us"] for c in row["cells"].values() if "us" in c]
        fastest = min(timed) if timed else None
        cells = []
        for label in labels:
            cell = row["cells"].get(label, {"error": "not run"})
            if "us" in cell:
                text = f"{cell['us']:.0f} µs, {cell['tflops']:.0f} TFLOP/s"
                cells.append(f"**{text}**" if cell["us"] == fastest else text)
            else:
                cells.append(f"— ({cell['error']})".replace("|", "/"))
        lines.append(f"| {row['id']} | {row['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", help="these benchmark ids")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    torch = cuda_torch()
    gpu = torch.cuda.get_device_name(0)
    library = f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    rows = []
    for benchmark in BENCHMARKS:
        if benchmark.workload.kind != "attention" or (args.only and benchmark.id not in args.only):
            continue
        print(f"{benchmark.id}: {benchmark.workload.label()}", file=sys.stderr)
        rows.append({"id": benchmark.id, "workload": benchmark.workload.label(),
                     "cells": measure_backends(benchmark.workload, MeasureSettings())})
    text = table(rows, gpu, library)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"sdpa-{gpu_slug(gpu)}.json").write_text(json.dumps({"gpu": gpu, "library": library, "rows": rows},
                                                              indent=1))
        write_section("sdpa-backends", text)


if __name__ == "__main__":
    main()

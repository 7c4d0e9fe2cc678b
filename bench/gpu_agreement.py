"""The GPUs of one machine as a class server uses them: each setting measured on every GPU by
that GPU's own measuring worker (how far apart identical GPUs time the same kernel), then the
same settings through a server's queue with one worker per GPU (measurements per second on one
GPU and on all of them, and no two kernels at once on one GPU).

    python bench/gpu_agreement.py [--gpus 2] [--presets ID,...] [--write]

``--write``: the tables to bench/results/runs/gpu-agreement.md, the agreement's row to docs/results.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from docs_section import Result, run_file, write_result, write_section

from explorer.errors import ExplorerError
from explorer.measure import MeasureSettings, local_gpu
from explorer.measure.measurement import LocalGPU
from explorer.measure.worker import Trial
from explorer.presets import get_preset
from explorer.server.in_process import MeasuringInProcess
from explorer.server.settings import ServerSettings

PRESETS = ("dw-blog-final-96", "modern-vector-1024", "modern-tensorcore-fp16-4096", "conv2d-modern-async")
AGREE = 0.03  # identical GPUs should time a kernel within 3% of each other


def agreement(gpus: list[LocalGPU], presets: tuple[str, ...]) -> list[tuple[str, list[float]]]:
    """Each preset's median µs on every GPU, each measured by that GPU's worker alone."""
    rows = []
    for preset in presets:
        spec = get_preset(preset).spec
        trial = Trial(spec, spec.workload, "auto", MeasureSettings())
        rows.append((preset, [gpu.measure(trial).median_us for gpu in gpus]))
    return rows


def result(rows: list[tuple[str, list[float]]], machine: str, date: str, command: str) -> Result:
    """docs/results.md's row: identical GPUs time each preset within AGREE of each other."""
    spreads = [(max(times) - min(times)) / statistics.median(times) for _, times in rows]
    within = sum(spread <= AGREE for spread in spreads)
    return Result("measuring", "the GPUs of one machine time the same kernel alike", f"within {AGREE:.0%}",
                  f"{within} of {len(rows)} presets within it (the widest spread {max(spreads):.1%})",
                  "met" if within == len(rows) else f"missed by {len(rows) - within} presets", machine, date,
                  command, run_file("gpu-agreement"))


def throughput(gpus: int, presets: tuple[str, ...], variants: int) -> tuple[float, int]:
    """Seconds to measure ``variants`` settings of each preset through a server's queue on ``gpus``
    GPUs (the compile processes compile them first), and the measurements made."""
    measuring = MeasuringInProcess(ServerSettings(build_workers=0, diagnose=False, gpus=gpus))
    measuring.start(get_preset(presets[0]).spec)
    measuring.ready.wait()
    measuring.compiles.ready.wait(300)
    specs = []
    for preset in presets:
        spec = get_preset(preset).spec
        name = "num_thread_x" if hasattr(spec.knobs, "num_thread_x") else None
        specs += [spec] if name is None else [spec.with_knobs(**{name: x}) for x in (1, 2, 4, 8, 16, 32)[:variants]]
    for spec in list(specs):  # compiled first: the timing below is the GPUs'
        try:
            measuring.compiles.compile(spec, "auto")
        except ExplorerError:  # a variant the template refuses
            specs.remove(spec)
    start = time.monotonic()
    jobs = [measuring.request(f"student {n}", spec, "auto") for n, spec in enumerate(specs)]
    for job in jobs:
        job.wait()
    seconds = time.monotonic() - start
    measuring.close()
    return seconds, len(jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--variants", type=int, default=6, help="settings per preset in the throughput run")
    parser.add_argument("--write", action="store_true",
                        help="write the tables to bench/results/runs/gpu-agreement.md and the row of docs/results.md")
    args = parser.parse_args()
    os.environ.setdefault("EXPLORER_RUN_LOG", os.path.join(tempfile.gettempdir(), "explorer-gpu-agreement.log"))
    presets = tuple(filter(None, args.presets.split(",")))
    gpus = [LocalGPU(str(index)) for index in range(args.gpus)]
    rows = agreement(gpus, presets)
    lines = ["| preset | " + " | ".join(f"GPU {i} µs" for i in range(args.gpus)) + " | spread | within 3% |",
             "| --- |" + " ---: |" * args.gpus + " ---: | --- |"]
    for preset, times in rows:
        spread = (max(times) - min(times)) / statistics.median(times)
        lines.append(f"| `{preset}` | " + " | ".join(f"{t:.2f}" for t in times)
                     + f" | {100 * spread:.1f}% | {'yes' if spread <= AGREE else '**no**'} |")
    for gpu in gpus:
        gpu.close()
    print("\n".join(lines), flush=True)
    one_s, count = throughput(1, presets, args.variants)
    all_s, _ = throughput(args.gpus, presets, args.variants)
    lines += ["", f"{count} settings through the queue: {count / one_s:.2f} measurements per second on one GPU, "
              f"{count / all_s:.2f} on {args.gpus} ({one_s / all_s:.2f}×)."]
    text = "\n".join(lines)
    print(lines[-1])
    if args.write:
        command = "python bench/gpu_agreement.py " + " ".join(sys.argv[1:])
        date = time.strftime("%Y-%m-%d")
        write_section("gpu-agreement", f"### GPUs of one machine: agreement and throughput\n\nDate: "
                      f"{date}. Command: `{command}`\n\n{text}\n")
        write_result(result(rows, f"{args.gpus} × {local_gpu()}, {os.cpu_count()} cores", date, command))


if __name__ == "__main__":
    main()

"""What limits a kernel, from Nsight Compute: a preset's kernel beside PyTorch's for the same
workload, with cold and warm L2.

    python bench/ncu_limits.py best-matmul-1024 best-matmul-async-4096 [--write ncu-limits-fp32-matmul]

For each preset, ncu profiles one call of the kernel (``python -m explorer.analysis.ncu``: built
with NVRTC, as the measuring worker builds it) and one call of the workload's PyTorch op (TF32
off), each twice: with the caches flushed before the launch (cold L2) and left as they are after
two warm-up calls (warm L2); the clocks are left unlocked both times. Per launch: the duration,
grid and block, registers, waves per SM, theoretical and achieved occupancy, the SM's and DRAM's
share of their peaks, the L2 hit rate, the FMA pipe's use and the three stall reasons that cost
the most cycles per issued instruction.
Prints a Markdown table (``--write NAME``: also into docs/benchmarks.md). Needs a GPU, ncu and
PyTorch.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

from docs_section import write_section

from explorer.analysis.ncu import KernelCounters, ncu_path, parse_ncu_csv, spec_from_json, spec_to_json
from explorer.cuda_env import without_source_only
from explorer.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]
DURATION = "gpu__time_duration.sum"
METRICS = (
    DURATION, "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__waves_per_multiprocessor", "sm__maximum_warps_per_active_cycle_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
)
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
WARM_CALLS = 3  # the last of three calls runs with a warm L2 and warm instruction caches


def run_ncu(spec_json: str, side: str, cold: bool) -> list[KernelCounters]:
    """ncu over one child program (``side``: "tvm" or "pytorch"): the profiled launches."""
    calls = 1 if cold else WARM_CALLS
    options = ["--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
               "--cache-control", "all" if cold else "none", "--metrics", ",".join((*METRICS, STALLS))]
    if not cold:  # only the last call: the earlier ones warm the caches
        options += ["--launch-skip", str(WARM_CALLS - 1), "--launch-count", "1"]
    program = ["-m", "explorer.analysis.ncu"] if side == "tvm" else [__file__, "--launch-pytorch"]
    command = [ncu_path(), *options, sys.executable, *program, spec_json, str(calls)]
    env = {**without_source_only(os.environ),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    if proc.returncode != 0 or '"ID",' not in proc.stdout:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise SystemExit(f"ncu failed on {side} (exit {proc.returncode}): {' / '.join(tail)}")
    return parse_ncu_csv(proc.stdout, (*METRICS, *stall_columns(proc.stdout)))


def stall_columns(csv_text: str) -> tuple[str, ...]:
    """The stall-reason metrics that the regex matched: columns of the CSV's header row (the
    other columns ncu adds are text, such as the device's name)."""
    header = next((line for line in csv_text.splitlines() if line.startswith('"ID",')), "")
    names = [name.strip('"') for name in header.split('","')]
    return tuple(n for n in names if n.startswith(STALL_PREFIX) and n.endswith(STALL_SUFFIX))


def launch_pytorch(spec_json: str, calls: int) -> None:
    """The profiled program on PyTorch's side: ``calls`` calls of the workload's op, nothing
    else on the GPU (the TVM side is ``python -m explorer.analysis.ncu``)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    workload = spec_from_json(spec_json).workload
    op = workload.torch_op([torch.from_numpy(x).cuda() for x in workload.random_inputs(0)])
    for _ in range(calls):
        op()
    torch.cuda.synchronize()


def top_stalls(counters: KernelCounters, count: int = 3) -> str:
    stalls = {name[len(STALL_PREFIX):-len(STALL_SUFFIX)]: value for name, value in counters.metrics.items()
              if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX) and value
              and "not_issued" not in name and name != STALL_PREFIX + "selected" + STALL_SUFFIX}
    ranked = sorted(stalls.items(), key=lambda item: -item[1])[:count]
    return ", ".join(f"{name} {value:.1f}" for name, value in ranked)


def main_kernel(launches: list[KernelCounters]) -> KernelCounters:
    """The launch that took longest: the GEMM, not a copy or a fill PyTorch may add."""
    return max(launches, key=lambda c: c.metrics.get(DURATION) or 0)


def row(label: str, side: str, cold: bool, c: KernelCounters) -> str:
    m = c.metrics.get

    def pct(name: str) -> str:
        return "—" if m(name) is None else f"{m(name):.0f}%"

    return (f"| {label} | {side} | {'cold' if cold else 'warm'} | {m(DURATION) / 1e3:.1f} | "
            f"{c.kernel[:40]} | {c.grid} × {c.block} | {m('launch__registers_per_thread') or 0:.0f} | "
            f"{m('launch__waves_per_multiprocessor') or 0:.2f} | {pct('sm__maximum_warps_per_active_cycle_pct')} / "
            f"{pct('sm__warps_active.avg.pct_of_peak_sustained_active')} | "
            f"{pct('sm__throughput.avg.pct_of_peak_sustained_elapsed')} | "
            f"{pct('dram__throughput.avg.pct_of_peak_sustained_elapsed')} | {pct('lts__t_sector_hit_rate.pct')} | "
            f"{pct('sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active')} | "
            f"{pct('smsp__issue_active.avg.pct_of_peak_sustained_active')} | {top_stalls(c)} |")


HEADER = ("| preset | kernel of | L2 | µs | kernel | grid × block | regs | waves | occupancy theor. / achieved | "
          "SM busy | DRAM | L2 hit | FMA pipe | issue slots | top stalls (cycles per issued instruction) |\n"
          "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def table(presets: list[str]) -> str:
    lines = [HEADER]
    for preset_id in presets:
        spec_json = spec_to_json(get_preset(preset_id).spec)
        for side in ("tvm", "pytorch"):
            for cold in (True, False):
                lines.append(row(preset_id, "TVM" if side == "tvm" else "PyTorch", cold,
                                 main_kernel(run_ncu(spec_json, side, cold))))
                print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*")
    parser.add_argument("--write", metavar="NAME", help="also write the table into docs/benchmarks.md as section NAME")
    parser.add_argument("--launch-pytorch", nargs=2, metavar=("SPEC_JSON", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.launch_pytorch:
        launch_pytorch(args.launch_pytorch[0], int(args.launch_pytorch[1]))
        return
    if ncu_path() is None:
        raise SystemExit("Nsight Compute (ncu) is not installed on this machine.")
    text = table(args.presets)
    import torch

    heading = (f"### What limits each kernel (Nsight Compute)\n\nMachine: {torch.cuda.get_device_name(0)}. "
               f"Date: {datetime.date.today()}. Command: `python bench/ncu_limits.py {' '.join(args.presets)}`\n\n")
    print(text)
    if args.write:
        write_section(args.write, heading + text)


if __name__ == "__main__":
    main()

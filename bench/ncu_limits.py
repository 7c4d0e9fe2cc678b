"""What limits a kernel, from Nsight Compute: a preset's kernel beside PyTorch's for the same
workload, with cold and warm L2.

    python bench/ncu_limits.py best-matmul-1024 best-matmul-async-4096 [--write ncu-limits-fp32-matmul]

For each preset, ncu profiles one call of the kernel (``python -m explorer.analysis.ncu``: built
with NVRTC, as the measuring worker builds it) and one call of the workload's PyTorch op
(``python -m explorer.measure.baseline``, TF32 off), each twice: with the caches flushed before
the launch (cold L2) and left as they are after two warm-up calls (warm L2); the clocks are left
unlocked both times. Per launch: the duration, grid and block, registers, waves per SM,
theoretical and achieved occupancy, the SM's and DRAM's share of their peaks, the L2 hit rate,
the FMA pipe's use and the three stall reasons that cost the most cycles per issued instruction.
Prints a Markdown table (``--write NAME``: also to bench/results/runs/NAME.md). Needs a GPU, ncu and
PyTorch.
"""
from __future__ import annotations

import argparse
import datetime

from docs_section import write_section

from explorer.analysis.ncu import KernelCounters, ncu_path, profile_program, spec_to_json
from explorer.measure.baseline import workload_to_json
from explorer.presets import get_preset

DURATION = "gpu__time_duration.sum"
METRICS = (
    DURATION, "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__waves_per_multiprocessor", "sm__maximum_warps_per_active_cycle_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",  # mma.sync's pipe
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",  # extra shared-load wavefronts (ldmatrix too)
)
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
WARM_CALLS = 3  # the last of three calls runs with a warm L2 and warm instruction caches


def run_ncu(spec, side: str, cold: bool) -> list[KernelCounters]:
    """ncu over one call of ``side`` ("tvm": the kernel, built with NVRTC as the measuring worker
    builds it; "pytorch": the workload's op): the profiled launches."""
    calls = 1 if cold else WARM_CALLS
    program = (["-m", "explorer.analysis.ncu", spec_to_json(spec)] if side == "tvm" else
               ["-m", "explorer.measure.baseline", workload_to_json(spec.workload)])
    options = ["--clock-control", "none", "--cache-control", "all" if cold else "none"]
    if not cold:  # only the last call: the earlier ones warm the caches
        options += ["--launch-skip", str(WARM_CALLS - 1), "--launch-count", "1"]
    return profile_program([*program, str(calls)], metrics=(*METRICS, STALLS), options=options,
                           columns=lambda header: (*METRICS, *stall_columns(header)))


def stall_columns(csv_text: str) -> tuple[str, ...]:
    """The stall-reason metrics that the regex matched: columns of the CSV's header row (the
    other columns ncu adds are text, such as the device's name)."""
    header = next((line for line in csv_text.splitlines() if line.startswith('"ID",')), "")
    names = [name.strip('"') for name in header.split('","')]
    return tuple(n for n in names if n.startswith(STALL_PREFIX) and n.endswith(STALL_SUFFIX))


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

    bank = m("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
    conflicts = "—" if bank is None else f"{bank:,.0f}"

    return (f"| {label} | {side} | {'cold' if cold else 'warm'} | {m(DURATION) / 1e3:.1f} | "
            f"{c.kernel[:40]} | {c.grid} × {c.block} | {m('launch__registers_per_thread') or 0:.0f} | "
            f"{m('launch__waves_per_multiprocessor') or 0:.2f} | {pct('sm__maximum_warps_per_active_cycle_pct')} / "
            f"{pct('sm__warps_active.avg.pct_of_peak_sustained_active')} | "
            f"{pct('sm__throughput.avg.pct_of_peak_sustained_elapsed')} | "
            f"{pct('dram__throughput.avg.pct_of_peak_sustained_elapsed')} | {pct('lts__t_sector_hit_rate.pct')} | "
            f"{pct('sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active')} | "
            f"{pct('smsp__issue_active.avg.pct_of_peak_sustained_active')} | "
            f"{pct('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active')} | "
            f"{conflicts} | {top_stalls(c)} |")


HEADER = ("| preset | kernel of | L2 | µs | kernel | grid × block | regs | waves | occupancy theor. / achieved | "
          "SM busy | DRAM | L2 hit | FMA pipe | issue slots | tensor pipe (mma.sync) | shared-load bank conflicts | "
          "top stalls (cycles per issued instruction) |\n"
          "| --- | --- | --- | ---: | --- | --- " + "| ---: " * 10 + "| --- |")


def table(presets: list[str]) -> str:
    lines = [HEADER]
    for preset_id in presets:
        spec = get_preset(preset_id).spec
        for side in ("tvm", "pytorch"):
            for cold in (True, False):
                lines.append(row(preset_id, "TVM" if side == "tvm" else "PyTorch", cold,
                                 main_kernel(run_ncu(spec, side, cold))))
                print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*")
    parser.add_argument("--write", metavar="NAME", help="also write the table to bench/results/runs/NAME.md")
    args = parser.parse_args()
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

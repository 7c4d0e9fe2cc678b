"""Bank-conflict model vs Nsight Compute on a GPU: the 2017 blog's thread settings.

    python bench/bank_conflicts_gpu.py               # on the GPU machine, with ncu: writes docs/bank-conflicts-gpu.md
    python bench/bank_conflicts_gpu.py --model-only  # any machine: print the two models, no ncu

Depthwise conv2d [1,256,32,32] 3×3, blocking 32×32, threads (y, x) = (32, 1), (1, 32),
(8, 8), (4, 32), and (8, 16) with vthreads (1, 2). For each setting, three views of the
shared loads and stores of the whole launch:

- **TIR model**: ``analyze_banks`` — every load/store of the lowered TIR, scalar.
- **as compiled**: ``explorer.analysis.compiled`` — the instructions nvcc emits, with the
  unrolling plan chosen to match the static counts of nvcc's PTX (listed per setting).
- **ncu**: ``smsp__sass_inst_executed_op_shared_{ld,st}.sum`` (requests),
  ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum`` and
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum`` of one launch.

Model and counter agree within 2 % of the requests; disagreements are listed at the end.
The profiled kernel is compiled by nvcc (TVM_CUDA_COMPILE_MODE=nvcc), like the PTX.

The same ncu run gives the app's Counters panel for each setting (occupancy, DRAM and L2
traffic, duration beside the static models), in a table of its own.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

from explorer.analysis.accesses import kernel_accesses
from explorer.analysis.banks import ASSUMPTIONS, analyze_banks
from explorer.analysis.compiled import compiled_report
from explorer.analysis.ncu import (
    PANEL_METRICS,
    PTXAS_NOTE,
    compare,
    counter_rows,
    launch_of,
    ncu_path,
    profile,
    sass_shared_instructions,
    shared_instructions,
    static_model,
)
from explorer.build import Spec, build
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import DepthwiseConv2d

DOC = Path(__file__).resolve().parent.parent / "docs" / "bank-conflicts-gpu.md"
COMMAND = "python bench/bank_conflicts_gpu.py"
WORKLOAD = DepthwiseConv2d(batch=1, channels=256, height=32, width=32)
SETTINGS = (  # (threads y, threads x, vthreads y, vthreads x)
    (32, 1, 1, 1),
    (1, 32, 1, 1),
    (8, 8, 1, 1),
    (4, 32, 1, 1),
    (8, 16, 1, 2),
)
WHAT = ("requests", "wavefronts", "conflicts")


def spec_for(ty: int, tx: int, vy: int, vx: int) -> Spec:
    knobs = DepthwiseBlogKnobs(blocking_h=32, blocking_w=32, num_thread_y=ty, num_thread_x=tx,
                               num_vthread_y=vy, num_vthread_x=vx)
    return Spec("depthwise_blog", WORKLOAD, knobs)


def label(setting) -> str:
    ty, tx, vy, vx = setting
    return f"threads (y, x) = ({ty}, {tx}), vthreads ({vy}, {vx})"


def measure(setting, with_ncu: bool) -> dict:
    spec = spec_for(*setting)
    built = build(spec)
    scalar = analyze_banks(built)
    ptx = shared_instructions(built.cuda, built.target.arch)
    sass = sass_shared_instructions(built.cuda, built.target.arch)
    compiled, plans = compiled_report(kernel_accesses(built.device_mod), ptx)
    counters = profile(spec, metrics=PANEL_METRICS) if with_ncu else []
    panel = []
    for kernel, model in static_model(built).items():
        launch = launch_of(counters, kernel)
        panel += counter_rows(launch, model) if launch is not None else []
    return {"setting": setting, "arch": str(built.target.arch), "scalar": scalar, "compiled": compiled,
            "plans": plans, "ptx": ptx, "sass": sass, "counters": counters, "panel": panel,
            "vs_scalar": compare(scalar, counters), "vs_compiled": compare(compiled, counters)}


def _flag(agrees) -> str:
    return "" if agrees is None else ("agree" if agrees else "**disagree**")


def setting_section(result: dict) -> list[str]:
    lines = [f"### {label(result['setting'])}", ""]
    for kernel, counts in result["ptx"].items():
        plan, distance = result["plans"].get(kernel, ({}, None))
        described = ", ".join(f"{n or '(top level)'}: height ≤ {u.height}"
                              + (f", next ×{u.factor}" if u.factor > 1 else "")
                              for n, u in sorted(plan.items())) or "none"
        kinds = ", ".join(f"{k} × {n}" for k, n in sorted(counts.items())) or "none"
        match = "n/a" if distance is None else ("exact" if distance == 0 else f"off by {distance} instructions")
        lines.append(f"PTX shared instructions of `{kernel}` ({result['arch']}): {kinds}; unrolling plan: {described} "
                     f"(static counts {match}).")
        sass = result["sass"].get(kernel)
        if sass:
            lines += ["", f"SASS shared instructions (what ptxas emitted, what ncu counts): "
                          f"{', '.join(f'{k} × {n}' for k, n in sorted(sass.items()))}."]
    lines += ["", "| kernel | op | counter | TIR model | as compiled | ncu | TIR vs ncu | compiled vs ncu |",
              "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    for s, c in zip(result["vs_scalar"], result["vs_compiled"], strict=False):
        measured = "—" if s.measured is None else f"{s.measured:,.0f}"
        lines.append(f"| {s.kernel} | {s.op} | {s.what} | {s.model:,} | {c.model:,} | {measured} | "
                     f"{_flag(s.agrees)} | {_flag(c.agrees)} |")
    per_request = []
    for kernel in result["scalar"].kernels:
        for access in kernel.accesses:
            if access.op == "load" and access.requests:
                per_request.append(f"#{access.number} `{access.buffer}` {access.max_degree}-way")
    lines += ["", "TIR loads: " + ", ".join(per_request), ""]
    return lines


def document(results: list[dict], device: str, ncu_version: str) -> str:
    lines = [
        "# Shared-memory bank conflicts: model vs Nsight Compute",
        "",
        f"Produced by `{COMMAND}` on {device} ({ncu_version}), {datetime.date.today().isoformat()}.",
        "",
        "Depthwise conv2d [1,256,32,32] 3×3, blocking 32×32, the 2017 blog's thread settings "
        "(template `depthwise_blog`). Counts are for one launch (256 blocks). *TIR model*: every shared "
        "load/store of the lowered TIR as a scalar instruction; *as compiled*: the instructions nvcc emits "
        "(unrolled, repeated loads merged, invariant loads hoisted, consecutive loads merged into 64/128-bit "
        "ones), with the unrolling plan that reproduces the PTX's static counts; *ncu*: the hardware counters. "
        "Agreement: within 2 % of the requests.",
        "",
        "Model assumptions:",
        "",
        *[f"- {a}" for a in ASSUMPTIONS],
        "",
        "## Summary (loads, whole launch)",
        "",
        "| setting | TIR model conflicts | as compiled | ncu conflicts | TIR requests | as compiled | ncu requests |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        row = {(x.op, x.what): x for x in r["vs_scalar"]}
        comp = {(x.op, x.what): x for x in r["vs_compiled"]}
        conf, req = row["load", "conflicts"], row["load", "requests"]
        show = lambda m: "—" if m is None else f"{m:,.0f}"  # noqa: E731
        lines.append(f"| {label(r['setting'])} | {conf.model:,} | {comp['load', 'conflicts'].model:,} | "
                     f"{show(conf.measured)} | {req.model:,} | {comp['load', 'requests'].model:,} | "
                     f"{show(req.measured)} |")
    lines += ["", "## Per setting", ""]
    for r in results:
        lines += setting_section(r)
    lines += counters_section(results)
    disagreements = [f"- {label(r['setting'])}: {x.op} {x.what} — as compiled {x.model:,}, ncu {x.measured:,.0f}"
                     for r in results for x in r["vs_compiled"] if x.agrees is False]
    measured = any(x.measured is not None for r in results for x in r["vs_compiled"])
    lines += ["## Disagreements of the as-compiled model", ""]
    if not measured:
        lines.append("Not measured: run without --model-only on a GPU with ncu.")
    else:
        lines += disagreements or ["None: the as-compiled model agrees with every counter."]
    return "\n".join(lines) + "\n"


def counters_section(results: list[dict]) -> list[str]:
    """The app's Counters panel for each setting: every counter beside the static model."""
    lines = ["## Counters panel (one launch, beside the static models)", "",
             "What the Explorer's Counters tab shows for each setting: Nsight Compute's counters of one launch "
             "(`ncu --page raw`), the static model's prediction (as-compiled bank model, theoretical occupancy, "
             "compulsory bytes, the roofline's least time on the published figures) and the agreement.", ""]
    if not any(r["panel"] for r in results):
        return lines + ["Not measured: run without --model-only on a GPU with ncu.", ""]
    lines += ["| setting | counter | ncu | model | agreement |", "| --- | --- | ---: | ---: | --- |"]
    for r in results:
        for row in r["panel"]:
            verdict = f"**{row.verdict.lower()}**" if row.agrees is False else row.verdict
            lines.append(f"| {label(r['setting'])} | {row.name} | {row.text(row.measured)} | {row.text(row.model)} | "
                         f"{verdict} |")
    return lines + ["", "### Why the as-compiled model misses the load conflicts of (y, x) = (32, 1)", "",
                    PTXAS_NOTE, ""]


def device_name() -> str:
    import tvm

    device = tvm.cuda(0)
    return device.device_name if device.exist else "no GPU"


def ncu_version() -> str:
    path = ncu_path()
    if path is None:
        return "ncu not installed"
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return out[-1] if out else "ncu"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-only", action="store_true", help="no ncu; print instead of writing the document")
    args = parser.parse_args(argv)
    results = [measure(s, with_ncu=not args.model_only) for s in SETTINGS]
    text = document(results, device_name(), ncu_version())
    if args.model_only:
        print(text)
        return 0
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
    print(text)
    print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Hopper GEMM template (matmul_hopper) against torch.matmul (cuBLAS) on this GPU.

    python bench/hopper_gemm.py [--size 4096] [--only NAME ...] [--no-write]

First the tensor cores' peak per input type (a wgmma chain: the roof). Then for each knob
setting below, at size³ in fp16 or bf16: builds the kernel, checks it against
PyTorch's float32 product of the same inputs (TF32 off), then times it (TVM's time_evaluator,
median of 5 repeats of 20 launches) and torch.matmul in the input type (CUDA events, the same
count). Each setting runs in its own process with a time limit, so one that fails to build,
is wrong or hangs is reported and the rest still run. Prints a table and writes
bench/results/hopper-gemm-<gpu>.json. Needs a Hopper GPU (sm_90a) and PyTorch.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from result_files import RESULTS

ROOT = Path(__file__).resolve().parents[1]
SETTING_SECONDS = 40  # import, build, NVRTC, check and time one setting (about 10 s); more means a hung kernel
TOTAL_SECONDS = 130  # no setting starts after this: the whole run stays within a short GPU session
# name -> (dtype, knobs changed from the template's defaults)
SETTINGS = {
    "default-fp16": ("float16", {}),
    "default-bf16": ("bfloat16", {}),
    "persistent-fp16": ("float16", {"persistent": True}),
    "no-warp-specialization-fp16": ("float16", {"warp_specialize": False}),
    "one-consumer-128x128-fp16": ("float16", {"consumers": 1, "block_n": 128, "stages": 5}),
    # Clusters of two blocks sharing B's tile through TMA multicast, alone and with persistent tiles.
    "cluster-fp16": ("float16", {"cluster": 2}),
    "cluster-persistent-fp16": ("float16", {"cluster": 2, "persistent": True}),
}


# The tensor cores' peak per input type (a wgmma chain, explorer/measure/tensor_roof.py): the roof.
PEAKS = {"tensor-core-peak-fp16": "float16", "tensor-core-peak-bf16": "bfloat16"}


def run_peak(name: str) -> dict:
    from explorer.measure.ceilings import CEILING_SETTINGS
    from explorer.measure.tensor_roof import measure_tensor_tflops

    return {"setting": name, "dtype": PEAKS[name], "peak_tflops": measure_tensor_tflops(PEAKS[name], CEILING_SETTINGS)}


def run_one(name: str, size: int) -> dict:
    """Build, check and time one setting in this process; return its row."""
    if name in PEAKS:
        return run_peak(name)
    import numpy as np
    import torch
    import tvm

    from explorer.build import Spec, build
    from explorer.schedules.matmul_hopper import MatmulHopperKnobs
    from explorer.workloads import Matmul

    dtype, knobs = SETTINGS[name]
    workload = Matmul(m=size, n=size, k=size, dtype=dtype)
    built = build(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch_dtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand((size, size), device="cuda", generator=gen) * 2 - 1).to(torch_dtype)
    b = (torch.rand((size, size), device="cuda", generator=gen) * 2 - 1).to(torch_dtype)
    device = tvm.cuda(0)
    inputs = [tvm.runtime.from_dlpack(t) for t in (a, b)]
    out = torch.empty((size, size), device="cuda", dtype=torch.float32)
    output = tvm.runtime.from_dlpack(out)
    kernel = tvm.runtime.Executable(built.runtime_module).jit()
    kernel["main"](*inputs, output)
    torch.cuda.synchronize()
    expected = a.float() @ b.float()
    error = (out - expected).abs().max().item()
    tolerance = 4 * np.finfo(np.float32).eps * workload.reduction_length() * max(1.0, expected.abs().max().item())
    row = {"setting": name, "dtype": dtype, "knobs": knobs, "size": size, "max_error": error,
           "correct": bool(error <= tolerance)}
    if not row["correct"]:
        return row
    seconds = kernel.time_evaluator("main", device, number=20, repeat=5)(*inputs, output).median
    row["us"] = seconds * 1e6
    row["torch_us"] = torch_time(lambda: torch.matmul(a, b)) * 1e6
    row["tflops"] = workload.flops / seconds / 1e12
    row["torch_tflops"] = workload.flops / row["torch_us"] * 1e-6
    row["vs_torch"] = row["torch_us"] / row["us"]
    return row


def torch_time(call, number: int = 20, repeat: int = 5) -> float:
    import torch

    for _ in range(3):
        call()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / number)
    return sorted(times)[len(times) // 2]


def run_isolated(name: str, size: int) -> dict:
    """``run_one`` in a child process, so that a crash or a hang costs only this row."""
    try:
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--size", str(size)], capture_output=True,
                              text=True, timeout=SETTING_SECONDS, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"setting": name, "error": f"no result in {SETTING_SECONDS} s (a hung kernel?)"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"setting": name, "error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def table(rows: list[dict]) -> str:
    out = [f"{'setting':30} {'dtype':9} {'µs':>9} {'TFLOP/s':>8} {'torch µs':>9} {'torch TF/s':>10} {'vs torch':>8}"]
    for r in rows:
        if "error" in r:
            out.append(f"{r['setting']:30} FAILED: {r['error']}")
        elif "peak_tflops" in r:
            out.append(f"{r['setting']:30} {r['dtype']:9} {'':9} {r['peak_tflops']:8.1f}")
        elif not r["correct"]:
            out.append(f"{r['setting']:30} {r['dtype']:9} WRONG: max error {r['max_error']:.3g}")
        else:
            out.append(f"{r['setting']:30} {r['dtype']:9} {r['us']:9.1f} {r['tflops']:8.1f} {r['torch_us']:9.1f} "
                       f"{r['torch_tflops']:10.1f} {r['vs_torch']:7.0%}")
    return "\n".join(out)


def merged_rows(path: Path, rows: list[dict]) -> list[dict]:
    """The rows kept in ``path`` with this run's in place of those of the same setting, so that runs
    with ``--only`` add up to the whole table; each new row carries its date."""
    today = datetime.date.today().isoformat()
    kept = json.loads(path.read_text()) if path.exists() else {"rows": []}
    by_setting = {r["setting"]: {"date": kept.get("date"), **r} for r in kept["rows"]}
    by_setting.update({r["setting"]: {**r, "date": today} for r in rows})
    order = [*PEAKS, *SETTINGS]
    return sorted(by_setting.values(), key=lambda r: order.index(r["setting"]) if r["setting"] in order else len(order))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--only", nargs="*", choices=sorted([*SETTINGS, *PEAKS]))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--one", choices=sorted([*SETTINGS, *PEAKS]), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.size)))
        return 0
    rows = []
    start = time.monotonic()
    for name in args.only or [*PEAKS, *SETTINGS]:
        if time.monotonic() - start > TOTAL_SECONDS:
            rows.append({"setting": name, "error": f"not run: the run passed {TOTAL_SECONDS} s"})
        else:
            rows.append(run_isolated(name, args.size))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if not args.no_write:
        import tvm

        gpu = tvm.cuda(0).device_name.replace(" ", "-") if tvm.cuda(0).exist else "no-gpu"
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"hopper-gemm-{gpu}.json"
        path.write_text(json.dumps({"date": datetime.date.today().isoformat(), "gpu": gpu,
                                    "rows": merged_rows(path, rows)}, indent=1))
        print(f"wrote {path}")
    return 0 if all(r.get("correct") or "peak_tflops" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

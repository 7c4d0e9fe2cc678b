"""Nsight Compute's shared-memory counters for a build's kernels, beside the bank model.

``profile(spec)`` runs ``ncu --csv --metrics …`` on a child Python process that builds
the spec for the local GPU and launches it once (``python -m explorer.analysis.ncu
SPEC_JSON``); ``parse_ncu_csv`` reads ncu's CSV (one row per kernel launch and metric,
after any lines the program printed); ``compare`` puts the counters next to
:func:`explorer.analysis.banks.analyze_banks` and flags disagreement.
``shared_instructions`` lists the shared loads/stores of the compiled PTX by width, to
explain a disagreement caused by the CUDA compiler vectorising scalar accesses.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import ExplorerError

METRICS = {
    ("load", "requests"): "smsp__sass_inst_executed_op_shared_ld.sum",
    ("store", "requests"): "smsp__sass_inst_executed_op_shared_st.sum",
    ("load", "wavefronts"): "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    ("store", "wavefronts"): "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    ("load", "conflicts"): "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    ("store", "conflicts"): "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
}
# Model and counter agree when they differ by at most this fraction of the requests
# (or of the larger value when there are none).
TOLERANCE = 0.02
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class KernelCounters:
    """One profiled kernel launch."""

    launch: int  # ncu's "ID"
    kernel: str
    block: str
    grid: str
    metrics: dict  # metric name -> value (None for "n/a")

    def get(self, op: str, what: str) -> float | None:
        return self.metrics.get(METRICS[(op, what)])


def parse_ncu_csv(text: str) -> list[KernelCounters]:
    """Parse ``ncu --csv --metrics …`` output: a header row starting with "ID", then one
    row per (launch, metric); the program's own output and ``==PROF==`` lines may come
    before or between. Numbers may carry thousands separators."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ExplorerError("Nsight Compute printed no CSV table (no line starting with \"ID\").")
    rows = csv.DictReader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"'))))
    missing = {"ID", "Kernel Name", "Metric Name", "Metric Value"} - set(rows.fieldnames or ())
    if missing:
        raise ExplorerError(f"Nsight Compute's CSV lacks the column(s) {', '.join(sorted(missing))}.")
    launches: dict[int, KernelCounters] = {}
    for row in rows:
        launch = int(row["ID"])
        if launch not in launches:
            launches[launch] = KernelCounters(launch, row["Kernel Name"], row.get("Block Size", ""),
                                              row.get("Grid Size", ""), {})
        launches[launch].metrics[row["Metric Name"]] = _number(row["Metric Value"])
    return [launches[k] for k in sorted(launches)]


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a"):
        return None
    try:
        return float(text)
    except ValueError:
        raise ExplorerError(f"Nsight Compute reported '{text}' where a number was expected.") from None


# -- running ncu -----------------------------------------------------------------------


def ncu_path() -> str | None:
    return shutil.which("ncu") or next(
        (p for p in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu") if os.path.exists(p)), None
    )


def spec_to_json(spec) -> str:
    return json.dumps({"template": spec.template, "workload_kind": spec.workload.kind,
                       "workload": spec.workload.to_dict(), "knobs": spec.knobs.to_dict()})


def spec_from_json(text: str):
    from ..build import Spec
    from ..schedules import get_template
    from ..workloads import workload_from_mapping

    data = json.loads(text)
    template = get_template(data["template"])
    return Spec(template.name, workload_from_mapping(data["workload_kind"], data["workload"]),
                template.knobs.from_mapping(data["knobs"]))


def profile(spec, timeout_s: int = 600) -> list[KernelCounters]:
    """Profile one launch of every kernel of ``spec`` on the local GPU with ncu."""
    ncu = ncu_path()
    if ncu is None:
        raise ExplorerError("Nsight Compute (ncu) is not installed on this machine.")
    command = [ncu, "--csv", "--metrics", ",".join(METRICS.values()), "--target-processes", "all",
               sys.executable, "-m", "explorer.analysis.ncu", spec_to_json(spec)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
           # Compile with nvcc, like shared_instructions' PTX, so the profiled code is the code modelled.
           "TVM_CUDA_COMPILE_MODE": "nvcc"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0 or '"ID",' not in proc.stdout:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise ExplorerError(f"ncu failed (exit {proc.returncode}): {detail[-1] if detail else 'no output'}")
    return parse_ncu_csv(proc.stdout)


def _launch_once(spec_json: str) -> None:
    """The profiled program: build for the local GPU and run each kernel once."""
    import tvm

    from ..build import build

    built = build(spec_from_json(spec_json))
    workload = built.spec.workload
    device = tvm.cuda(0)
    inputs = [tvm.runtime.tensor(x, device) for x in workload.random_inputs(0)]
    output = tvm.runtime.empty(workload.output_shape(), "float32", device)
    tvm.runtime.Executable(built.runtime_module).jit()["main"](*inputs, output)
    device.sync()


# -- model vs counters -----------------------------------------------------------------


@dataclass(frozen=True)
class ComparisonRow:
    kernel: str
    op: str  # load | store
    what: str  # requests | wavefronts | conflicts
    model: int
    measured: float | None
    agrees: bool | None  # None when the counter is missing


def compare(report, counters: list[KernelCounters]) -> list[ComparisonRow]:
    """Model totals of each kernel beside the counters of its (first) profiled launch."""
    rows = []
    for kernel in report.kernels:
        launch = next((c for c in counters if _base_name(c.kernel) == kernel.kernel), None)
        for op, totals in (("load", kernel.loads), ("store", kernel.stores)):
            scale = max(totals.requests, 1)
            for what in ("requests", "wavefronts", "conflicts"):
                model = getattr(totals, what)
                measured = launch.get(op, what) if launch is not None else None
                agrees = None if measured is None else abs(model - measured) <= TOLERANCE * max(scale, measured)
                rows.append(ComparisonRow(kernel.kernel, op, what, model, measured, agrees))
    return rows


def _base_name(name: str) -> str:
    """``main_kernel(float *, …)`` or ``void main_kernel<…>(…)`` → ``main_kernel``."""
    name = name.split("(")[0].split("<")[0].strip()
    return name.split()[-1] if name else name


def format_comparison(rows: list[ComparisonRow]) -> str:
    """A Markdown table."""
    lines = ["| kernel | op | counter | model | ncu | |", "| --- | --- | --- | ---: | ---: | --- |"]
    for r in rows:
        measured = "n/a" if r.measured is None else f"{r.measured:,.0f}"
        flag = "" if r.agrees is None else ("agree" if r.agrees else "**disagree**")
        lines.append(f"| {r.kernel} | {r.op} | {r.what} | {r.model:,} | {measured} | {flag} |")
    return "\n".join(lines)


# -- what the compiler emitted ---------------------------------------------------------

_PTX_SHARED = re.compile(r"\b(ld|st)\.shared(?:\.(v2|v4))?\.(\w+)")


def shared_instructions(cuda_source: str, arch: str) -> dict:
    """Static shared loads/stores per kernel in the PTX nvcc makes from ``cuda_source``:
    {kernel: {"ld.v4.f32": 2, "ld.f32": 12, …}}. Vector kinds (.v2/.v4) where the TIR has
    scalar accesses mean the compiler merged them (fewer requests, different conflicts)."""
    from ..build import nvcc_path

    nvcc = nvcc_path()
    if not cuda_source or nvcc is None:
        return {}
    return {kernel: dict(counts) for kernel, counts in _ptx_counts(nvcc, cuda_source, arch)}


_PTX_ENTRY = re.compile(r"\.entry\s+(\w+)")


@functools.lru_cache(maxsize=64)
def _ptx_counts(nvcc: str, source: str, arch: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="explorer-ptx-") as tmp:
        src, ptx = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx")
        Path(src).write_text(source)
        proc = subprocess.run([nvcc, "--ptx", f"-arch={arch}", "-O3", "-o", ptx, src],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ExplorerError(f"nvcc could not compile the generated CUDA to PTX: {last[0]}")
        text = Path(ptx).read_text()
    out = []
    pieces = _PTX_ENTRY.split(text)  # [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(pieces[1::2], pieces[2::2]):
        counts = Counter(f"{op}.{vec}.{ty}" if vec else f"{op}.{ty}" for op, vec, ty in _PTX_SHARED.findall(body))
        out.append((name, tuple(sorted(counts.items()))))
    return tuple(out)


if __name__ == "__main__":
    _launch_once(sys.argv[1])

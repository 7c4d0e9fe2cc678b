"""Nsight Compute's shared-memory counters for a build's kernels, beside the bank model.

``profile(spec)`` runs ``ncu --csv --metrics …`` on a child Python process that builds
the spec for the local GPU and calls it once or more (``python -m explorer.analysis.ncu
SPEC_JSON [CALLS]``; ``profile_program`` profiles any other program, e.g. PyTorch's op);
``parse_ncu_csv`` reads ncu's CSV (one row per kernel launch and metric,
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

from ..build import Spec, build, runtime_module_of
from ..cuda_compile import nvcc_path
from ..cuda_env import without_source_only
from ..errors import ExplorerError, summary_line
from ..schedules import get_template, workload_from_mapping
from .accesses import kernel_accesses
from .banks import analyze_banks
from .compiled import compiled_report
from .resources import analyze_resources
from .roofline import bound_us, compute_types, published_for
from .sass import compile_binary

METRICS = {
    ("load", "requests"): "smsp__sass_inst_executed_op_shared_ld.sum",
    ("store", "requests"): "smsp__sass_inst_executed_op_shared_st.sum",
    ("load", "wavefronts"): "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    ("store", "wavefronts"): "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    ("load", "conflicts"): "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    ("store", "conflicts"): "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
}
# The Counters panel's metrics (one launch of the current setting), beside the static models.
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_THROUGHPUT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_BYTES = "dram__bytes.sum"
L2_THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
L2_BYTES = "lts__t_bytes.sum"
DURATION = "gpu__time_duration.sum"
PANEL_METRICS = (*(METRICS[op, what] for op in ("load", "store") for what in ("requests", "wavefronts", "conflicts")),
                 OCCUPANCY, DRAM_THROUGHPUT, DRAM_BYTES, L2_THROUGHPUT, L2_BYTES, DURATION)
# ncu's units (``--print-units base`` asks for these; others are scaled to them): ns, bytes.
UNIT_SCALE = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6,
              "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
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


def parse_ncu_csv(text: str, metrics: tuple = ()) -> list[KernelCounters]:
    """Parse ``ncu --csv`` output of either page: ``--page details`` (the default: a
    header row starting with "ID", then one row per (launch, metric)) or ``--page raw``
    (one row per launch, a column per metric, a row of units under the header). The
    program's own output and ``==PROF==`` lines may come before or between. Numbers may
    carry thousands separators; times are given in ns and sizes in bytes. ``metrics``, when
    given, are the raw page's columns to read (ncu adds others, some of them text such as
    the device's name)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ExplorerError("Nsight Compute printed no CSV table (no line starting with \"ID\").")
    rows = csv.DictReader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"'))))
    fields = set(rows.fieldnames or ())
    if "Metric Name" not in fields and "Metric Value" not in fields:
        return _parse_raw(rows, metrics)
    missing = {"ID", "Kernel Name", "Metric Name", "Metric Value"} - fields
    if missing:
        raise ExplorerError(f"Nsight Compute's CSV lacks the column(s) {', '.join(sorted(missing))}.")
    launches: dict[int, KernelCounters] = {}
    for row in rows:
        launch = int(row["ID"])
        if launch not in launches:
            launches[launch] = KernelCounters(launch, row["Kernel Name"], row.get("Block Size", ""),
                                              row.get("Grid Size", ""), {})
        launches[launch].metrics[row["Metric Name"]] = _number(row["Metric Value"], row.get("Metric Unit", ""))
    return [launches[k] for k in sorted(launches)]


# The columns of ``--page raw`` that describe the launch rather than hold a metric.
_RAW_INFO = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
             "Block Size", "Grid Size", "Device", "CC"}


def _parse_raw(rows: csv.DictReader, wanted: tuple = ()) -> list[KernelCounters]:
    if "Kernel Name" not in (rows.fieldnames or ()):
        raise ExplorerError("Nsight Compute's CSV lacks the column Kernel Name.")
    metrics = [f for f in rows.fieldnames if f not in _RAW_INFO and "__" in f and (not wanted or f in wanted)]
    if not metrics:
        raise ExplorerError("Nsight Compute's CSV has no metric: neither Metric Name/Metric Value columns "
                            "(--page details) nor a column per metric (--page raw).")
    units: dict = {}
    launches = []
    for row in rows:
        if not row["ID"].strip():  # the units row under the header
            units = row
            continue
        launches.append(KernelCounters(int(row["ID"]), row["Kernel Name"], row.get("Block Size", ""),
                                       row.get("Grid Size", ""),
                                       {m: _number(row[m] or "", units.get(m) or "") for m in metrics}))
    return launches


def _number(text: str, unit: str = "") -> float | None:
    text = text.strip().replace(",", "")
    # ncu leaves a counter it did not collect empty, or marks it n/a or No-CC.
    if text.lower() in ("", "n/a", "no-cc"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ExplorerError(f"Nsight Compute reported '{text}' where a number was expected.") from None
    return value * UNIT_SCALE.get(unit.split("/")[0].strip(), 1)


# -- running ncu -----------------------------------------------------------------------


HOW_TO_GET_NCU = (
    "Nsight Compute comes with the CUDA toolkit (/usr/local/cuda/bin/ncu; on Debian/Ubuntu with NVIDIA's CUDA "
    "repository: apt-get install nsight-compute), needs a local NVIDIA GPU, and reads the GPU's performance counters "
    "only as root or when the driver allows it (NVreg_RestrictProfilingToAdminUsers=0).")


def ncu_path() -> str | None:
    return shutil.which("ncu") or next(
        (p for p in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu") if os.path.exists(p)), None
    )


def spec_to_json(spec) -> str:
    return json.dumps({"template": spec.template, "workload_kind": spec.workload.kind,
                       "workload": spec.workload.to_dict(), "knobs": spec.knobs.to_dict()})


def spec_from_json(text: str):
    data = json.loads(text)
    template = get_template(data["template"])
    return Spec(template.name, workload_from_mapping(data["workload_kind"], data["workload"]),
                template.knobs.from_mapping(data["knobs"]))


def ncu_options(metrics: tuple, undisturbed: bool = False) -> list[str]:
    """ncu's options for one CSV row per kernel launch with ``metrics`` in base units.
    ``undisturbed`` leaves the clocks and caches as they are (ncu locks the clocks at base
    and flushes the caches before each launch by default): for times comparable with
    back-to-back launches."""
    options = ["--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
               "--target-processes", "all"]
    return options + (["--clock-control", "none", "--cache-control", "none"] if undisturbed else [])


def profile(spec, timeout_s: int = 600, metrics: tuple = tuple(METRICS.values()), *, calls: int = 1,
            undisturbed: bool = False, nvcc: bool = True) -> list[KernelCounters]:
    """Profile ``calls`` calls of ``spec``'s ``main`` (every kernel launch) on the local GPU
    with ncu. ``nvcc`` compiles the kernel with nvcc, like :func:`shared_instructions`' PTX,
    so that the profiled code is the code modelled; otherwise with TVM's default compiler,
    as the measuring worker does."""
    return profile_program(["-m", "explorer.analysis.ncu", spec_to_json(spec), str(calls)], timeout_s, metrics,
                           undisturbed=undisturbed, nvcc=nvcc)


def profile_program(program: list[str], timeout_s: int = 600, metrics: tuple = tuple(METRICS.values()), *,
                    undisturbed: bool = False, nvcc: bool = False, options: tuple = (),
                    columns=None) -> list[KernelCounters]:
    """Profile every kernel launch of ``python *program`` (run from the repository root) with ncu:
    a TVM kernel (:func:`profile`) or PyTorch's op (``python -m explorer.measure.baseline``).
    ``options``: more of ncu's (clock and cache control, which launches); ``columns(csv_text)``:
    the CSV's columns to read, where ``metrics`` holds a ``regex:`` that names several."""
    ncu = ncu_path()
    if ncu is None:
        raise ExplorerError(f"Nsight Compute (ncu) is not installed on this machine. {HOW_TO_GET_NCU}")
    command = [ncu, *ncu_options(metrics, undisturbed), *options, sys.executable, *program]
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**without_source_only(os.environ), "PYTHONPATH": python_path}  # the app's process is source-only
    if nvcc:
        env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0 or '"ID",' not in proc.stdout:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise ExplorerError(f"ncu failed (exit {proc.returncode}): {detail[-1] if detail else 'no output'}")
    return parse_ncu_csv(proc.stdout, columns(proc.stdout) if columns else metrics)


def call_durations_us(counters: list[KernelCounters], kernels_per_call: int) -> list[float]:
    """The kernel time of each call of a program's ``main`` in µs: the durations
    (gpu__time_duration.sum) of its ``kernels_per_call`` launches in a row, summed."""
    durations = [c.metrics.get(DURATION) for c in counters]
    if not durations or None in durations or len(durations) % kernels_per_call:
        raise ExplorerError(f"Nsight Compute timed {sum(d is not None for d in durations)} of {len(durations)} "
                            f"launches, not whole calls of {kernels_per_call} kernel(s).")
    return [sum(durations[i:i + kernels_per_call]) / 1e3 for i in range(0, len(durations), kernels_per_call)]


def durations_after_warm_up_us(counters: list[KernelCounters], calls: int, warm_up: int) -> list[float]:
    """Per-call kernel µs of a program that made ``calls`` calls of the same launches, the
    first ``warm_up`` left out; the launches per call are what the calls made between them."""
    if not counters or len(counters) % calls:
        raise ExplorerError(f"Nsight Compute saw {len(counters)} launches, not the same number for each of "
                            f"{calls} calls.")
    return call_durations_us(counters, len(counters) // calls)[warm_up:]


def _launch(spec_json: str, calls: int) -> None:
    """The profiled program: build for the local GPU and call ``main`` ``calls`` times."""
    import tvm


    built = build(spec_from_json(spec_json))
    workload = built.spec.workload
    device = tvm.cuda(0)
    inputs = [tvm.runtime.tensor(x, device) for x in workload.random_inputs(0)]
    output = tvm.runtime.empty(workload.output_shape(), workload.output_dtype(), device)
    main = tvm.runtime.Executable(runtime_module_of(built)).jit()["main"]
    for _ in range(calls):
        main(*inputs, output)
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
        launch = launch_of(counters, kernel.kernel)
        for op, totals in (("load", kernel.loads), ("store", kernel.stores)):
            scale = max(totals.requests, 1)
            for what in ("requests", "wavefronts", "conflicts"):
                model = getattr(totals, what)
                measured = launch.get(op, what) if launch is not None else None
                agrees = None if measured is None else abs(model - measured) <= TOLERANCE * max(scale, measured)
                rows.append(ComparisonRow(kernel.kernel, op, what, model, measured, agrees))
    return rows


def launch_of(counters: list[KernelCounters], kernel: str) -> KernelCounters | None:
    """The first profiled launch of ``kernel``."""
    return next((c for c in counters if _base_name(c.kernel) == kernel), None)


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


# -- the Counters panel: every metric beside its static prediction ----------------------

EQUAL, BOUND, INFO = "equal", "bound", "info"  # how a row's agreement is judged


@dataclass(frozen=True)
class CounterRow:
    """One counter of one launch beside the static model: ``kind`` says how they are
    compared (equal within TOLERANCE of the requests, or the model a bound)."""

    name: str
    metric: str
    measured: float | None
    model: float | None
    unit: str
    kind: str
    agrees: bool | None  # None: nothing to compare
    note: str = ""

    def text(self, value: float | None) -> str:
        """``value`` (the measured or the model's) in this row's unit, for a table."""
        if value is None:
            return "n/a"
        if self.unit == "ns":
            return f"{value / 1e3:,.2f} µs"
        if self.unit == "%":
            return f"{value:.1f}%"
        return f"{value:,.0f}" + (" B" if self.unit == "B" else "")

    @property
    def verdict(self) -> str:
        """"agree"/"DISAGREE" for equal counts, "consistent"/"INCONSISTENT" for a bound, "" otherwise."""
        if self.agrees is None:
            return ""
        words = {EQUAL: ("agree", "DISAGREE"), BOUND: ("consistent", "INCONSISTENT")}[self.kind]
        return words[0 if self.agrees else 1]


@dataclass(frozen=True)
class StaticModel:
    """What the static analyses predict for one kernel launch."""

    banks: object  # analysis.banks.KernelBanks (as compiled when nvcc's PTX was there)
    bank_model: str  # which bank model: "as compiled" or "TIR"
    occupancy_pct: float | None  # theoretical occupancy from threads, shared memory, registers
    compulsory_bytes: int
    bound_us: float | None  # the roofline's least time for the workload
    bound_source: str = ""


# Why the bank model, which counts the PTX's shared instructions, can miss conflicts: found
# for the blog's threads (y, x) = (32, 1) in the SASS of the kernel (nvdisasm).
PTXAS_NOTE = (
    "The bank model counts the shared instructions of nvcc's PTX; ptxas, which turns the PTX into the GPU's SASS, "
    "can unroll further and pair loads anew. For the blog's threads (y, x) = (32, 1) the PTX has only 64-bit loads "
    "(ld.shared.v2, 8-byte aligned, conflict-free in half-warp phases), so the model predicts no load conflict. "
    "The SASS peels the first two outputs, unrolls the other 30 by ten and reads the words that start at odd "
    "addresses with 32-bit LDS: 15 per unrolled iteration, 45 per warp. Lane y reads word 34·y + c, so lanes y and "
    "y + 16 (544 words apart, a multiple of 32) hit the same bank: each of those loads is a 2-way conflict, "
    "45 × 256 blocks = 11,520 conflicts, as Nsight Compute counts.")


def static_model(built, ceilings=None) -> dict:
    """The static predictions for each kernel of ``built`` ({kernel: StaticModel}): the
    as-compiled bank model where nvcc gives the PTX (the TIR model otherwise), the
    theoretical occupancy (registers from nvcc when it is there), and the roofline bound
    on ``ceilings`` (the target's published figures when None)."""
    ptx = shared_instructions(built.cuda, built.target.arch)
    if ptx:
        banks, bank_model = compiled_report(kernel_accesses(built.device_mod), ptx)[0], "as-compiled"
    else:
        banks, bank_model = analyze_banks(built), "TIR"
    occupancy = {k.kernel: 100 * k.occupancy.occupancy for k in analyze_resources(built, compile_binary(built)).kernels}
    workload = built.spec.workload
    try:
        ceilings = ceilings or published_for(built.target)
        bound = bound_us(ceilings, workload.flops, workload.compulsory_bytes, compute_types(built.spec))
        source = ceilings.source
    except ExplorerError:  # no figures for this target, or no compute roof for these inputs
        bound, source = None, "no figures for this target and these inputs"
    return {k.kernel: StaticModel(k, bank_model, occupancy.get(k.kernel), workload.compulsory_bytes, bound, source)
            for k in banks.kernels}


def counter_rows(launch: KernelCounters, model: StaticModel) -> list[CounterRow]:
    """The Counters panel's rows for one profiled launch."""
    rows = []
    for op, totals in (("load", model.banks.loads), ("store", model.banks.stores)):
        scale = max(totals.requests, 1)
        for what in ("conflicts", "wavefronts"):
            measured, predicted = launch.get(op, what), getattr(totals, what)
            agrees = None if measured is None else abs(predicted - measured) <= TOLERANCE * max(scale, measured)
            rows.append(CounterRow(f"shared {op} bank {what}", METRICS[op, what], measured, predicted, "", EQUAL,
                                   agrees, f"{model.bank_model} bank model"))
    occupancy = launch.metrics.get(OCCUPANCY)
    rows.append(CounterRow(
        "achieved occupancy", OCCUPANCY, occupancy, model.occupancy_pct, "%", BOUND,
        None if occupancy is None or model.occupancy_pct is None else occupancy <= model.occupancy_pct + 2,
        "model: theoretical occupancy, an upper bound (a small grid or uneven blocks leave warps idle)"))
    dram = launch.metrics.get(DRAM_BYTES)
    rows.append(CounterRow("DRAM bytes", DRAM_BYTES, dram, model.compulsory_bytes, "B", BOUND,
                           None if dram is None else dram >= 0.5 * model.compulsory_bytes,
                           "model: compulsory bytes; ncu flushes the caches first, and the output can stay in "
                           "L2 (write-back), so about the input bytes up to the compulsory bytes"))
    rows.append(CounterRow("DRAM throughput", DRAM_THROUGHPUT, launch.metrics.get(DRAM_THROUGHPUT), None, "%", INFO,
                           None, "of the peak, over the launch"))
    l2 = launch.metrics.get(L2_BYTES)
    rows.append(CounterRow("L2 bytes", L2_BYTES, l2, model.compulsory_bytes, "B", BOUND,
                           None if l2 is None else l2 >= 0.9 * model.compulsory_bytes,
                           "model: compulsory bytes, a lower bound (halos and re-reads add to it)"))
    rows.append(CounterRow("L2 throughput", L2_THROUGHPUT, launch.metrics.get(L2_THROUGHPUT), None, "%", INFO,
                           None, "of the peak, over the launch"))
    duration = launch.metrics.get(DURATION)
    bound_ns = None if model.bound_us is None else model.bound_us * 1e3
    rows.append(CounterRow("kernel duration", DURATION, duration, bound_ns, "ns", BOUND,
                           None if duration is None or bound_ns is None else duration >= bound_ns,
                           f"model: the roofline's least time ({model.bound_source})"))
    return rows



def counters(built, ceilings=None) -> dict[str, list[CounterRow] | None]:
    """One launch of ``built`` profiled on this machine's GPU, each counter beside the static
    model's prediction (on ``ceilings``, the target's published figures when None): {kernel:
    its rows, None where ncu profiled no launch of it}."""
    launches = profile(built.spec, metrics=PANEL_METRICS)
    return {kernel: counter_rows(launch, model) if (launch := launch_of(launches, kernel)) is not None else None
            for kernel, model in static_model(built, ceilings).items()}


def format_counters(counters_of: dict[str, list[CounterRow] | None]) -> str:
    """The Counters panel's tables as text: per kernel, each counter, ncu's value, the model's and
    whether they agree."""
    lines = []
    for kernel, rows in counters_of.items():
        if rows is None:
            lines += [f"Nsight Compute profiled no launch of {kernel}.", ""]
            continue
        width = max(len(r.name) for r in rows)
        lines.append(f"kernel {kernel}: counter, Nsight Compute, model, agreement")
        lines += [f"  {r.name:<{width}}  {r.text(r.measured):>14}  {r.text(r.model):>14}  {r.verdict}".rstrip()
                  for r in rows]
        lines.append("")
    return "\n".join(lines).rstrip()


# -- what the compiler emitted ---------------------------------------------------------

_PTX_SHARED = re.compile(r"\b(ld|st)\.shared(?:\.(v2|v4))?\.(\w+)")


def shared_instructions(cuda_source: str, arch: str) -> dict:
    """Static shared loads/stores per kernel in the PTX nvcc makes from ``cuda_source``:
    {kernel: {"ld.v4.f32": 2, "ld.f32": 12, …}}. Vector kinds (.v2/.v4) where the TIR has
    scalar accesses mean the compiler merged them (fewer requests, different conflicts)."""
    nvcc = nvcc_path()
    if not cuda_source or nvcc is None:
        return {}
    return {kernel: dict(counts) for kernel, counts in _ptx_counts(nvcc, cuda_source, arch)}


_PTX_ENTRY = re.compile(r"\.entry\s+(\w+)")


def _nvcc_output(nvcc: str, source: str, arch: str, kind: str, tmp: str) -> str:
    """Compile ``source`` with nvcc to ``kind`` ("ptx" or "cubin") in ``tmp``; the path."""
    src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, f"kernel.{kind}")
    Path(src).write_text(source)
    proc = subprocess.run([nvcc, f"--{kind}", f"-arch={arch}", "-O3", "-o", out, src],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ExplorerError(f"nvcc could not compile the generated CUDA to {kind.upper()}: "
                            f"{summary_line(proc.stderr)}")
    return out


@functools.lru_cache(maxsize=64)
def _ptx_counts(nvcc: str, source: str, arch: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="explorer-ptx-") as tmp:
        text = Path(_nvcc_output(nvcc, source, arch, "ptx", tmp)).read_text()
    out = []
    pieces = _PTX_ENTRY.split(text)  # [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(pieces[1::2], pieces[2::2], strict=False):
        counts = Counter(f"{op}.{vec}.{ty}" if vec else f"{op}.{ty}" for op, vec, ty in _PTX_SHARED.findall(body))
        out.append((name, tuple(sorted(counts.items()))))
    return tuple(out)



# -- what ptxas emitted (SASS) -----------------------------------------------------------

_SASS_SHARED = re.compile(r"\b(LDS|STS)((?:\.[A-Z0-9]+)*)\b")
# A function starts at ".text.NAME:" (nvdisasm -c) or "Function : NAME" (cuobjdump -sass).
_SASS_FUNCTION = re.compile(r"^(?:\.text\.(\w+):|\s*Function : (\w+))", re.M)


def disassembler() -> str | None:
    """nvdisasm (or cuobjdump) of the CUDA toolkit, or None."""
    for name in ("nvdisasm", "cuobjdump"):
        found = shutil.which(name) or next((p for p in (f"/usr/local/cuda/bin/{name}",) if os.path.exists(p)), None)
        if found:
            return found
    return None


def sass_counts(sass: str) -> dict:
    """Static shared loads/stores per kernel in a disassembly (``nvdisasm -c`` or
    ``cuobjdump -sass``): {kernel: {"LDS": 16, "LDS.64": 24, "LDS.128": 2, "STS": 5}}."""
    starts = list(_SASS_FUNCTION.finditer(sass))
    out = {}
    for start, end in zip(starts, [*starts[1:], None], strict=True):
        body = sass[start.end():end.start() if end else len(sass)]
        counts = Counter(op + suffix for op, suffix in _SASS_SHARED.findall(body))
        out[start.group(1) or start.group(2)] = dict(sorted(counts.items()))
    return out


def sass_shared_instructions(cuda_source: str, arch: str) -> dict:
    """The shared loads/stores of the SASS that ptxas makes from ``cuda_source`` (what the
    GPU runs and Nsight Compute counts); {} without nvcc or a disassembler. Beside the
    PTX's (:func:`shared_instructions`) it shows what ptxas re-unrolled or re-paired."""
    nvcc, tool = nvcc_path(), disassembler()
    if not cuda_source or nvcc is None or tool is None:
        return {}
    return {k: dict(v) for k, v in _sass(nvcc, tool, cuda_source, arch)}


@functools.lru_cache(maxsize=64)
def _sass(nvcc: str, tool: str, source: str, arch: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="explorer-sass-") as tmp:
        cubin = _nvcc_output(nvcc, source, arch, "cubin", tmp)
        flags = ["-c"] if tool.endswith("nvdisasm") else ["-sass"]
        proc = subprocess.run([tool, *flags, cubin], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ExplorerError(f"{os.path.basename(tool)} could not disassemble the kernel: "
                            f"{summary_line(proc.stderr)}")
    return tuple((k, tuple(v.items())) for k, v in sass_counts(proc.stdout).items())



def instruction_mix(built, kernel: str) -> str:
    """One line: the shared instructions of ``kernel`` in the PTX and in the SASS."""
    def listed(counts: dict) -> str:
        return ", ".join(f"{k} × {n}" for k, n in sorted(counts.items())) or "none"

    ptx = shared_instructions(built.cuda, built.target.arch).get(kernel)
    sass = sass_shared_instructions(built.cuda, built.target.arch).get(kernel)
    return (f"Shared instructions of {kernel}: PTX {listed(ptx) if ptx is not None else 'not compiled (no nvcc)'}; "
            f"SASS {listed(sass) if sass is not None else 'not disassembled (no nvdisasm or cuobjdump)'}.")


if __name__ == "__main__":
    _launch(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)

"""(template, workload, knobs, target) → scheduled TensorIR, lowered device TIR, CUDA.

``build(spec, target)`` runs TVM's default TIR pipeline itself (TVM 0.27 has no
``tvm.lower``) so the device TIR just before code generation is available to show and to
analyse, verifies the result (verify.py) and generates code. Builds are cached by
(spec, target). ``compile_binary`` runs nvcc on the CUDA source for register and
shared-memory use; it is separate because it takes seconds.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import tvm
from tvm import tirx

from .errors import ExplorerError, InvalidKnobs, summary_line
from .knobs import KnobSet
from .schedules import get_template
from .schedules.common import Template
from .targets import WARP_SIZE, is_cuda, resolve_target
from .tir_walk import walk
from .verify import has_async_copies, pooled_shared_bytes, shared_bytes, verify_device, verify_scheduled
from .workloads import Workload

_tir_build = importlib.import_module("tvm.tirx.build")  # the module; tvm.tirx.build is the function

# -- CUDA binaries, compiled once per machine -------------------------------------------
# With a GPU, TVM compiles each kernel's CUDA source (NVRTC or nvcc, about a second) inside
# code generation, in every process that builds it: the app, the measuring worker, each
# sweep compile worker. The binaries are kept on disk by source, architecture and compiler
# settings, so the measuring worker's rebuild of a kernel a sweep worker (or the app) just
# compiled costs no second compile.
CUDA_CACHE = os.environ.get("EXPLORER_CUDA_CACHE", os.path.join(tempfile.gettempdir(), "explorer-cuda-cache"))
_COMPILE_SETTINGS = ("TVM_CUDA_COMPILE_MODE", "TVM_CUDA_NVRTC_EXTRA_OPTS", "TVM_CUDA_PTXAS_REG_LEVEL",
                     "TVM_CUDA_PTXAS_EXTRA_OPTS", "CUDA_PATH")


def cached_cuda_compile(compile_cuda, cache_dir: str = CUDA_CACHE):
    """Wrap TVM's ``tvm_callback_cuda_compile`` with a disk cache (dumps bypass it)."""

    def compile_cached(code, *rest):
        if os.environ.get("TVM_KERNEL_DUMP"):
            return compile_cuda(code, *rest)
        target = tvm.target.Target.current(allow_none=True)
        arch = str(target.attrs.get("arch", "")) if target is not None else tvm.cuda(0).compute_version
        settings = [os.environ.get(name, "") for name in _COMPILE_SETTINGS]
        key = hashlib.sha256("\0".join([tvm.__version__, arch, *settings, str(code)]).encode()).hexdigest()
        path = os.path.join(cache_dir, key + ".bin")
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
        binary = bytes(compile_cuda(code, *rest))
        os.makedirs(cache_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, delete=False) as f:  # concurrent workers: write, then rename
            f.write(binary)
        os.replace(f.name, path)
        return binary

    return compile_cached


tvm.register_global_func(
    "tvm_callback_cuda_compile", cached_cuda_compile(tvm.get_global_func("tvm_callback_cuda_compile")), override=True
)


@dataclass(frozen=True)
class Spec:
    """The library's one input: a template, its workload and its knobs. Frozen and
    hashable, it is the build cache key and what a URL or a preset restores."""

    template: str
    workload: Workload
    knobs: KnobSet

    def __post_init__(self):
        template = get_template(self.template)
        if type(self.workload) is not template.workload:
            raise ExplorerError(
                f"Template '{self.template}' schedules {template.workload.title}, not {self.workload.title}."
            )
        if type(self.knobs) is not template.knobs:
            raise ExplorerError(f"These knobs belong to another template than '{self.template}'.")

    @property
    def template_def(self) -> Template:
        return get_template(self.template)

    def with_knobs(self, **changes) -> Spec:
        return dataclasses.replace(self, knobs=self.knobs.replace(**changes))


def warps_for(threads: int) -> int:
    """Warps a block of ``threads`` threads occupies: a partial warp still takes a whole one."""
    return -(-threads // WARP_SIZE)


class LaunchShape:
    """The launch arithmetic of anything with a ``grid`` and a ``block`` (x, y, z extents)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def warps_per_block(self) -> int:
        return warps_for(self.threads_per_block)


@dataclass(frozen=True)
class Kernel(LaunchShape):
    """One CUDA kernel of a build: its name, launch (grid and block) and static shared memory."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


@dataclass(eq=False)
class Build:
    spec: Spec
    target: tvm.target.Target
    tensorir: str  # scheduled TensorIR (TVMScript)
    trace: str  # the schedule as Python calls
    lowered: str  # device TIR just before codegen
    cuda: str  # generated CUDA source ("" for a CPU target)
    kernels: tuple[Kernel, ...]
    schedule_mod: tvm.IRModule = field(repr=False)
    device_mod: tvm.IRModule | None = field(repr=False)
    runtime_module: object = field(repr=False)
    timings_ms: dict = field(default_factory=dict)
    # The code views as they show by default, highlighted (explorer.highlight.views_html),
    # where a server's build process made them; the app highlights what is missing.
    views_html: dict = field(default_factory=dict, repr=False)

    @property
    def target_key(self) -> str:
        return str(self.target)


def build(spec: Spec, target: str | tvm.target.Target | None = None) -> Build:
    target = target if isinstance(target, tvm.target.Target) else resolve_target(target)
    return _build_cached(spec, str(target))


@functools.lru_cache(maxsize=128)
def _build_cached(spec: Spec, target_json: str) -> Build:
    template = spec.template_def
    target = arch_target(template, tvm.target.Target(target_json))
    timings = {}
    start = time.perf_counter()
    sch = template.apply(spec.workload, spec.knobs)
    timings["schedule"] = _ms(start)
    verify_scheduled(template, sch.mod, target)

    start = time.perf_counter()
    host_target = tvm.target.Target(target, host="llvm") if is_cuda(target) else target
    try:
        host_mod, device_mods = lower(sch.mod, host_target, template.pipeline)
    except ExplorerError:
        raise
    except Exception as error:  # lowering errors come as TVMError/RuntimeError
        raise InvalidKnobs(f"TVM cannot lower this schedule: {summary_line(error)}",
                           tuple(spec.knobs.to_dict())) from None
    timings["lower"] = _ms(start)
    device_mod = next(iter(device_mods.values()), None)
    if device_mod is not None:
        verify_device(template, device_mod, target)

    start = time.perf_counter()
    runtime_module = _tir_build.tir_to_runtime(host_mod, device_mods, host_target.host or target)
    timings["codegen"] = _ms(start)
    cuda = runtime_module.imports[0].inspect_source("cuda") if device_mod is not None else ""
    return Build(
        spec=spec,
        target=target,
        tensorir=sch.mod.script(),
        trace=str(sch.trace),
        lowered=(device_mod if device_mod is not None else host_mod).script(),
        cuda=cuda,
        kernels=_kernels(device_mod, pooled_shared_bytes(sch.mod)) if device_mod is not None else (),
        schedule_mod=sch.mod,
        device_mod=device_mod,
        runtime_module=runtime_module,
        timings_ms=timings,
    )


def arch_target(template: Template, target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with the architecture-specific instruction set a template needs where the GPU
    has it: a Hopper found on the machine reports sm_90, wgmma and setmaxnreg need sm_90a."""
    arch = str(target.attrs.get("arch", "")) if is_cuda(target) else ""
    if f"{arch}a" not in template.archs:
        return target
    return tvm.target.Target({**dict(target.export()), "arch": f"{arch}a"})


def lower(mod: tvm.IRModule, host_target: tvm.target.Target, name: str = "default") -> tuple[tvm.IRModule, dict]:
    """TVM's TIR pipeline ``name`` (TVM 0.27 has no ``tvm.lower``): (host module, {target:
    device module}) just before code generation. Also used by tests on hand-made TIR."""
    with tvm.transform.PassContext(config=lowering_config(mod)):
        mod = tirx.transform.BindTarget(host_target)(mod)
        pipeline, finalize_host, finalize_device = tirx.get_tir_pipeline(name)
        mod = pipeline(mod)
        host_mod, device_mods = _tir_build.split_host_device_mods(mod)
        host_mod = finalize_host()(host_mod)
        device_mods = {t: finalize_device()(m) for t, m in device_mods.items()}
    return host_mod, device_mods


def lowering_config(mod: tvm.IRModule) -> dict:
    """The pass options of every build here (and of an exported script, so that it makes the same CUDA)."""
    # Without common-subexpression temporaries the lowered TIR reads like the source.
    return {"tirx.disable_cse_tir": True, **pass_config(mod)}


def pass_config(mod: tvm.IRModule) -> dict:
    """Pass options a scheduled module needs beyond the defaults. A schedule that marks a pipeline
    stage asynchronous asks for cp.async, and the pass that emits it runs only when the pass
    context enables it. StorageRewrite would retype a shared buffer that is only ever accessed as
    float4 into a float4 buffer, whose scalar-indexed stores InjectPTXAsyncCopy rejects, so it is
    turned off too — except with warp memory (tensor-core fragments), whose lowering needs it."""
    if not has_async_copies(mod):
        return {}
    stmts = [stmt for func in mod.functions.values() if isinstance(func, tirx.PrimFunc) for stmt, _ in walk(func.body)]
    warp_memory = any(buffer.scope() == "warp" for s in stmts for buffer in getattr(s, "alloc_buffers", ()))
    return {"tirx.use_async_copy": True, **({} if warp_memory else {"tirx.disable_storage_rewrite": True})}


def _kernels(device_mod: tvm.IRModule, pooled: int = 0) -> tuple[Kernel, ...]:
    out = []
    for gv, func in device_mod.functions.items():
        extents: dict[str, int] = {}
        for stmt, _ in walk(func.body):
            if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
                extents[str(stmt.node.thread_tag)] = int(stmt.value)
        dims = lambda prefix, extents=extents: tuple(extents.get(f"{prefix}.{axis}", 1) for axis in "xyz")  # noqa: E731
        out.append(Kernel(gv.name_hint, dims("blockIdx"), dims("threadIdx"), shared_bytes(func) + pooled))
    return tuple(sorted(out, key=lambda k: k.name))


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


# -- compiled binary -----------------------------------------------------------------


@dataclass(frozen=True)
class Binary:
    """What the compiled binary says about each kernel of the CUDA source."""

    tool: str  # "nvrtc" (the cubin, read by cuobjdump and nvdisasm) or "nvcc" (ptxas -v)
    arch: str
    registers: dict  # kernel name -> registers per thread
    shared_bytes: dict  # kernel name -> static shared bytes (a cubin's for sm_90 include the 1 KB reserved)
    spill_bytes: dict  # kernel name -> spill stores + loads in bytes
    log: str
    sass: str


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None
    )


def compile_binary(built: Build) -> Binary | None:
    """Registers, shared memory and spills per kernel from the cubin that NVRTC compiles
    (explorer.analysis.sass, no toolkit needed); nvcc -Xptxas -v where NVRTC or the pip
    disassembler is missing; None when neither is there."""
    if not built.cuda:
        return None
    from .analysis import sass

    if not sass.missing_tools():
        report = sass.analyze_sass(built)
        return Binary(
            "nvrtc", report.arch, {k.kernel: k.registers for k in report.kernels},
            {k.kernel: k.shared_bytes for k in report.kernels}, {k.kernel: k.mix.spill_bytes for k in report.kernels},
            " ".join(report.tools), "\n\n".join(sass.sass_text(k, built.cuda) for k in report.kernels),
        )
    if nvcc_path() is None:
        return None
    return _compile_source(built.cuda, built.target.arch)


_PTXAS_FUNC = re.compile(r"Function properties for (\w+)|Compiling entry function '(\w+)'")
_PTXAS_USED = re.compile(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?", re.S)


@functools.lru_cache(maxsize=64)
def _compile_source(source: str, arch: str) -> Binary:
    nvcc = nvcc_path()
    with tempfile.TemporaryDirectory(prefix="explorer-nvcc-") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        cubin = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(source)
        proc = subprocess.run(
            [nvcc, "--cubin", f"-arch={arch}", "-O3", "-Xptxas", "-v", "-o", cubin, src],
            capture_output=True, text=True, timeout=120,
        )
        if proc.returncode != 0:
            raise ExplorerError(f"nvcc could not compile the generated CUDA: {summary_line(proc.stderr)}")
        sass = ""
        cuobjdump = shutil.which("cuobjdump", path=os.path.dirname(nvcc))
        if cuobjdump:
            dump = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, timeout=60)
            sass = dump.stdout
    registers, shared, spills = {}, {}, {}
    current = None
    for line in proc.stderr.splitlines():
        entry = re.search(r"Compiling entry function '(\w+)'", line)
        if entry:
            current = entry.group(1)
            continue
        if current is None:
            continue
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if spill:
            spills[current] = int(spill.group(1)) + int(spill.group(2))
        used = re.search(r"Used (\d+) registers", line)
        if used:
            registers[current] = int(used.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            shared[current] = int(smem.group(1)) if smem else 0
    return Binary("nvcc", arch, registers, shared, spills, proc.stderr, sass)

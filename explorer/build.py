"""(template, workload, knobs, target) → scheduled TensorIR, lowered device TIR, CUDA.

``build(spec, target)`` runs TVM's default TIR pipeline itself (TVM 0.27 has no
``tvm.lower``) so the device TIR just before code generation is available to show and to
analyse, verifies the result (verify.py) and generates code. Builds are cached by
(spec, target). Code generation compiles each CUDA kernel (with a GPU) through the compile
stage's disk cache (cuda_compile.py), which also compiles a cubin for registers and SASS.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import time
from dataclasses import dataclass, field

import tvm
from tvm import tirx

from .cuda_compile import install_disk_cache
from .cuda_env import SOURCE_ONLY
from .errors import ExplorerError, InvalidKnobs, summary_line
from .knobs import KnobSet
from .schedules import get_template
from .schedules.common import Template
from .targets import WARP_SIZE, is_cuda, resolve_target
from .tir_walk import walk
from .verify import (
    dynamic_shared_bytes,
    has_async_copies,
    pooled_shared_bytes,
    shared_bytes,
    verify_device,
    verify_scheduled,
)
from .workloads import Workload

_tir_build = importlib.import_module("tvm.tirx.build")  # the module; tvm.tirx.build is the function
install_disk_cache()

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
    """One CUDA kernel of a build: its name, launch (grid and block, and the thread-block cluster
    its blocks are launched in, (1, 1, 1) for none) and shared memory per block: all of it, and the
    part allocated dynamically (given at launch: a cubin does not count it)."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    cluster: tuple[int, int, int] = (1, 1, 1)
    dynamic_shared_bytes: int = 0

    @property
    def static_shared_bytes(self) -> int:
        return self.shared_bytes - self.dynamic_shared_bytes

    @property
    def blocks_per_cluster(self) -> int:
        return math.prod(self.cluster)


@dataclass(eq=False)
class Build:
    spec: Spec
    target: tvm.target.Target
    trace: str  # the schedule as Python calls
    cuda: str  # generated CUDA source ("" for a CPU target)
    kernels: tuple[Kernel, ...]
    schedule_mod: tvm.IRModule = field(repr=False)
    device_mod: tvm.IRModule | None = field(repr=False)
    runtime_module: object = field(repr=False)  # None where built source only: runtime_module_of makes it
    timings_ms: dict = field(default_factory=dict)
    # The code views as they show by default, highlighted (explorer.highlight.views_html),
    # where a server's build process made them; the app highlights what is missing.
    views_html: dict = field(default_factory=dict, repr=False)
    # The host side just before code generation: with device_mod, what runtime_module_of needs to
    # make the runtime module of a build that crossed processes without one.
    host_mod: tvm.IRModule | None = field(default=None, repr=False)
    # The two TVMScript texts, printed when first read (:meth:`with_texts`): a diagnosis builds dozens of
    # neighbours and reads neither (printing them was a sixteenth of its time).
    _tensorir: str | None = field(default=None, repr=False)
    _lowered: str | None = field(default=None, repr=False)

    @property
    def tensorir(self) -> str:
        """The scheduled TensorIR (TVMScript)."""
        if self._tensorir is None:
            self._tensorir = self.schedule_mod.script()
        return self._tensorir

    @property
    def lowered(self) -> str:
        """The device TIR just before code generation (the host's for a CPU target)."""
        if self._lowered is None:
            self._lowered = (self.device_mod if self.device_mod is not None else self.host_mod).script()
        return self._lowered

    def with_texts(self) -> Build:
        """This build with its texts printed, before it goes to a process that shows them (a page's
        build process sends its builds to the app process, whose one core runs every page)."""
        self.tensorir, self.lowered  # noqa: B018 (printed and kept)
        return self

    @property
    def target_key(self) -> str:
        return str(self.target)


def build(spec: Spec, target: str | tvm.target.Target | None = None) -> Build:
    target = target if isinstance(target, tvm.target.Target) else resolve_target(target)
    return _build_cached(spec, str(target))


def scheduled(spec: Spec, target: str | tvm.target.Target | None = None) -> tvm.s_tir.Schedule:
    """The schedule of ``spec``, checked against ``target``'s limits: what :func:`build` refuses
    before lowering (most of what it refuses), in a third of a build's time."""
    target = target if isinstance(target, tvm.target.Target) else resolve_target(target)
    template = spec.template_def
    sch = template.apply(spec.workload, spec.knobs)
    verify_scheduled(template, sch.mod, arch_target(template, target))
    return sch


def keep_builds(count: int) -> None:
    """Keep at most ``count`` builds in this process's cache (128 by default: the command line, a
    sweep, a diagnosis building neighbours). A server's build and compile processes build each
    setting once, and a Hopper or conv2d_async build holds about 5 MB."""
    global _build_cached
    _build_cached = functools.lru_cache(maxsize=count)(_build_cached.__wrapped__)


@functools.lru_cache(maxsize=128)
def _build_cached(spec: Spec, target_json: str) -> Build:
    template = spec.template_def
    target = arch_target(template, tvm.target.Target(target_json))
    timings = {}
    start = time.perf_counter()
    sch = scheduled(spec, target)
    timings["schedule"] = _ms(start)

    start = time.perf_counter()
    host_target = with_host(target)
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
    if device_mod is not None and os.environ.get(SOURCE_ONLY):
        # A process that never runs a kernel (the app's, a build or diagnosing process) needs the
        # CUDA source only: the host's LLVM code generation (13-18 ms a setting, as long as the
        # whole CUDA code generation of most) is left to runtime_module_of where a kernel runs.
        runtime_module, cuda = None, _cuda_source(spec, device_mods, target)
    else:
        runtime_module = _generate(spec, host_mod, device_mods, target)
        cuda = runtime_module.imports[0].inspect_source("cuda") if device_mod is not None else ""
    timings["codegen"] = _ms(start)
    return Build(
        spec=spec,
        target=target,
        trace=str(sch.trace),
        cuda=cuda,
        kernels=_kernels(device_mod, pooled_shared_bytes(sch.mod)) if device_mod is not None else (),
        schedule_mod=sch.mod,
        device_mod=device_mod,
        runtime_module=runtime_module,
        timings_ms=timings,
        host_mod=host_mod,
    )


def with_host(target: tvm.target.Target) -> tvm.target.Target:
    """``target`` as lowering and code generation take it: a CUDA target with its LLVM host."""
    return tvm.target.Target(target, host="llvm") if is_cuda(target) else target


def _generate(spec: Spec, host_mod: tvm.IRModule, device_mods: dict, target: tvm.target.Target):
    """TVM's code generation of the lowered modules: the runtime module."""
    host = with_host(target).host or target
    try:  # where CUDA is compiled here too (not SOURCE_ONLY), a source that does not compile fails here
        with target:  # the CUDA compile reads the architecture from the current target (cuda_compile.py)
            return _tir_build.tir_to_runtime(host_mod, device_mods, host)
    except Exception as error:  # TVM raises RuntimeError with the compiler's output
        raise InvalidKnobs(f"The CUDA that TVM generated for this setting does not compile: {summary_line(error)}",
                           tuple(spec.knobs.to_dict())) from None


def _cuda_source(spec: Spec, device_mods: dict, target: tvm.target.Target) -> str:
    """The CUDA source of the first device module with kernels, as :func:`_generate`'s runtime module
    shows it (its first import's)."""
    found = [(device, mod) for device, mod in device_mods.items() if len(mod.functions)]
    if not found:
        return ""
    device, mod = found[0]
    try:
        with target:
            return _tir_build.codegen_build(mod, device).inspect_source("cuda")
    except Exception as error:  # TVM raises RuntimeError with the code generator's message
        raise InvalidKnobs(f"TVM cannot generate CUDA for this setting: {summary_line(error)}",
                           tuple(spec.knobs.to_dict())) from None


def runtime_module_of(built: Build):
    """The runtime module of ``built``: its own, or, for a build that crossed processes without one
    (a build process's, kept on disk), code generation of its lowered modules, which compiles the
    CUDA where this process may: the rest of :func:`build` without scheduling and lowering again."""
    if built.runtime_module is not None:
        return built.runtime_module
    if built.spec.template_def.codegen_needs is not None:
        built.spec.template_def.codegen_needs()
    device_mods = {built.target: built.device_mod} if built.device_mod is not None else {}
    return _generate(built.spec, built.host_mod, device_mods, built.target)


def arch_target(template: Template, target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with the architecture-specific instruction set a template needs where the GPU
    has it: a Hopper found on the machine reports sm_90, wgmma and setmaxnreg need sm_90a."""
    arch = str(target.attrs.get("arch", "")) if is_cuda(target) else ""
    if f"{arch}a" not in template.archs:
        return target
    return tvm.target.Target({**dict(target.export()), "arch": f"{arch}a"})


# TVM's default pipeline runs s_tir.LowerAsyncDMA, the lowering of Hexagon's DMA copies, wherever
# cp.async is on. CUDA has no DMA copy to lower to: on the 108 settings with cp.async among the
# presets and random knob walks of six templates it changed nothing, and it took half to four fifths
# of their lowering (conv2d_async 205 → 87 ms). Skipped for CUDA, here and in an exported script.
CUDA_SKIPPED_PASSES = ("s_tir.LowerAsyncDMA",)


def skipped_passes(target: tvm.target.Target) -> list[str]:
    """The passes of TVM's pipeline that lowering for ``target`` skips (PassContext's ``disabled_pass``)."""
    return list(CUDA_SKIPPED_PASSES) if is_cuda(target) else []


def lower(mod: tvm.IRModule, host_target: tvm.target.Target, name: str = "default") -> tuple[tvm.IRModule, dict]:
    """TVM's TIR pipeline ``name`` (TVM 0.27 has no ``tvm.lower``): (host module, {target:
    device module}) just before code generation. Also used by tests on hand-made TIR."""
    with tvm.transform.PassContext(config=lowering_config(mod), disabled_pass=skipped_passes(host_target)):
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
        out.append(Kernel(gv.name_hint, dims("blockIdx"), dims("threadIdx"), shared_bytes(func) + pooled,
                          dims("clusterCtaIdx"), dynamic_shared_bytes(func) + pooled))
    return tuple(sorted(out, key=lambda k: k.name))


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)

"""The kernels to measure, compiled to loadable libraries in a pool of their own (processes
that may compile binaries, unlike the build pool's), so the measuring worker only loads,
checks and times."""
from __future__ import annotations

import hashlib
import os
import time

import tvm  # already imported by ..build; its version names the libraries kept on disk

from ..build import Build, Spec, build, keep_builds, runtime_module_of
from ..cuda_compile import CUBINS
from ..cuda_env import binary_process_init, kernel_environment
from ..errors import ExplorerError
from ..processes import log_line
from . import build_disk
from .pool import POOL_BUILDS, ProcessPool
from .settings import COMPILE_NICENESS, ServerSettings

COMPILE_LOG = "EXPLORER_COMPILE_LOG"  # where each compile process writes a line per setting it compiles
# The times a line of the compile log begins with, in order (the class bench reads them by these names).
COMPILE_LOG_TIMES = ("asked", "started", "built", "generated", "exported")
COMPILE_LOG_CUBINS = ("compiled", "read", "waited")  # then the CPU seconds, and the binaries counted by these


class CompileService(ProcessPool):
    """Compiles the kernels to measure on all the cores it is given, in processes that may
    compile binaries (unlike the build pool's): each returns the path of a library the
    measuring worker loads, or None where no library can be exported here (no C compiler),
    and the worker then compiles the kernel itself."""

    # A compile process's warm-up compiles each kernel with NVRTC: all the lessons' templates took
    # a fresh class server's compile processes over a minute, the measuring worker compiling every
    # kernel itself meanwhile. One each (a different one per process), then the rest on first use.
    warm_templates = 1

    def __init__(self, settings: ServerSettings):
        super().__init__(settings, settings.compile_workers, _compile_pool_init, kernel_environment,
                         name="compile worker")
        self.disk = build_disk.BuildDisk(settings)

    def compile(self, spec: Spec, target: str) -> str | None:
        """The library of ``spec``'s kernel for ``target`` (raises ExplorerError); None while
        the processes are still starting (the worker then compiles the kernel itself)."""
        if not self.ready.is_set():
            return None
        return self.run(compile_library, spec, target, self.settings.library_dir, self.disk.path(spec, target),
                        time.time(), doing="Compiling this setting")


def _compile_pool_init(root: str) -> None:
    """A compile process: where cores are short, the operating system runs the pages' builds
    first (a student waits for the code before the latency)."""
    binary_process_init(root)
    os.nice(COMPILE_NICENESS)
    keep_builds(POOL_BUILDS)  # each setting is compiled once: its library is kept on disk


def library_path(spec: Spec, target: str, directory: str) -> str:
    """Where ``spec``'s compiled kernel for ``target`` is kept: one file per setting, TVM
    version and target."""
    key = hashlib.sha256(f"{tvm.__version__}|{target}|{spec!r}".encode()).hexdigest()
    return os.path.join(directory, key + ".so")


def compile_library(spec: Spec, target: str, directory: str, kept_at: str | None = None,
                    asked_at: float | None = None) -> str | None | ExplorerError:
    """In a compile process: build ``spec`` (NVRTC compiles its CUDA, through the disk cache)
    and export it as a library; None where exporting fails (no C compiler); an ExplorerError
    comes back as a value, intact. A build a page's build process kept on disk (``kept_at``), or
    is making (a page asks for the measurement before it builds), is only generated: its scheduling
    and lowering (about half of a compile process's time in a class) are not done again."""
    path = library_path(spec, target, directory)
    if os.path.exists(path):
        return path
    log = _CompileLog(spec, asked_at)
    kept = build_disk.read_when_built(kept_at) if kept_at is not None else None
    log.mark("built")
    try:
        if isinstance(kept, ExplorerError):
            raise kept
        reused = isinstance(kept, Build) and kept.host_mod is not None
        module = runtime_module_of(kept if reused else build(spec, target))
        log.mark("generated", "kept" if reused else "here")
    except ExplorerError as error:
        log.write("error")
        return error
    os.makedirs(directory, exist_ok=True)
    partial = f"{path}.{os.getpid()}.so"
    try:
        module.export_library(partial)
    except Exception:  # no C compiler or linker on this machine: the worker compiles instead
        log.write("no-library")
        return None
    os.replace(partial, path)  # whole or absent: other processes may read it at once
    log.mark("exported")
    log.write("ok")
    return path


class _CompileLog:
    """One line of the compile log (COMPILE_LOG) for a setting compiled here: when it was asked
    for, picked up, its page's build was there, its code generated (NVRTC) and its library
    exported (Unix seconds), this process's CPU seconds for it, its binaries compiled here, read
    from the disk or waited for, whether the build was the page's ("kept") or made "here", the
    outcome and the template. A class's bench reads where a compile's seconds go."""

    def __init__(self, spec: Spec, asked_at: float | None):
        self.path = os.environ.get(COMPILE_LOG)
        self.template = spec.template
        self.times = {"asked": asked_at, "started": time.time()}
        self.cpu, self.cubins, self.build = time.process_time(), dict(CUBINS), "-"

    def mark(self, stage: str, build: str | None = None) -> None:
        self.times[stage] = time.time()
        self.build = build or self.build

    def write(self, outcome: str) -> None:
        if not self.path:
            return
        times = " ".join("-" if self.times.get(stage) is None else f"{self.times[stage]:.3f}"
                         for stage in COMPILE_LOG_TIMES)
        cubins = " ".join(str(CUBINS[kind] - self.cubins.get(kind, 0)) for kind in COMPILE_LOG_CUBINS)
        log_line(self.path, f"{times} {time.process_time() - self.cpu:.3f} {cubins} {self.build} {outcome} "
                            f"{self.template}")

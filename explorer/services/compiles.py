"""The kernels to measure, compiled to loadable libraries in a pool of their own (processes
that may compile binaries, unlike the build pool's), so the measuring worker only loads,
checks and times."""
from __future__ import annotations

import hashlib
import os

import tvm  # already imported by ..build; its version names the libraries kept on disk

from ..build import Build, Spec, build, keep_builds, runtime_module_of
from ..cuda_env import binary_process_init, kernel_environment
from ..errors import ExplorerError
from . import build_disk
from .pool import POOL_BUILDS, ProcessPool
from .settings import COMPILE_NICENESS, ServerSettings


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
                        doing="Compiling this setting")


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


def compile_library(spec: Spec, target: str, directory: str, kept_at: str | None = None) -> str | None | ExplorerError:
    """In a compile process: build ``spec`` (NVRTC compiles its CUDA, through the disk cache)
    and export it as a library; None where exporting fails (no C compiler); an ExplorerError
    comes back as a value, intact. A build a page's build process kept on disk (``kept_at``), or
    is making (a page asks for the measurement before it builds), is only generated: its scheduling
    and lowering (about half of a compile process's time in a class) are not done again."""
    path = library_path(spec, target, directory)
    if os.path.exists(path):
        return path
    kept = build_disk.read_when_built(kept_at) if kept_at is not None else None
    try:
        if isinstance(kept, ExplorerError):
            raise kept
        module = (runtime_module_of(kept) if isinstance(kept, Build) and kept.host_mod is not None
                  else build(spec, target).runtime_module)
    except ExplorerError as error:
        return error
    os.makedirs(directory, exist_ok=True)
    partial = f"{path}.{os.getpid()}.so"
    try:
        module.export_library(partial)
    except Exception:  # no C compiler or linker on this machine: the worker compiles instead
        return None
    os.replace(partial, path)  # whole or absent: other processes may read it at once
    return path

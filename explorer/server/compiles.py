"""The kernels to measure, compiled to loadable libraries in a pool of their own (processes
that may compile binaries, unlike the build pool's), or by the class's worker hosts
(``--workers``: ``engine.py``), so the measuring worker only loads, checks and times."""
from __future__ import annotations

import logging
import os
import struct
import tempfile
import time

import cloudpickle

from ..build import Build, Spec, build, keep_builds, runtime_module_of
from ..cuda_compile import CUBINS
from ..cuda_env import binary_process_init, kernel_environment
from ..errors import ExplorerError
from ..processes import log_line
from ..targets import resolve_target
from . import build_disk
from .content_keys import content_key
from .pool import POOL_BUILDS, ProcessPool
from .settings import COMPILE_NICENESS, ServerSettings

log = logging.getLogger(__name__)

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
    source_only = False  # on a worker host too, its calls compile the CUDA binaries

    def __init__(self, settings: ServerSettings):
        # With a cluster, compile_workers counts the compiles asked of it at once; this machine's own
        # processes, where a call falls back, are one per core at most.
        here = min(settings.compile_workers, os.cpu_count() or 1) if settings.workers else settings.compile_workers
        # Each compile's freed heap goes back (malloc_trim, ~6 ms of a 0.3-3 s compile): a compile process
        # then held 15-20 MiB less over 100 new settings (bench/worker_memory.py --kind compile --release-heap).
        super().__init__(settings, here, _compile_pool_init, kernel_environment, release_heap=True,
                         name="compile worker", priority=0)
        self.disk = build_disk.BuildDisk(settings)

    def compile(self, spec: Spec, target: str) -> str | None:
        """The library of ``spec``'s kernel for ``target`` (raises ExplorerError); None while
        the processes are still starting (the worker then compiles the kernel itself)."""
        if not self.ready.is_set():
            return None
        kept_at = self.disk.path(spec, target)
        if self.engine is not None:
            return self._compile_on_a_host(spec, target, kept_at)
        return self.run(compile_library, spec, target, self.settings.library_dir, kept_at, time.time(),
                        doing="Compiling this setting")

    def _compile_on_a_host(self, spec: Spec, target: str, kept_at: str | None) -> str | None:
        """The library compiled by a worker host: it is sent the page's build (waited for here, as a
        compile process waits for it) and sends the library back, which is kept here for the measuring
        worker; one that is not a whole library is compiled again in this machine's processes."""
        path = library_path(spec, target, self.settings.library_dir)
        if os.path.exists(path):
            return path
        kept = build_disk.read_bytes_when_built(kept_at) if kept_at is not None else None
        resolved = str(resolve_target(target))
        data = self.run(compile_library_bytes, spec, resolved, kept, doing="Compiling this setting",
                        key="library-" + os.path.basename(path)[:-3])
        if data is not None and not whole_library(data):
            log.warning("A worker host sent a library that is not whole (%d bytes); compiled here instead", len(data))
            self.engine.broken += 1
            return self.run_here(compile_library, spec, target, self.settings.library_dir, kept_at, time.time(),
                                 doing="Compiling this setting")
        if data is None:  # no C compiler there: the measuring worker compiles it
            return None
        os.makedirs(self.settings.library_dir, exist_ok=True)
        build_disk.write_whole(path, data)
        return path


def _compile_pool_init(root: str) -> None:
    """A compile process: where cores are short, the operating system runs the pages' builds
    first (a student waits for the code before the latency)."""
    binary_process_init(root)
    os.nice(COMPILE_NICENESS)
    keep_builds(POOL_BUILDS)  # each setting is compiled once: its library is kept on disk


def library_path(spec: Spec, target: str, directory: str) -> str:
    """Where ``spec``'s compiled kernel for ``target`` is kept: one file per setting, resolved target
    (its architecture), versions and source (``content_keys.py``)."""
    return os.path.join(directory, content_key("library", spec, str(resolve_target(target))) + ".so")


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
    compile_log = _CompileLog(spec, asked_at)
    kept = build_disk.read_when_built(kept_at) if kept_at is not None else None
    os.makedirs(directory, exist_ok=True)
    return _compiled(spec, target, kept, compile_log, path)


def compile_library_bytes(spec: Spec, target: str, kept: bytes | None = None) -> bytes | None | ExplorerError:
    """On a worker host: :func:`compile_library` for the resolved ``target``, from the page's build as the
    server keeps it on disk (``kept``, pickled; None: built here), and the library's bytes sent back
    (the server keeps the file for its measuring worker); this host keeps nothing."""
    try:
        kept_build = cloudpickle.loads(kept) if kept is not None else None
    except Exception:  # classes that changed since: built here
        kept_build = None
    with tempfile.TemporaryDirectory(prefix="explorer-library-") as directory:
        path = os.path.join(directory, "kernel.so")
        outcome = _compiled(spec, target, kept_build, _CompileLog(spec, None), path)
        if not isinstance(outcome, str):
            return outcome
        with open(outcome, "rb") as file:
            return file.read()


def _compiled(spec: Spec, target: str, kept, compile_log: _CompileLog, path: str) -> str | None | ExplorerError:
    """``spec``'s library exported to ``path`` (from ``kept``, the page's build, where it has its lowered
    modules), None without a C compiler, or the setting's ExplorerError."""
    compile_log.mark("built")
    try:
        if isinstance(kept, ExplorerError):
            raise kept
        reused = isinstance(kept, Build) and kept.host_mod is not None
        module = runtime_module_of(kept if reused else build(spec, target))
        compile_log.mark("generated", "kept" if reused else "here")
    except ExplorerError as error:
        compile_log.write("error")
        return error
    partial = f"{path}.{os.getpid()}.so"
    try:
        module.export_library(partial)
    except Exception:  # no C compiler or linker on this machine: the worker compiles instead
        compile_log.write("no-library")
        return None
    os.replace(partial, path)  # whole or absent: other processes may read it at once
    compile_log.mark("exported")
    compile_log.write("ok")
    return path


def whole_library(data: bytes) -> bool:
    """Whether ``data`` is a whole shared library (ELF, a shared object, its section headers within the
    file): a worker host that sent something cut short or of another kind is not loaded from."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # 64-bit little-endian
        return False
    kind, = struct.unpack_from("<H", data, 16)
    section_headers, = struct.unpack_from("<Q", data, 40)
    entry_size, count = struct.unpack_from("<HH", data, 58)
    return kind == 3 and section_headers + entry_size * count <= len(data)


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

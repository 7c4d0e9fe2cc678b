"""A server's sizes, ages and process counts, from the environment (``EXPLORER_*``)."""
from __future__ import annotations

import functools
import glob
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ExplorerError

# Where cores are short the operating system runs a class server's work in this order (os.nice):
# the pages (app and build processes, 0), then the kernels to measure (a student waits for the
# latency after the code), then the diagnoses (each builds every neighbour of a setting, seconds of
# CPU, for a panel that says when it will come). Measured on the H100 (16 cores, 100 students):
# compiles at 10 and diagnoses at 19 starved the compiles (p50 4.1 s from asked to compiled, 2.1 s
# at 5 and 10) and the first minute's measurements.
COMPILE_NICENESS = 5
DIAGNOSE_NICENESS = 10
WORKERS = "EXPLORER_WORKERS"  # the cluster's address (serve --workers)


# -- the server's memory, planned from the machine's ----------------------------------------------------------
# The server's processes together (their proportional set sizes summed: a page shared by N processes counted 1/N in
# each) stay under a bound planned from the machine's memory: each process's own memory (TVM, PyTorch, CUDA: what it
# holds before it caches anything) plus its caches, sized so that all the caches of the server together hold at most
# CACHE_SHARE of the machine's memory, each cache's entries counted at their largest. The environment's
# EXPLORER_BUILD_CACHE, EXPLORER_DIAGNOSE_BUILDS and EXPLORER_MEASURE_CACHE override the sizes (the bound is then
# planned from those).
CACHE_SHARE = 1 / 16
# A process's own memory, MiB of PSS, rounded up: on the 2-core CPU machine a 10-minute class of 20 ended with the app
# process at 503-607 MiB (its builds included), the build process at 150-180, the diagnosing process at 490-510 with
# its 128 builds (bench/results/runs/classroom-memory-cpu-20-students.md); the compile and measuring processes are
# the H100's at minute 1 of its 20-minute class, RSS, which counts their shared pages whole (none measured in PSS).
PROCESS_MIB = {"launcher": 64, "app": 700, "build": 400, "diagnose": 500, "service": 600, "compile": 960,
               "measure": 2000}
# A cache's largest entry, MiB: an app process's build with its code views highlighted (0.2-5 MB: a Hopper or
# conv2d_async build 5 MB), a diagnosing process's build (0.8-1.1 MiB, bench/worker_memory.py), a measurement.
BUILD_MIB, DIAGNOSE_BUILD_MIB, MEASUREMENT_MIB = 5.0, 1.2, 0.002
APP_BUILDS_SHARE = 2 / 3  # of an app process's share of the caches: its builds; the rest its diagnosing process's
# A diagnosing process keeps at most 128 builds: a diagnosis builds about 30 neighbours and a walk to a new setting
# found 8% of them kept (bench/worker_memory.py); given 415 on the 2-core machine it grew 400 MiB more over a
# 10-minute class of 20, still filling (docs/results.md), for those few.
BUILDS_RANGE, DIAGNOSE_BUILDS_RANGE, MEASUREMENTS_RANGE = (16, 1024), (16, 128), (1024, 16384)
MEASUREMENTS_PER_GIB = 256  # measurements kept per GiB of the machine's memory (a few hundred bytes each)
APP_PROCESSES = "EXPLORER_APP_PROCESSES"  # serve's app processes (the launcher sets it for them)


@dataclass(frozen=True)
class MemoryPlan:
    """The caches' sizes for a machine of ``memory_mib`` and the server's processes, and the bound its processes
    together stay under (MiB of summed PSS): their own memory (``processes_mib``) plus the caches' at their largest
    (``caches_mib``)."""

    memory_mib: int
    build_cache: int  # builds each app process keeps (EXPLORER_BUILD_CACHE)
    diagnose_builds: int  # builds each diagnosing process keeps (EXPLORER_DIAGNOSE_BUILDS)
    measure_cache: int  # measurements the server keeps (EXPLORER_MEASURE_CACHE)
    processes: dict  # kind → how many
    processes_mib: float
    caches_mib: float

    @property
    def bound_mib(self) -> float:
        return self.processes_mib + self.caches_mib

    def sentence(self) -> str:
        """What the Device page and ``serve`` say of it, in one sentence."""
        return (f"Memory: this server's processes stay under {self.bound_mib / 1024:.1f} GiB together (summed PSS) on "
                f"this machine's {self.memory_mib / 1024:.0f} GiB: {self.processes_mib / 1024:.1f} GiB for its "
                f"{sum(self.processes.values())} processes themselves and at most {self.caches_mib / 1024:.1f} GiB "
                f"of caches ({self.build_cache} builds per app process, {self.diagnose_builds} per diagnosing "
                f"process, {self.measure_cache} measurements).")


def _clamp(value: float, bounds: tuple[int, int]) -> int:
    return int(min(max(value, bounds[0]), bounds[1]))


def memory_plan(memory_mib: int, app_processes: int = 1, build_workers: int = 1, compile_workers: int = 1,
                gpus: int = 1, diagnose: bool = True, build_cache: int | None = None,
                diagnose_builds: int | None = None, measure_cache: int | None = None) -> MemoryPlan:
    """The caches' sizes and the server's bound on a machine of ``memory_mib``, for ``app_processes`` app processes
    of ``build_workers`` build processes each (and a diagnosing process each where it ``diagnose``s), one measuring
    service of ``compile_workers`` compile processes where it has ``gpus`` (0: no GPU, neither), and a measuring
    worker per GPU. All the caches together get CACHE_SHARE of the memory, each app process an equal part of it
    (its builds APP_BUILDS_SHARE, its diagnosing process the rest), every entry counted at its largest; a size
    given (the environment's) is kept as given."""
    several = app_processes > 1
    processes = {"launcher": 1, "app": app_processes, "build": app_processes * build_workers,
                 "diagnose": app_processes if diagnose else 0,
                 "service": 1 if several else 0, "compile": compile_workers if gpus else 0, "measure": gpus}
    processes = {kind: count for kind, count in processes.items() if count}
    measurements = measure_cache or _clamp(memory_mib / 1024 * MEASUREMENTS_PER_GIB, MEASUREMENTS_RANGE)
    per_app = (memory_mib * CACHE_SHARE - measurements * MEASUREMENT_MIB) / app_processes
    builds = build_cache or _clamp(per_app * APP_BUILDS_SHARE / BUILD_MIB, BUILDS_RANGE)
    if diagnose_builds is None:
        diagnose_builds = _clamp(per_app * (1 - APP_BUILDS_SHARE) / DIAGNOSE_BUILD_MIB, DIAGNOSE_BUILDS_RANGE)
    caches = (app_processes * (builds * BUILD_MIB + (diagnose_builds * DIAGNOSE_BUILD_MIB if diagnose else 0))
              + measurements * MEASUREMENT_MIB)
    return MemoryPlan(memory_mib, builds, diagnose_builds, measurements, processes,
                      sum(PROCESS_MIB[kind] * count for kind, count in processes.items()), caches)


def machine_memory_mib() -> int:
    """This machine's memory, MiB (the cgroup's limit where one is set lower)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as file:
            limit = file.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total // 2**20


def has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU (its device files; without loading CUDA)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


@functools.cache
def _planned(memory_mib: int, app_processes: int, build_workers: int, compile_workers: int, gpus: int,
             diagnose: bool, sizes: tuple) -> MemoryPlan:
    return memory_plan(memory_mib, app_processes, build_workers, compile_workers, gpus, diagnose, *sizes)


def this_machines_plan(environ: Mapping[str, str] | None = None) -> MemoryPlan:
    """The memory plan of a server started here with ``environ`` (default: this process's environment): the one
    every default size comes from, and the bound ``serve`` and the Device page state."""
    environ = os.environ if environ is None else environ
    cores = os.cpu_count() or 2
    sizes = tuple(_env_int(name, 0, minimum=0, environ=environ) or None for name in
                  ("EXPLORER_BUILD_CACHE", "EXPLORER_DIAGNOSE_BUILDS", "EXPLORER_MEASURE_CACHE"))
    return _planned(machine_memory_mib(), _env_int(APP_PROCESSES, 1, environ=environ),
                    _env_int("EXPLORER_BUILD_WORKERS", max(1, cores // 2), minimum=0, environ=environ),
                    _env_int("EXPLORER_COMPILE_WORKERS", max(1, cores // 2), environ=environ),
                    _env_int("EXPLORER_GPUS", 1, environ=environ) if has_gpu() else 0,
                    _env_flag("EXPLORER_DIAGNOSE", True, environ=environ), sizes)


@dataclass(frozen=True)
class ServerSettings:
    """Server-wide sizes and ages, from the environment (``EXPLORER_*``) with reasoned defaults."""

    # Half the cores build the pages' code (a build is 50-300 ms); the other half compile
    # kernels to measure (NVRTC, 1-3 s each). 0: the server builds in its own process (one user
    # on a small machine: no process to start, no build copied between processes).
    build_workers: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_WORKERS",
                                                                max(1, (os.cpu_count() or 2) // 2), minimum=0))
    # A build with its highlighted views holds 0.2-5 MB (a Hopper or conv2d_async build 5 MB, measured);
    # the disk keeps every build, read back in a few ms, so a process keeps the recent ones: as many as the
    # machine's memory plan gives it (memory_plan).
    build_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_CACHE", this_machines_plan().build_cache))
    # Builds the diagnosing process keeps (a diagnosis builds about 30 neighbours, and a student's next setting's
    # neighbours overlap the last's): the memory plan's.
    diagnose_builds: int = field(default_factory=lambda: _env_int("EXPLORER_DIAGNOSE_BUILDS",
                                                                  this_machines_plan().diagnose_builds))
    # Builds kept on disk for every app process of the machine (a setting one process built is
    # read, not built, by the others): ~130 KB each (up to 2.5 MB), ~1 GB at 4096. 0: none kept.
    build_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_BUILD_DIR", os.path.join(tempfile.gettempdir(), "explorer-builds")))
    build_disk_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_DISK_CACHE", 4096, minimum=0))
    # A measurement is a few hundred bytes; the cache bounds memory, not the age.
    measure_cache: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_CACHE",
                                                                this_machines_plan().measure_cache))
    # Clocks, other tenants and driver updates drift; after this a setting is timed again.
    measure_max_age_s: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_MAX_AGE_S", 1800))
    # Measurements kept on disk for a server started later (explorer/server/measure_store.py; what
    # ``python -m explorer prepare`` fills); "" keeps them in memory only.
    measure_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_MEASURE_DIR", os.path.join(tempfile.gettempdir(), "explorer-measurements")))
    # Lowering a heavily unrolled kernel takes seconds; past this the build is abandoned.
    build_time_limit_s: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_TIME_LIMIT_S", 120))
    compile_workers: int = field(default_factory=lambda: _env_int("EXPLORER_COMPILE_WORKERS",
                                                                  max(1, (os.cpu_count() or 2) // 2)))
    # Where compiled kernels are kept for the measuring worker (a library is ~100 KB).
    library_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_LIBRARY_DIR", os.path.join(tempfile.gettempdir(), "explorer-kernel-libraries")))
    # A build's other code views (lowered TIR, CUDA) highlighted ahead, in a free build process, so that
    # opening their tab is instant. A class server turns it off (explorer.server.launcher): under 100 students it
    # took 43% of the build processes' time (py-spy on the H100), for tabs most pages never open; a page
    # that opens one highlights it itself.
    highlight_ahead: bool = field(default_factory=lambda: _env_flag("EXPLORER_HIGHLIGHT_AHEAD", True))
    # A diagnosis builds every neighbour of a setting (seconds of CPU, at low priority); a small
    # machine may keep its cores for the pages' builds: 0 runs no diagnosing process.
    diagnose: bool = field(default_factory=lambda: _env_flag("EXPLORER_DIAGNOSE", True))
    # The GPUs to measure on, one measuring worker each: the first this many of those the server
    # sees (``serve`` sets it on a machine with several).
    gpus: int = field(default_factory=lambda: _env_int("EXPLORER_GPUS", 1))
    # The cluster whose worker hosts make the builds and compiles (a Dask scheduler's address, ``serve
    # --workers``; explorer/server/engine.py); "": this machine's build and compile processes.
    workers: str = field(default_factory=lambda: os.environ.get(WORKERS, "").strip())


def _env_flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise ExplorerError(f"{name} must be 1 (on) or 0 (off), not '{text}'.")
    return text == "1"


def _env_int(name: str, default: int, minimum: int = 1, environ: Mapping[str, str] | None = None) -> int:
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        kind = "a positive whole number" if minimum == 1 else f"a whole number from {minimum}"
        raise ExplorerError(f"{name} must be {kind}, not '{text}'.")
    return int(text)


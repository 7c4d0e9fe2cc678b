"""A server's sizes, ages and process counts, from the environment (``EXPLORER_*``)."""
from __future__ import annotations

import os
import tempfile
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


@dataclass(frozen=True)
class ServerSettings:
    """Server-wide sizes and ages, from the environment (``EXPLORER_*``) with reasoned defaults."""

    # Half the cores build the pages' code (a build is 50-300 ms); the other half compile
    # kernels to measure (NVRTC, 1-3 s each). 0: the server builds in its own process (one user
    # on a small machine: no process to start, no build copied between processes).
    build_workers: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_WORKERS",
                                                                max(1, (os.cpu_count() or 2) // 2), minimum=0))
    # A build with its highlighted views holds 0.2-5 MB (a Hopper or conv2d_async build 5 MB, measured);
    # the disk keeps every build, read back in a few ms, so a process keeps the recent ones.
    build_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_CACHE", 128))
    # Builds kept on disk for every app process of the machine (a setting one process built is
    # read, not built, by the others): ~130 KB each (up to 2.5 MB), ~1 GB at 4096. 0: none kept.
    build_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_BUILD_DIR", os.path.join(tempfile.gettempdir(), "explorer-builds")))
    build_disk_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_DISK_CACHE", 4096, minimum=0))
    # A measurement is a few hundred bytes; the cache bounds memory, not the age.
    measure_cache: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_CACHE", 4096))
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


def _env_flag(name: str, default: bool) -> bool:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise ExplorerError(f"{name} must be 1 (on) or 0 (off), not '{text}'.")
    return text == "1"


def _env_int(name: str, default: int, minimum: int = 1) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        kind = "a positive whole number" if minimum == 1 else f"a whole number from {minimum}"
        raise ExplorerError(f"{name} must be {kind}, not '{text}'.")
    return int(text)


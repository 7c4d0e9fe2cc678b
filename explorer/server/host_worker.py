"""A worker process of a class's worker host: Dask's worker started by ``python -m explorer worker
ADDRESS`` (``launcher.py``) with this module as its preload, so that TVM and the templates are imported
before its first call. It runs the pages' builds and the compiles that a server sends
(``engine.host_call``), so it is named and kept as those processes are: behind the pages where it
shares a machine with them, keeping few builds (the server keeps them on disk) and no highlighted
views (they go to the server with the build)."""
from __future__ import annotations

import os

from .. import schedules  # noqa: F401  the templates, imported before the first call
from ..build import keep_builds
from ..highlight import keep_highlights
from ..processes import name_process
from .pool import POOL_BUILDS
from .settings import COMPILE_NICENESS


def dask_setup(worker) -> None:
    """Dask calls it in each worker process as the process starts (``--preload``)."""
    name_process("host worker")
    os.nice(COMPILE_NICENESS)
    keep_builds(POOL_BUILDS)
    keep_highlights(0)

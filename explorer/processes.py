"""Names for the server's processes, so that a look at a loaded machine tells them apart."""
from __future__ import annotations

import ctypes

PR_SET_NAME = 15  # prctl option (linux/prctl.h)


def name_process(name: str) -> None:
    """Name this process ``name`` (Linux's ``prctl(PR_SET_NAME)``; 15 bytes are kept, enough for
    "diagnose worker"): what ``ps -o comm``, ``top`` and psutil's ``name()`` show. The pools' and
    the measuring worker's processes all run ``python -m tvm.exec.popen_worker`` and could not be
    told apart by their command lines."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # not Linux
        return
    prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def named_start(name: str, initializer, root: str) -> None:
    """A pool or worker process's start (TVM's ``PopenWorker`` initializer): its name, then ``initializer(root)``."""
    name_process(name)
    initializer(root)

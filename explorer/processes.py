"""Names for the server's processes, so that a look at a loaded machine tells them apart, and
the lines their logs of work get (the kernel runs, the measurements' stages, the compiles)."""
from __future__ import annotations

import ctypes
import logging

_unwritable: set[str] = set()  # logs already said to be unwritable

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


def log_line(path: str, line: str) -> None:
    """Append ``line`` to the log at ``path``; a log that cannot be written (a mistyped folder) is
    said once and skipped: it never stops the work it describes."""
    try:
        with open(path, "a") as log:
            log.write(line + "\n")
    except OSError as error:
        if path not in _unwritable:
            _unwritable.add(path)
            logging.getLogger(__name__).warning("The log %s cannot be written (%s); its lines are skipped.",
                                                path, error)

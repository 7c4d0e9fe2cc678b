"""Builds kept on disk, shared by a machine's app processes (and by the hosts of a class whose servers
share the folder): the process that builds a setting writes it, whole or not at all, under a key of its
content (``content_keys.py``), and every other one reads it instead of building it."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import socket
import threading
import time

import cloudpickle

try:
    import fcntl
except ImportError:  # Windows: no lock between processes; a compile process then builds for itself
    fcntl = None

from ..build import Build, Spec
from ..errors import ExplorerError
from ..targets import resolve_target
from .content_keys import content_key
from .settings import ServerSettings

log = logging.getLogger(__name__)

PRUNE_EVERY = 64  # a process counts the files on disk at its first write and every 64th after
_kept = 0



class BuildDisk:
    """The machine's folder of builds (``settings.build_dir``) as one server reads it: where a
    build's file is, and what a file holds."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self._since = 0  # files written before this (time.time_ns()) are not read: forget()

    def forget(self) -> None:
        """Stop reading the files written so far (they stay for the machine's other servers)."""
        self._since = time.time_ns()

    @functools.cached_property
    def folder(self) -> str | None:
        """The folder of builds kept on disk; None where none are kept, or where another user
        could write to it (reading a pickle runs code the file names)."""
        if not self.settings.build_disk_cache:
            return None
        return own_folder(self.settings.build_dir, "Builds")

    def path(self, spec: Spec, target: str) -> str | None:
        """Where ``spec``'s build for ``target`` is kept; None where none are kept."""
        if self.folder is None:
            return None
        # The resolved target: "auto" is another GPU on another machine sharing the folder.
        return os.path.join(self.folder, build_key(spec, str(resolve_target(target))) + ".pickle")

    def read(self, path: str | None) -> Build | ExplorerError | None:
        """The outcome another process kept at ``path``; None where there is none to read (a
        file cut short or of an older format is built again and replaced)."""
        return None if path is None else read(path, self._since)


def own_folder(directory: str, what: str) -> str | None:
    """``directory``, made if need be; None (and a warning saying ``what`` is not kept) where it cannot
    be, or where another user could write to it (reading a pickle runs the code it names)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
    except OSError as error:
        log.warning("%s are not kept on disk: %s", what, error)
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        log.warning("%s are not kept on disk: other users may write to %s.", what, directory)
        return None
    return directory


def read(path: str, since_ns: int = 0) -> Build | ExplorerError | None:
    """The outcome kept at ``path`` if it was written at ``since_ns`` or later; None where there is
    none to read (a file cut short or of an older format is built again and replaced)."""
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_mtime_ns < since_ns:
                return None
            kept = cloudpickle.loads(file.read())
    except FileNotFoundError:
        return None
    except Exception as error:  # truncated, or classes that changed: anything unpickling raises
        log.info("Build on disk %s not read: %r", path, error)
        return None
    if not isinstance(kept, Build | ExplorerError):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # the bound on disk removes the least recently used first
    return kept


@contextlib.contextmanager
def building(path: str | None):
    """Held while this process builds the setting to keep at ``path``: a process that wants the
    build meanwhile (a compile process, which a page asks before building) waits for the file
    (:func:`read_when_built`) instead of lowering the setting a second time."""
    if path is None or fcntl is None:
        yield
        return
    lock = path + ".lock"
    try:
        held = open(lock, "wb")
    except OSError:  # a folder that cannot be written: nothing to wait for
        yield
        return
    with held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.remove(lock)  # before the lock is let go: a later reader finds the build, not the lock


def read_when_built(path: str) -> Build | ExplorerError | None:
    """The build kept at ``path``, after waiting for a process that is building it (:func:`building`);
    None where it is neither kept nor being built."""
    kept = read(path)
    if kept is not None or fcntl is None:
        return kept
    try:
        lock = open(path + ".lock", "rb")
    except FileNotFoundError:  # nobody is building it (or its build just ended: read again)
        return read(path)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # the builder ends its build, or dies, and lets go
    return read(path)


def build_key(spec: Spec, target: str, versions: str | None = None, source: str | None = None) -> str:
    """The name of ``spec``'s build for the resolved ``target`` on disk: everything its outcome depends
    on (``versions``, ``source``: this host's, ``content_keys.py``)."""
    return content_key("build", spec, target, versions, source)


def read_bytes_when_built(path: str) -> bytes | None:
    """The file kept at ``path`` as it is (for a worker on another host, which reads it there), after
    waiting for a process that is building it; None where it is neither kept nor being built."""
    if read_when_built(path) is None:
        return None
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # removed by the bound on disk meanwhile: the worker builds it
        return None


def pickled(outcome: Build | ExplorerError) -> bytes:
    """``outcome`` as the disk keeps it and a build process sends it to the app process."""
    return cloudpickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)


def keep(outcome: Build | ExplorerError | bytes, path: str, at_most: int) -> None:
    """Write ``outcome`` (or its :func:`pickled` bytes) to ``path`` as the pool sends it back, whole
    or not at all (other processes may read it at once); past ``at_most`` files the oldest go."""
    global _kept
    try:
        write_whole(path, outcome if isinstance(outcome, bytes) else pickled(outcome))
    except OSError as error:  # a full disk: the build is still shown, only not kept
        log.warning("Build not kept on disk: %s", error)
        return
    if _kept % PRUNE_EVERY == 0:
        prune(os.path.dirname(path), at_most)
    _kept += 1


def write_whole(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a reader, in this process, another one or on
    another host sharing the folder, finds the old file, none or the new one, never part of it (a
    file of its own, then renamed over: atomic within one filesystem, NFS's too). Raises OSError."""
    partial = f"{path}.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with open(partial, "wb") as file:
            file.write(data)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


def prune(directory: str, at_most: int) -> None:
    """Past ``at_most`` files in ``directory``, remove the least recently written or read down
    to 90 % of it (one count of the folder, not one per write)."""
    try:
        with os.scandir(directory) as found:
            entries = [entry for entry in found if entry.name.endswith((".pickle", ".part"))]
    except OSError:
        return
    if len(entries) <= at_most:
        return

    def modified(entry: os.DirEntry) -> int:
        try:
            return entry.stat().st_mtime_ns
        except OSError:  # removed by another process meanwhile
            return 0

    for entry in sorted(entries, key=modified)[:len(entries) - at_most * 9 // 10]:
        with contextlib.suppress(OSError):
            os.remove(entry.path)


"""Measurements kept on disk, so that a server started later (or again) shows what an earlier one, or
``python -m explorer prepare``, measured instead of measuring it again.

One SQLite file (``measurements.sqlite`` in ``EXPLORER_MEASURE_DIR``), one row per setting, target,
GPU (its name as the driver gives it) and versions (TVM's and the explorer's source, as the builds on
disk are keyed: ``content_keys``): the setting and its measurement pickled, when it
was measured and by whom ("server" or "prepare"). Only what a page shows as the setting's latency is
kept: a full measurement with the server's own budget on this machine's GPU (a quick one is measured
again in full, a sweep's has a budget of its own, a remote GPU's is another machine's); errors are not
kept (a crash under load may not be the kernel's). A row older than the server's age for measurements
(``EXPLORER_MEASURE_MAX_AGE_S``) is not read: the setting is measured again, as in memory.

The file's folder must be this user's alone (a pickle read runs the code it names), as the builds'.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import sqlite3
import threading
import time
from dataclasses import dataclass

try:
    import fcntl
except ImportError:  # Windows: no lock between processes
    fcntl = None

from ..build import Spec
from . import content_keys
from .build_disk import own_folder

log = logging.getLogger(__name__)

FILE = "measurements.sqlite"
GPU_LOCK = "gpu.lock"  # held shared by each server that measures, exclusively by a prepare (gpu_turn)
PRUNE_AFTER_S = 7 * 24 * 3600  # rows older than a week are deleted when a store is opened
SERVER, PREPARE = "server", "prepare"  # who measured a row
_SCHEMA = """CREATE TABLE IF NOT EXISTS measurements (
    key TEXT PRIMARY KEY, device TEXT NOT NULL, versions TEXT NOT NULL, target TEXT NOT NULL,
    template TEXT NOT NULL, measured_at REAL NOT NULL, measured_by TEXT NOT NULL, spec BLOB NOT NULL,
    result BLOB NOT NULL)"""


def versions() -> str:
    """What a measurement kept on disk depends on beyond its setting: the versions a build depends on
    (TVM, its ffi, NVRTC) and the explorer's source, as the builds on disk are keyed."""
    return f"{content_keys.versions()}|{content_keys.source_fingerprint()}"


class GPUBusy(Exception):
    """Another process that keeps its measurements in the same folder holds the GPU the other way."""


def gpu_turn(directory: str, alone: bool):
    """This machine's GPU taken in turn with the other processes that keep their measurements in
    ``directory``: shared by the servers (``alone`` False), alone by a prepare (True), so that no two of them
    time kernels at once. The open lock file (the turn lasts while it is open), None where no turn can be
    taken (no folder, no ``fcntl``); raises GPUBusy where another holds it the other way."""
    if not directory or fcntl is None or own_folder(directory, "Measurements") is None:
        return None
    held = open(os.path.join(directory, GPU_LOCK), "a")
    try:
        fcntl.flock(held, (fcntl.LOCK_EX if alone else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        held.close()
        raise GPUBusy(directory) from None
    return held


@dataclass(frozen=True)
class Kept:
    """A measurement read from the disk."""

    spec: Spec
    target: str
    result: object
    measured_at: float
    measured_by: str


class MeasurementStore:
    """The measurements of one GPU (``device``, e.g. "NVIDIA H200") kept in ``directory``, read while
    younger than ``max_age_s``. Safe to use from several threads; several processes may share the file
    (SQLite's own locking: a prepare writing while a server reads)."""

    def __init__(self, directory: str, device: str, max_age_s: float):
        self.path = os.path.join(directory, FILE)
        self.device, self.max_age_s = device, max_age_s
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer
            self._db.execute("PRAGMA synchronous=NORMAL")  # a crash may lose the last rows, never the file
            self._db.execute(_SCHEMA)
            # A row no server would read again (older than any sensible age) goes: the file stays small.
            self._db.execute("DELETE FROM measurements WHERE measured_at < ?", (time.time() - PRUNE_AFTER_S,))

    @classmethod
    def open(cls, directory: str, device: str, max_age_s: float) -> MeasurementStore | None:
        """The store in ``directory`` (made if need be), or None where none can be kept there (the
        server then keeps its measurements in memory only, and says why in its log)."""
        if not directory or own_folder(directory, "Measurements") is None:
            return None
        try:
            return cls(directory, device, max_age_s)
        except sqlite3.Error as error:
            log.warning("Measurements are not kept on disk (%s): %s", os.path.join(directory, FILE), error)
            return None

    def key(self, spec: Spec, target: str) -> str:
        return hashlib.sha256(f"{versions()}|{self.device}|{target}|{spec!r}".encode()).hexdigest()

    def put(self, spec: Spec, target: str, result, measured_at: float, measured_by: str = SERVER) -> None:
        """Keep ``result`` (replacing the setting's older one); a full disk or a locked file only logs."""
        row = (self.key(spec, target), self.device, versions(), target, spec.template, measured_at, measured_by,
               pickle.dumps(spec), pickle.dumps(result))
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        except sqlite3.Error as error:
            log.warning("Measurement not kept on disk: %s", error)

    def fresh(self, limit: int | None = None, now: float | None = None) -> list[Kept]:
        """This GPU's and these versions' measurements younger than ``max_age_s``, newest first (at most
        ``limit``); a row that no longer unpickles (a class that changed) is left out."""
        since = (now or time.time()) - self.max_age_s
        try:
            with self._lock:
                rows = self._db.execute(
                    "SELECT spec, target, result, measured_at, measured_by FROM measurements WHERE device = ? AND "
                    "versions = ? AND measured_at >= ? ORDER BY measured_at DESC LIMIT ?",
                    (self.device, versions(), since, -1 if limit is None else limit)).fetchall()
        except sqlite3.Error as error:
            log.warning("Measurements on disk not read: %s", error)
            return []
        kept = []
        for spec, target, result, measured_at, measured_by in rows:
            try:
                kept.append(Kept(pickle.loads(spec), target, pickle.loads(result), measured_at, measured_by))
            except Exception as error:  # anything unpickling raises
                log.info("Measurement on disk not read: %r", error)
        return kept

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.close()


def describe(loaded: list[Kept]) -> dict:
    """What a server read from the disk at its start, for its Device page (:func:`sentence`)."""
    if not loaded:
        return {"loaded": 0}
    times = [kept.measured_at for kept in loaded]
    return {"loaded": len(loaded), "prepared": sum(kept.measured_by == PREPARE for kept in loaded),
            "oldest": min(times), "newest": max(times)}

"""The server's diagnoses (explorer.analysis.diagnosis), once per setting for every session.

A diagnosis builds and analyses every neighbouring setting (seconds of CPU): it runs whole
in a process of its own (:func:`diagnosing_process`), so the app's one process, which runs every
student's page, only receives the result, and the pages' builds never queue behind it. One
runs at a time; a setting the class has moved on from is dropped before it starts.

Once per setting: where the setting is being measured, its diagnosis waits for the measurement
(at most ``MEASURE_WAIT_S``) and is placed on it; a later measurement of the setting (the full
one after a quick one, or one after the results' age) does not diagnose it again. (It was
diagnosed up to three times: before its measurement, on the quick one, on the full one.) On a
server of several app processes each has its diagnoses, and they share them on disk
(:meth:`Diagnoses.share`, a folder of that server's): the first process to diagnose a setting
does, the others read it (each of four app processes diagnosed every lesson step). Where measurements
are kept on disk (``EXPLORER_MEASURE_DIR``), so are the diagnoses placed on them (:func:`kept_folder`),
for every process of the server and the servers after it: what ``python -m explorer prepare``
diagnosed is read, not diagnosed again.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..analysis.diagnosis import Diagnosis, diagnose, diagnose_spec, refusal
from ..analysis.sass import compile_binary
from ..analysis.tiling import keep_tilings
from ..build import Build, Spec, keep_builds
from ..errors import ExplorerError
from .build_disk import BuildDisk, own_folder, prune, read_when_built
from .measure_store import versions
from .pool import ProcessPool, source_only_process_init
from .settings import DIAGNOSE_NICENESS, ServerSettings

KEEP = 256  # diagnoses kept for the whole server (a few KB each)
KEPT_ON_DISK = 4096  # diagnoses kept beyond one server (kept_folder), as many as builds on disk by default
WAITING = 4  # diagnoses waiting to start; older ones (settings since left) are dropped
DIAGNOSIS_TILINGS = 8  # tilings the diagnosing process keeps (explorer.analysis.tiling's cache)
NOT_DIAGNOSED = "This server does not diagnose settings (EXPLORER_DIAGNOSE=0)."
# A setting's measurement that has not come after this long (a long queue, a kernel that crashed)
# is not waited for: the diagnosis is static.
MEASURE_WAIT_S = 15.0
# Another app process's diagnosis of a setting, waited for this long before diagnosing it here (it
# takes seconds; a process that died while diagnosing leaves its claim behind).
SHARED_WAIT_S = 60.0
SHARED_POLL_S = 0.2


def diagnosing_process(settings: ServerSettings, workers: int = 1) -> ProcessPool:
    """The server's diagnosing process (started on its first diagnosis): a process of its own, as a
    diagnosis builds dozens of settings and the pages' builds must not queue behind it (a 2-core
    machine has one build process). Each diagnosis frees most of what its builds allocated: the
    heap's free pages go back. (A prepare diagnoses in ``workers`` such processes.)"""
    return ProcessPool(settings, workers, _diagnosing_process_init, release_heap=True, name="diagnose worker")


def kept_folder(settings: ServerSettings) -> str | None:
    """Where diagnoses are kept beyond one server (beside the measurements kept on disk, which they are
    placed on), for the next server and what a prepare diagnosed; None where none are kept."""
    if not settings.diagnose or not settings.measure_dir or own_folder(settings.measure_dir, "Diagnoses") is None:
        return None  # (a pickle read runs the code it names: only this user's folder is read)
    return os.path.join(settings.measure_dir, "diagnoses")


def kept_key(spec: Spec, target: str, device: str | None) -> tuple:
    """A diagnosis's key in the kept folder: what it depends on beyond the setting (the versions; the GPU
    whose measurement it is placed on, None for a static one)."""
    return versions(), device, spec, target


def _diagnosing_process_init(root: str) -> None:
    """The operating system runs the pages' builds first where cores are short. It keeps the builds
    the machine's memory plan gives it (``ServerSettings.diagnose_builds``: a student's next setting is
    often a neighbour of the last, and their neighbours overlap: those are then built from the cache) but
    few tilings: a diagnosis reads a few numbers from each neighbour's, which takes milliseconds to make
    again, and 64 of them held ~150 MiB (bench/worker_memory.py)."""
    source_only_process_init(root)
    os.nice(DIAGNOSE_NICENESS)
    keep_tilings(DIAGNOSIS_TILINGS)
    keep_builds(ServerSettings().diagnose_builds)


def diagnose_in(process: ProcessPool, spec: Spec, target: str, ceilings=None, measured_us: float | None = None, *,
                disk: BuildDisk | None = None):
    """The diagnosis (:func:`diagnose_in_process`'s) computed in ``process``, from the page's build
    kept on ``disk`` where it is there."""
    kept_at = disk.path(spec, target) if disk is not None else None
    return process.run(diagnose_in_process, spec, target, ceilings, measured_us, kept_at,
                       doing="Diagnosing this setting")


def not_diagnosed(*args) -> ExplorerError:
    """What a server that does not diagnose (EXPLORER_DIAGNOSE=0) answers instead."""
    return ExplorerError(NOT_DIAGNOSED)


def diagnose_in_process(spec: Spec, target: str, ceilings=None, measured_us: float | None = None,
                        kept_at: str | None = None):
    """In the diagnosing process: the diagnosis of ``spec``, or the ExplorerError it raised, as a value.
    The setting's build is the page's, kept at ``kept_at`` by a build process, where it is there (or
    being made): it is not scheduled and lowered a second time."""
    try:
        kept = read_when_built(kept_at) if kept_at is not None else None
        if isinstance(kept, ExplorerError):
            return refusal(spec, kept)
        if isinstance(kept, Build):
            try:
                binary = compile_binary(kept)
            except ExplorerError as error:
                return refusal(spec, error)
            return diagnose(kept, binary=binary, ceilings=ceilings, measured_us=measured_us)
        return diagnose_spec(spec, target, ceilings=ceilings, measured_us=measured_us)
    except ExplorerError as error:
        return error


class Diagnoses:
    """Diagnoses by (spec, target): ``run(spec, target, ceilings, measured_us)`` computes one
    (:func:`diagnose_in_process` in the diagnosing process, or a stand-in in tests)."""

    def __init__(self, run: Callable[..., Diagnosis | ExplorerError]):
        self._run = run
        self._jobs: OrderedDict[tuple, Future] = OrderedDict()
        self._measuring: OrderedDict[tuple, float] = OrderedDict()  # when each waited for its measurement first
        self._shared: str | None = None  # the folder the server's app processes share their diagnoses in
        self._max_age_s: float | None = None  # where that folder outlives the server: how old a diagnosis is read
        self._asked: dict[Future, tuple[int, float]] = {}  # each future's turn and when it was asked for
        self._turns = itertools.count()
        self._lock = threading.Lock()
        self._one_at_a_time = ThreadPoolExecutor(1, thread_name_prefix="diagnosis")

    def get(self, spec: Spec, target: str, measured=None, measuring: bool = False) -> Future | None:
        """The diagnosis of ``spec`` (placed on ``measured``'s roofline, a correct measurement,
        where given): started once and shared; the future's result raises an ExplorerError
        for a setting that cannot be built. None while ``measuring`` (the setting's measurement
        is on its way) and not for longer than MEASURE_WAIT_S: the diagnosis waits for it."""
        measured_us = measured.median_us if measured is not None else None
        device = getattr(measured, "device", None)
        key = (spec, target)
        with self._lock:
            future = self._jobs.get(key)
            if future is None or future.cancelled():
                if measured is None and measuring and not self._waited_enough(key):
                    return None
                self._measuring.pop(key, None)
                ceilings = measured.ceilings if measured is not None else None
                future = self._jobs[key] = self._one_at_a_time.submit(self._diagnose, spec, target, ceilings,
                                                                      measured_us, device)
                self._asked[future] = (next(self._turns), time.monotonic())
                while len(self._jobs) > KEEP:
                    self._asked.pop(self._jobs.popitem(last=False)[1], None)
                waiting = [f for f in self._jobs.values() if not f.running() and not f.done()]
                for stale in waiting[:-WAITING]:
                    stale.cancel()  # asked for again, it starts again
            self._jobs.move_to_end(key)
            return future

    def _waited_enough(self, key: tuple) -> bool:
        now = time.monotonic()
        first = self._measuring.setdefault(key, now)
        self._measuring.move_to_end(key)
        while len(self._measuring) > KEEP:
            self._measuring.popitem(last=False)
        return now - first >= MEASURE_WAIT_S

    def wait(self, future: Future) -> tuple[int, float]:
        """(diagnoses ahead of ``future``, the one running included; seconds since it was asked for)."""
        with self._lock:
            turn, asked = self._asked.get(future, (0, time.monotonic()))
            ahead = sum(1 for other, (t, _) in self._asked.items() if t < turn and not other.done())
        return ahead, time.monotonic() - asked

    def share(self, directory: str, max_age_s: float | None = None) -> None:
        """Share the diagnoses with the server's other app processes through ``directory`` (a
        folder of that server's, made here if need be; only this user's processes write there).
        ``max_age_s``: a folder kept beyond the server (:func:`kept_folder`): its diagnoses, those of
        earlier servers and of a prepare too, are read while younger than this (as the measurements
        they are placed on), keyed by :func:`kept_key`; past KEPT_ON_DISK files the least recent go."""
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._shared, self._max_age_s = directory, max_age_s
        if max_age_s is not None:
            prune(directory, KEPT_ON_DISK)

    def _diagnose(self, spec: Spec, target: str, ceilings, measured_us, device=None) -> Diagnosis:
        run = lambda: self._run(spec, target, ceilings, measured_us)  # noqa: E731
        if self._shared is None:
            outcome = run()
        elif self._max_age_s is None:
            outcome = shared(self._shared, (spec, target), run)
        else:
            outcome = shared(self._shared, kept_key(spec, target, device), run, self._max_age_s)
        if isinstance(outcome, ExplorerError):
            raise outcome
        return outcome

    def close(self, wait: bool = False) -> None:
        """Start no more diagnoses; ``wait``: until the one running has ended (its process stopped first)."""
        self._one_at_a_time.shutdown(wait=wait, cancel_futures=True)


def shared_path(directory: str, key: tuple) -> str:
    return os.path.join(directory, hashlib.sha256(repr(key).encode()).hexdigest() + ".pickle")


def fresh(path: str, max_age_s: float | None) -> bool:
    """Whether ``path`` is there and (with ``max_age_s``) younger than that."""
    try:
        modified = os.stat(path).st_mtime
    except FileNotFoundError:
        return False
    return max_age_s is None or time.time() - modified <= max_age_s


def shared(directory: str, key: tuple, compute: Callable[[], object], max_age_s: float | None = None):
    """``compute()``'s outcome for ``key``, computed once by the processes that share ``directory``:
    read from its file where one wrote it (younger than ``max_age_s``, where given); else claimed (a lock
    file) and computed here, or, while another process holds the claim, waited for (SHARED_WAIT_S at
    most, then computed here)."""
    path = shared_path(directory, key)
    claim = path + ".lock"
    deadline = time.monotonic() + SHARED_WAIT_S
    while True:
        if fresh(path, max_age_s):
            return _read(path)
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            if time.monotonic() < deadline:
                time.sleep(SHARED_POLL_S)
                continue
            return compute()
        try:
            if fresh(path, max_age_s):  # written by a process whose claim ended between the look above and this one
                return _read(path)
            outcome = compute()
            partial = f"{path}.{os.getpid()}"
            with open(partial, "wb") as file:
                pickle.dump(outcome, file)
            os.replace(partial, path)  # whole or absent to the other processes
            return outcome
        finally:
            os.unlink(claim)


def _read(path: str):
    with open(path, "rb") as file:
        return pickle.load(file)  # written by this server's own processes

"""The server's diagnoses (explorer.analysis.diagnosis), once per setting for every session.

A diagnosis builds and analyses every neighbouring setting (seconds of CPU): it runs whole
in a process of its own (:func:`diagnosing_process`), so the app's one process, which runs every
student's page, only receives the result, and the pages' builds never queue behind it. One
runs at a time; a setting the class has moved on from is dropped before it starts.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..analysis.diagnosis import Diagnosis, diagnose_spec
from ..analysis.tiling import keep_tilings
from ..build import Spec
from ..errors import ExplorerError
from .pool import ProcessPool, source_only_process_init
from .settings import DIAGNOSE_NICENESS, ServerSettings

KEEP = 256  # diagnoses kept for the whole server (a few KB each)
WAITING = 4  # diagnoses waiting to start; older ones (settings since left) are dropped
DIAGNOSIS_TILINGS = 8  # tilings the diagnosing process keeps (explorer.analysis.tiling's cache)
NOT_DIAGNOSED = "This server does not diagnose settings (EXPLORER_DIAGNOSE=0)."


def diagnosing_process(settings: ServerSettings) -> ProcessPool:
    """The server's diagnosing process (started on its first diagnosis): a process of its own, as a
    diagnosis builds dozens of settings and the pages' builds must not queue behind it (a 2-core
    machine has one build process). Each diagnosis frees most of what its builds allocated: the
    heap's free pages go back."""
    return ProcessPool(settings, 1, _diagnosing_process_init, release_heap=True, name="diagnose worker")


def _diagnosing_process_init(root: str) -> None:
    """The operating system runs the pages' builds first where cores are short. It keeps
    explorer.build's 128 builds (a setting is diagnosed again once measured, and its neighbours are
    then built from the cache) but few tilings: a diagnosis reads a few numbers from each
    neighbour's, which takes milliseconds to make again, and 64 of them held ~150 MiB
    (bench/worker_memory.py)."""
    source_only_process_init(root)
    os.nice(DIAGNOSE_NICENESS)
    keep_tilings(DIAGNOSIS_TILINGS)


def diagnose_in(process: ProcessPool, *args):
    """The diagnosis of ``args`` (:func:`diagnose_in_process`'s) computed in ``process``."""
    return process.run(diagnose_in_process, *args, doing="Diagnosing this setting")


def not_diagnosed(*args) -> ExplorerError:
    """What a server that does not diagnose (EXPLORER_DIAGNOSE=0) answers instead."""
    return ExplorerError(NOT_DIAGNOSED)


def diagnose_in_process(spec: Spec, target: str, ceilings=None, measured_us: float | None = None):
    """In the diagnosing process: the diagnosis of ``spec``, or the ExplorerError it raised, as a value."""
    try:
        return diagnose_spec(spec, target, ceilings=ceilings, measured_us=measured_us)
    except ExplorerError as error:
        return error


class Diagnoses:
    """Diagnoses by (spec, target, measured µs): ``run(spec, target, ceilings, measured_us)``
    computes one (:func:`diagnose_in_process` in the diagnosing process, or a stand-in in tests)."""

    def __init__(self, run: Callable[..., Diagnosis | ExplorerError]):
        self._run = run
        self._jobs: OrderedDict[tuple, Future] = OrderedDict()
        self._asked: dict[Future, tuple[int, float]] = {}  # each future's turn and when it was asked for
        self._turns = itertools.count()
        self._lock = threading.Lock()
        self._one_at_a_time = ThreadPoolExecutor(1, thread_name_prefix="diagnosis")

    def get(self, spec: Spec, target: str, measured=None) -> Future:
        """The diagnosis of ``spec`` (placed on ``measured``'s roofline, a correct measurement,
        where given): started once and shared; the future's result raises an ExplorerError
        for a setting that cannot be built."""
        measured_us = measured.median_us if measured is not None else None
        key = (spec, target, measured_us)
        with self._lock:
            future = self._jobs.get(key)
            if future is None or future.cancelled():
                ceilings = measured.ceilings if measured is not None else None
                future = self._jobs[key] = self._one_at_a_time.submit(self._diagnose, spec, target, ceilings,
                                                                      measured_us)
                self._asked[future] = (next(self._turns), time.monotonic())
                while len(self._jobs) > KEEP:
                    self._asked.pop(self._jobs.popitem(last=False)[1], None)
                waiting = [f for f in self._jobs.values() if not f.running() and not f.done()]
                for stale in waiting[:-WAITING]:
                    stale.cancel()  # asked for again, it starts again
            self._jobs.move_to_end(key)
            return future

    def wait(self, future: Future) -> tuple[int, float]:
        """(diagnoses ahead of ``future``, the one running included; seconds since it was asked for)."""
        with self._lock:
            turn, asked = self._asked.get(future, (0, time.monotonic()))
            ahead = sum(1 for other, (t, _) in self._asked.items() if t < turn and not other.done())
        return ahead, time.monotonic() - asked

    def _diagnose(self, spec: Spec, target: str, ceilings, measured_us) -> Diagnosis:
        outcome = self._run(spec, target, ceilings, measured_us)
        if isinstance(outcome, ExplorerError):
            raise outcome
        return outcome

    def close(self, wait: bool = False) -> None:
        """Start no more diagnoses; ``wait``: until the one running has ended (its process stopped first)."""
        self._one_at_a_time.shutdown(wait=wait, cancel_futures=True)

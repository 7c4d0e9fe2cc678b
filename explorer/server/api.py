"""The class server's one API: what the app (and a bench script or a test) asks of the server.

:class:`Server` is what one process shares between all its sessions: the pages' half (their
builds in the build processes, the diagnoses in the diagnosing process, the CPU of each page run,
the lesson steps built ahead) and one :class:`~.measuring.Measuring` (the measurements, PyTorch's
baselines, the roofline's ceilings and the GPU's warm-up), in this process or over the socket to
the measuring service (:func:`open_server` chooses). The app reaches the server through this
module only (tests/test_imports.py), and none of the server's parts.

Its methods: :meth:`~Server.build`, :meth:`~Server.diagnosis` and :meth:`~Server.diagnosis_queue`,
:meth:`~Server.record_page_run`; :meth:`~Server.request`, :meth:`~Server.measure_now`,
:meth:`~Server.measurer` (a sweep's), :meth:`~Server.result`, :meth:`~Server.position`,
:meth:`~Server.baseline`, :meth:`~Server.baseline_now`, :meth:`~Server.ceilings`,
:meth:`~Server.warm_up_state`, :meth:`~Server.gpu_name`, :attr:`~Server.measure_max_age_s`,
:meth:`~Server.stats`; :meth:`~Server.start` and :meth:`~Server.close`.
"""
from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from ..build import Build, Spec
from ..errors import ExplorerError
from ..measure import MeasureSettings, sweep_measurer
from .builds import BuildService
from .diagnosing import Diagnoses, diagnose_in, diagnosing_process, kept_folder, not_diagnosed
from .in_process import CLOSE_WAIT_S, POLL_S, MeasuringInProcess
from .launcher import APP_SHARE, MEASURING_ADDRESS, MEASURING_KEY
from .measuring import Measuring
from .over_socket import UNREACHABLE, MeasuringOverSocket
from .page_runs import PageRuns
from .prepare import prepared_sentence, read_manifest
from .settings import ServerSettings, this_machines_plan
from .warm_up import WarmUp, warm_up_gpu_early

__all__ = ["UNREACHABLE", "Server", "open_server", "prepared_sentence", "this_machines_plan", "warm_up_early"]


class Server:
    """Everything one process of a class server shares between its sessions. ``measuring``: where
    its measurements are made (default: in this process); ``share_diagnoses``: a folder where the
    app processes of one server share their diagnoses (one diagnosis per setting for the server)."""

    def __init__(self, settings: ServerSettings | None = None, measuring: Measuring | None = None,
                 share_diagnoses: str | None = None):
        self._settings = settings or ServerSettings()
        self._builds = BuildService(self._settings, here_until_ready=True)
        self._page_runs = PageRuns()
        self._diagnosing = diagnosing_process(self._settings)
        diagnose = (functools.partial(diagnose_in, self._diagnosing, disk=self._builds.disk)
                    if self._settings.diagnose else not_diagnosed)
        self._diagnoses = Diagnoses(diagnose)
        kept = kept_folder(self._settings)
        if kept is not None:  # beyond this server, beside the measurements they are placed on (all its processes')
            self._diagnoses.share(kept, self._settings.measure_max_age_s)
        elif share_diagnoses is not None:
            self._diagnoses.share(share_diagnoses)
        self._measuring = measuring if measuring is not None else MeasuringInProcess(self._settings)
        self._steps = WarmUp()  # the pages' steps of the warm-up (the build processes, the steps built ahead)
        self._closing = threading.Event()
        self._starting: threading.Thread | None = None

    # -- the pages ----------------------------------------------------------------------------

    def build(self, spec: Spec, target: str) -> Build:
        """``spec`` built for ``target`` once for the whole server (raises ExplorerError)."""
        return self._builds.build(spec, target)

    def diagnosis(self, spec: Spec, target: str, measuring: bool = False) -> Future | None:
        """The server's diagnosis of ``spec`` for ``target``: started once, shared by every session;
        the future's result raises ExplorerError for a setting that cannot be built. ``measuring``:
        the asking session measures the setting; then, once the warm-up has ended, the diagnosis
        waits for the measurement (None meanwhile, MEASURE_WAIT_S at most) and is placed on the
        measured roofline (explorer.server.diagnosing)."""
        measured = self._measuring.result(spec, target)
        return self._diagnoses.get(spec, target, measured if getattr(measured, "correct", False) else None,
                                   measuring and measured is None and self._measuring.warm_up_state().done)

    def diagnosis_queue(self, future: Future) -> tuple[int, float]:
        """(diagnoses ahead of ``future``, the one running included; seconds since it was asked for)."""
        return self._diagnoses.wait(future)

    def forget_builds(self) -> None:
        """Build every setting again from now on (bench/build_latency.py times builds from nothing)."""
        self._builds.forget()

    def record_page_run(self, cpu_s: float) -> None:
        """One page run's CPU seconds (its script thread), for the Device page."""
        self._page_runs.record(cpu_s)

    # -- measuring ----------------------------------------------------------------------------

    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False):
        """Ask for ``spec``'s measurement for ``session``; its job at once (:meth:`Measuring.request`)."""
        return self._measuring.request(session, spec, target, remote, background=background)

    def measure_now(self, spec: Spec, target: str = "auto", remote=None, timeout: float | None = None,
                    on_wait=None, settings: MeasureSettings | None = None):
        """``spec``'s measurement, waiting for it (:meth:`Measuring.measure_now`)."""
        return self._measuring.measure_now(spec, target, remote, timeout, on_wait, settings)

    def measurer(self, target: str = "auto", remote=None):
        """A sweep's ``spec -> median µs`` through this server's queue, measured as ``python -m explorer
        sweep`` measures (explorer.measure.sweep_measurer), or None where nothing can measure (no GPU
        and no tracker)."""
        if remote is None and self.gpu_name() is None:
            return None
        return sweep_measurer(self._measuring.measure_now, target=target, remote=remote)

    def result(self, spec: Spec, target: str, remote=None):
        """The measurement of ``spec`` already taken, or None; asks for nothing."""
        return self._measuring.result(spec, target, remote)

    def position(self, job) -> int | None:
        """Measurements ahead of ``job`` on its device (0: being measured; None: done or compiling)."""
        return self._measuring.position(job)

    def baseline(self, workload):
        """PyTorch's time for ``workload`` when known, else None (measured once, in the background)."""
        return self._measuring.baseline(workload)

    def baseline_now(self, workload):
        """PyTorch's measurement of ``workload``, waiting for it; raises MeasureError where it cannot run."""
        return self._measuring.baseline_now(workload)

    def ceilings(self):
        """The roofline's ceilings of the latest measurement that carries some, else the local GPU's, else None."""
        return self._measuring.ceilings()

    def warm_up_state(self) -> WarmUp:
        """What the warm-up has done so far: the GPU's (``done`` once it has ended) and the pages' steps."""
        return self._measuring.warm_up_state().with_steps_of(self._steps)

    def gpu_name(self) -> str | None:
        """The local GPU's name once the warm-up found one, else None."""
        return self._measuring.gpu_name()

    @property
    def measure_max_age_s(self) -> int:
        """After this a setting is measured again."""
        return self._settings.measure_max_age_s

    def stats(self) -> dict:
        """"builds" and "pages" of this process; "measurements" (with what was "stored" on disk before the
        server started), "queues" and "baselines" where they can be asked (not while the measuring service
        restarts); "prepared": the last prepare's summary on this machine (None: none for this version)."""
        return {**self._measuring.stats(), "builds": self._builds.stats(), "pages": self._page_runs.stats(),
                "prepared": read_manifest(self._settings)}

    # -- starting and stopping ------------------------------------------------------------------

    def start(self, first: Spec | None = None, target: str = "auto", build_ahead: tuple[Spec, ...] = (),
              measure_ahead: tuple[Spec, ...] = ()) -> None:
        """Warm up in the background; then, on a GPU, build this process's share of ``build_ahead``
        (the builds on disk serve the other app processes' shares) and measure ``measure_ahead`` (the
        lesson steps a class opens by link) while no student waits for the GPU."""
        self._measuring.start(first, target, build_ahead or measure_ahead)
        self._starting = threading.Thread(target=self._start, args=(target, build_ahead, measure_ahead),
                                          name="server-start", daemon=True)
        self._starting.start()

    def _start(self, target: str, build_ahead: tuple[Spec, ...] = (), measure_ahead: tuple[Spec, ...] = ()) -> None:
        self._builds.start()  # beside the GPU's warm-up: the first page's latency waits only for the worker
        if self._builds.workers:  # none (EXPLORER_BUILD_WORKERS=0): the pages are built in this process
            self._steps.step("build processes")
        while not self._measuring.warm_up_state().done:
            if self._closing.wait(POLL_S):
                return
        if self._measuring.warm_up_state().gpu:  # a class's server; a laptop without a GPU keeps its cores
            number, count = (int(part) for part in os.environ.get(APP_SHARE, "0/1").split("/"))
            self._build_ahead(build_ahead[number::count], target)
            if not self._closing.is_set():
                self._measuring.measure_ahead(measure_ahead, target)

    def _build_ahead(self, specs: tuple[Spec, ...], target: str) -> None:
        """Build ``specs`` on half the build processes: a link then shows its code at once, and
        the students arriving meanwhile keep the other half (the pool serves in order)."""
        def built(spec: Spec) -> bool:
            if self._closing.is_set():
                return False
            try:
                self._builds.build(spec, target)
            except ExplorerError:
                return False
            return True

        if specs:
            with ThreadPoolExecutor(max(1, self._settings.build_workers // 2)) as threads:
                count = sum(threads.map(built, specs))
            if not self._closing.is_set():
                self._steps.step(f"{count} lesson steps built")

    def close(self) -> None:
        """End the server's processes and threads: when it returns none of them runs any more."""
        self._closing.set()
        self._measuring.close()  # first: the start thread may wait for its measurements
        self._diagnoses.close()
        self._diagnosing.close()  # a diagnosis running there ends with its process
        self._builds.close()
        self._diagnoses.close(wait=True)
        if self._starting is not None and self._starting is not threading.current_thread():
            self._starting.join(CLOSE_WAIT_S)


def open_server(settings: ServerSettings | None = None) -> Server:
    """This process's server: measuring over the socket to the measuring service where the launcher
    started one (an app process of a server of several, ``EXPLORER_MEASURING``), else in this process."""
    settings = settings or ServerSettings()
    address = os.environ.get(MEASURING_ADDRESS)
    if address:  # one diagnosis per setting for the whole server: its app processes share them
        return Server(settings, MeasuringOverSocket(address, bytes.fromhex(os.environ[MEASURING_KEY])),
                      share_diagnoses=os.path.join(os.path.dirname(address), "diagnoses"))
    return Server(settings)


def warm_up_early(first: Spec | None) -> None:
    """Start warming this machine's GPU in the background before any page asks (the app's launch,
    before its port opens), unless a measuring service measures for this process: it warms its own."""
    if not os.environ.get(MEASURING_ADDRESS):
        threading.Thread(target=warm_up_gpu_early, args=(first,), name="gpu-warm-up", daemon=True).start()

"""The pages' builds, once per (spec, target) for the whole server, in a pool of processes
(so compiles of different settings run on all cores instead of one after another under one
GIL), read from the machine's folder of builds before they are built. The pool's processes
never compile CUDA binaries (``TVM_COMPILE_FORCE_FALLBACK``): the one binary compile of a
kernel happens in the compile pool or the measuring worker. Where the server is given a cluster
(``--workers``), the builds are made by the worker hosts and kept on disk here."""
from __future__ import annotations

import dataclasses
import threading
import time

import cloudpickle

from ..build import Build, Spec, build, keep_builds
from ..errors import ExplorerError
from ..highlight import FIRST_VIEWS, VIEW_LANGUAGES, keep_highlights, texts_html, views_html, views_texts
from ..targets import resolve_target
from .build_disk import BuildDisk, build_key, building, keep, pickled, read
from .pool import POOL_BUILDS, ProcessPool, source_only_process_init
from .settings import ServerSettings
from .single_flight import SingleFlight


class BuildService(ProcessPool):
    """Builds for the whole server: once per (spec, target), in parallel processes; once per
    machine where the app processes share a folder of builds on disk (``build_dir``)."""

    def __init__(self, settings: ServerSettings | None = None, *, here_until_ready: bool = False):
        settings = settings or ServerSettings()
        super().__init__(settings, settings.build_workers, _build_pool_init, name="build worker", priority=1)
        self._cache: SingleFlight[tuple, Build] = SingleFlight(self.settings.build_cache)
        # A server's processes take seconds to start (each imports TVM, all at once on a busy
        # machine); until :meth:`start` has them ready, this process builds what a page asks
        # for itself, one build at a time, so the first page never waits for them. With no
        # build processes (build_workers 0) it always does.
        self._here_until_ready = here_until_ready or self.workers == 0
        self._here_lock = threading.Lock()
        self.built_here = 0
        self.read_from_disk = 0
        # Calls in the processes now (pages' builds and background highlighting), and the highlighting
        # left to the pages because every process was busy.
        self._busy = 0
        self._busy_lock = threading.Lock()
        self.highlights_left_to_pages = 0
        self.disk = BuildDisk(self.settings)

    def build(self, spec: Spec, target: str) -> Build:
        """The build of ``spec`` for the target named ``target`` (raises ExplorerError)."""
        return self._cache.get((spec, target), lambda: self._build(spec, target))

    def forget(self) -> None:
        """Forget every build: the next request for each is built again (bench/build_latency.py).
        The files on disk stay for the machine's other servers; this one no longer reads them."""
        self._cache.clear()
        self.disk.forget()

    def start(self, warm_specs: tuple[Spec, ...] = (), target: str = "auto") -> None:
        if self.workers:  # else never ready: every build is made in this process
            super().start(warm_specs, target)

    def _build(self, spec: Spec, target: str) -> Build:
        path = self.disk.path(spec, target)
        start = time.perf_counter()
        kept = self.disk.read(path)
        if kept is not None:
            return self._kept_build(kept, start)
        # One build at a time here (the GIL runs one anyway); a build waiting for its turn
        # goes to the processes as soon as they are ready.
        while self._here_until_ready and not self.ready.is_set():
            if self._here_lock.acquire(timeout=0.05):
                try:
                    return self._build_here(spec, target, path)
                finally:
                    self._here_lock.release()
        return self._build_in_pool(spec, target, path)

    def _kept_build(self, kept: Build | ExplorerError, start: float) -> Build:
        self.read_from_disk += 1
        if isinstance(kept, ExplorerError):
            raise kept
        kept.timings_ms = {"read from disk": round((time.perf_counter() - start) * 1000, 2)}
        if not (self._here_until_ready and not self.ready.is_set()):
            self._highlight_the_rest(kept)  # as after a build in the processes
        return kept

    def _highlight_the_rest(self, built: Build) -> None:
        """The build's other code views, highlighted in a build process after it is shown (until
        then a page that opens one highlights it itself), where the server highlights ahead
        (``highlight_ahead``) and a process is free: the highlighting would delay the next pages'
        builds."""
        with self._busy_lock:
            if not self.settings.highlight_ahead or self._busy >= self.workers or self.engine is not None:
                self.highlights_left_to_pages += 1
                return
            self._busy += 1
        rest = views_texts(built, [view for view in VIEW_LANGUAGES if view not in built.views_html])

        def done(future) -> None:
            with self._busy_lock:
                self._busy -= 1
            if future.exception() is None:
                built.views_html.update(future.result())

        self._executor().submit(texts_html, rest).add_done_callback(done)

    def _build_here(self, spec: Spec, target: str, path: str | None = None) -> Build:
        self.built_here += 1
        outcome = build_source_only(spec, target, (), path, self.settings.build_disk_cache)
        if isinstance(outcome, ExplorerError):
            raise outcome
        return outcome

    def stats(self) -> dict:
        hosts = {"worker hosts": self.engine.stats()} if self.engine is not None else {}
        return {**self._cache.stats(), "workers": self.workers, "built in this process": self.built_here,
                "read from disk": self.read_from_disk, "highlighting left to the pages": self.highlights_left_to_pages,
                **hosts}

    def _build_in_pool(self, spec: Spec, target: str, path: str | None = None) -> Build:
        start = time.perf_counter()
        with self._busy_lock:
            self._busy += 1
        try:
            if self.engine is not None:
                outcome = cloudpickle.loads(self._build_on_a_host(spec, target, path))
            else:
                outcome = cloudpickle.loads(self.run(build_source_only, spec, target, FIRST_VIEWS, path,
                                                     self.settings.build_disk_cache, True))
        finally:
            with self._busy_lock:
                self._busy -= 1
        if isinstance(outcome, ExplorerError):
            raise outcome
        self._highlight_the_rest(outcome)
        outcome.timings_ms["pool round trip"] = round((time.perf_counter() - start) * 1000
                                                      - sum(outcome.timings_ms.values()), 2)
        return outcome

    def _build_on_a_host(self, spec: Spec, target: str, path: str | None) -> bytes:
        """The build made by a worker host, for the resolved target (a host's "auto" is another GPU),
        pickled, and kept on disk here as a build process keeps it (this process holds the lock meanwhile:
        a compile or another app process asking for it waits for the file)."""
        resolved = str(resolve_target(target))
        with building(path):
            kept = read(path) if path is not None else None  # another process built it meanwhile
            if kept is not None:
                return pickled(kept)
            data = self.run(build_source_only, spec, resolved, FIRST_VIEWS, None, 0, True,
                            key="build-" + build_key(spec, resolved))
            if path is not None:
                keep(data, path, self.settings.build_disk_cache)
        return data


def _build_pool_init(root: str) -> None:
    """A build process of the pages: the app process keeps its builds (and the disk every
    process's), so this one keeps few, and it highlights each setting's views once for the
    server, so it keeps none of them (their HTML goes to the app process with the build)."""
    source_only_process_init(root)
    keep_builds(POOL_BUILDS)
    keep_highlights(0)


def build_source_only(spec: Spec, target: str, highlight: tuple[str, ...] = (), keep_at: str | None = None,
                      keep_at_most: int = 0, as_bytes: bool = False) -> Build | ExplorerError | bytes:
    """In a pool process: the build without its runtime module (it cannot cross processes
    and the app never runs kernels), with its code views ``highlight`` highlighted (the app's
    one process then only sends them); an ExplorerError comes back as a value, intact.
    Either is also written to ``keep_at`` for the machine's other servers. ``as_bytes``: the
    outcome already pickled, as the disk keeps it (the pool then sends those bytes instead of
    pickling the build a second time: a fifth of a build process's time went to pickling)."""
    with building(keep_at):  # a compile process asked for this setting waits for it, and so does ...
        kept = read(keep_at) if keep_at is not None else None
        if kept is not None:  # ... another app process's build process asked for it at once
            return pickled(kept) if as_bytes else kept
        try:
            built = build(spec, target)
        except ExplorerError as error:
            outcome = error  # a setting that cannot be built stays unbuildable
        else:
            timings = dict(built.timings_ms)
            views = {}
            if highlight:
                start = time.perf_counter()
                views = views_html(built, highlight)
                timings["highlight"] = round((time.perf_counter() - start) * 1000, 2)
            outcome = dataclasses.replace(built.with_texts(), runtime_module=None, timings_ms=timings, views_html=views)
        data = pickled(outcome) if as_bytes or keep_at is not None else None
        if keep_at is not None:
            keep(data, keep_at, keep_at_most)
    return data if as_bytes else outcome

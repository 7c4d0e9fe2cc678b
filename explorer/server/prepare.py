"""``python -m explorer prepare --lesson NAME …``: a class prepared before it meets.

Every step of the chosen lessons and every setting one knob away from each (the first value each way
of each knob, as a student's slider moves and the diagnosis looks) is built, compiled and measured the
way a class server does it, into the caches a server started afterwards reads: the builds on disk
(``EXPLORER_BUILD_DIR``), the kernels' binaries with their SASS (``EXPLORER_CUDA_CACHE``), the kernel
libraries (``EXPLORER_LIBRARY_DIR``), the measurements (``EXPLORER_MEASURE_DIR``, :mod:`.measure_store`)
and the diagnoses placed on them (beside the measurements, :func:`.diagnosing.kept_folder`). Without a
GPU it prepares the builds, binaries and static diagnoses only, and says so.

The settings are counted first; each line of progress says how many are done, and how long the rest
will take at the pace so far. What is done stays done: an interrupted prepare, run again, goes on
where it stopped (the builds and binaries are read from the disk, the fresh measurements too).
A summary of the run (``prepared.json`` beside the measurements) is what a server's Device page quotes.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ..analysis.diagnosis.search import neighbours
from ..analysis.sass import compile_binary
from ..build import Build, Spec
from ..errors import EXIT_INVALID, ExplorerError
from ..lessons import get_lesson
from . import build_disk
from .builds import BuildService
from .diagnosing import diagnose_in, diagnosing_process, fresh, kept_folder, kept_key, shared, shared_path
from .in_process import POLL_S, MeasuringInProcess
from .measure_store import PREPARE, GPUBusy, gpu_turn, versions
from .settings import ServerSettings

HELP = "build, compile and measure lessons' steps and the settings one knob away, for a class to come"
MANIFEST = "prepared.json"  # beside the measurements: what the last prepare did


def settings_to_prepare(lesson_ids: list[str], around: bool = True) -> tuple[list[Spec], int]:
    """(every step of the lessons, each followed by its one-knob neighbours not seen before where
    ``around``; the steps' count). A neighbour is the first value each way of each knob
    (``search.neighbours``)."""
    chosen: dict[Spec, None] = {}
    steps = [step.preset.spec for lesson_id in lesson_ids for step in get_lesson(lesson_id).steps]
    for spec in steps:
        chosen.setdefault(spec, None)
        for moves in neighbours(spec) if around else ():
            chosen.setdefault(moves[0][0], None)
    return list(chosen), len(dict.fromkeys(steps))


def clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a duration."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Settings counted up front; each one done makes a line with the time the rest will take at the
    pace of the ones this run did (those found done already cost nothing and do not count)."""

    def __init__(self, total: int, say, now=time.monotonic):
        self.total, self.say, self._now = total, say, now
        self.done = self.already = 0
        self.started = now()
        self._lock = threading.Lock()

    def left_s(self) -> float | None:
        """Seconds the settings not done will take at this run's pace; None before one is done here."""
        made = self.done - self.already
        if made <= 0:
            return None
        return (self.total - self.done) * (self._now() - self.started) / made

    def one(self, spec: Spec, what: str, already: bool = False) -> None:
        with self._lock:
            self.done += 1
            self.already += already
            left = self.left_s()
            estimate = ("done" if self.done == self.total else
                        "estimating the rest…" if left is None else f"about {clock(left)} left")
            self.say(f"[{self.done:>{len(str(self.total))}}/{self.total}] {100 * self.done // self.total:3d}% · "
                     f"{clock(self._now() - self.started)} elapsed · {estimate} · {spec.template}: {what}")


def kernel_binary(spec: Spec, target: str, kept_at: str | None) -> str:
    """In a build process: the binary of a kept build (its registers, spills, SASS: the diagnosis's and
    the SASS tab's, on disk by its CUDA), or why there is none."""
    kept = build_disk.read(kept_at) if kept_at is not None else None
    if not isinstance(kept, Build):
        return "no build kept"
    try:
        binary = compile_binary(kept)
    except ExplorerError as error:
        return f"binary: {error}"
    return "binary" if binary is not None else "no CUDA compiler here"


@dataclasses.dataclass
class Outcome:
    """What became of one setting."""

    built: str = "-"  # "built", "read" (on disk already) or the refusal's sentence
    binary: str = "-"
    measured: str = "-"  # "measured", "kept" (on disk already), an error's sentence, or "-" (no GPU)
    diagnosed: str = "-"  # "diagnosed", "diagnosis kept" (on disk already), or why not

    def line(self) -> str:
        return ", ".join(part for part in (self.built, self.binary, self.measured, self.diagnosed) if part != "-")


class Preparation:
    """One prepare: the server's own build processes and measuring (compile processes, GPU, the
    measurements kept on disk), asked for each setting as a class would, from as many threads as
    there are compile (or, without a GPU, build) processes."""

    def __init__(self, specs: list[Spec], target: str = "auto", settings: ServerSettings | None = None,
                 measuring: MeasuringInProcess | None = None):
        # Nothing is highlighted beyond what a build process keeps on disk with the build.
        self.settings = dataclasses.replace(settings or ServerSettings(), highlight_ahead=False)
        self.specs, self.target = specs, target
        self.builds = BuildService(self.settings)
        self.measuring = measuring or MeasuringInProcess(self.settings)  # tests give a stand-in GPU
        self.measuring.measured_by = PREPARE
        # The diagnoses, kept beside the measurements for the servers to come (none where they keep none).
        self.kept_diagnoses = kept_folder(self.settings)
        self.diagnosing = (diagnosing_process(self.settings, max(1, self.builds.workers))
                           if self.kept_diagnoses is not None else None)
        self.outcomes: dict[Spec, Outcome] = {}
        self.stopping = threading.Event()

    def start(self) -> bool:
        """Start the processes and warm the GPU (its ceilings measured: each measurement carries them);
        whether a GPU measures."""
        self.measuring.start(None, self.target, tuple(self.specs), ceilings=True)
        self.builds.start(tuple(self.specs), self.target)
        while not self.measuring.ready.wait(POLL_S):
            pass
        if self.measuring.warm.gpu:
            self.measuring.wait_started()
        return self.measuring.warm.gpu

    def one(self, spec: Spec, gpu: bool) -> tuple[Outcome, bool]:
        """Prepare ``spec``: build it (kept on disk), measure it (compiled by a compile process, timed on
        the GPU, kept on disk), then diagnose it on that measurement (kept on disk; where no diagnosis is
        kept, only its binary's registers and SASS, which a diagnosis reads). (Its outcome, whether it was
        all done already.)"""
        outcome = Outcome()
        kept_at = self.builds.disk.path(spec, self.target)
        on_disk = kept_at is not None and os.path.exists(kept_at)
        measured = gpu and self.measuring.result(spec, self.target) is not None
        try:
            self.builds.build(spec, self.target)
            outcome.built = "read" if on_disk else "built"
        except ExplorerError as error:
            outcome.built = f"refused: {error}"
            return outcome, on_disk
        if gpu:
            job = self.measuring.request(None, spec, self.target, background=True)
            while not job.wait(POLL_S) and not self.stopping.is_set():
                pass
            outcome.measured = ("-" if not job.done else f"measurement: {job.error}" if job.error else
                                "kept" if measured else _said(job.result))
        if self.diagnosing is None and not self.stopping.is_set():  # a diagnosis makes the same binary first
            outcome.binary = (self.builds.run(kernel_binary, spec, self.target, kept_at) if self.builds.workers
                              else kernel_binary(spec, self.target, kept_at))
        diagnosed_already = self._diagnose(spec, outcome, kept_at)
        return outcome, on_disk and (measured or not gpu) and diagnosed_already in (True, None)

    def _diagnose(self, spec: Spec, outcome: Outcome, kept_at: str | None) -> bool | None:
        """The diagnosis a page of a server started afterwards shows: placed on the measurement (or static,
        without one), kept where the server reads it (diagnosing.kept_folder). Whether it was kept already
        (None: no diagnosis kept)."""
        if self.diagnosing is None or self.stopping.is_set():
            return None
        measured = self.measuring.result(spec, self.target)
        measured = measured if getattr(measured, "correct", False) else None  # as Server.diagnosis places it
        ceilings, us = (measured.ceilings, measured.median_us) if measured is not None else (None, None)
        key = kept_key(spec, self.target, measured.device if measured is not None else None)
        already = fresh(shared_path(self.kept_diagnoses, key), self.settings.measure_max_age_s)
        os.makedirs(self.kept_diagnoses, mode=0o700, exist_ok=True)
        try:
            shared(self.kept_diagnoses, key, lambda: diagnose_in(self.diagnosing, spec, self.target, ceilings, us,
                                                                 disk=self.builds.disk),
                   self.settings.measure_max_age_s)
        except ExplorerError as error:  # not kept: the server diagnoses it when a page asks
            outcome.diagnosed = f"diagnosis: {error}"
            return False
        outcome.diagnosed = "diagnosis kept" if already else "diagnosed"
        return already

    def run(self, progress: Progress, gpu: bool) -> None:
        """Every setting, ``progress`` told of each; returns early (unfinished) once ``stopping`` is set."""
        threads = max(1, self.settings.compile_workers if gpu else self.builds.workers)
        pool = ThreadPoolExecutor(threads, thread_name_prefix="prepare")
        try:
            pending = {pool.submit(self._task, spec, gpu, progress) for spec in self.specs}
            while pending and not self.stopping.is_set():
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # a bug is raised here, not lost in a thread
        except BaseException:  # Ctrl-C: the settings under way end with the processes, the others never start
            self.stopping.set()
            raise
        finally:
            pool.shutdown(wait=not self.stopping.is_set(), cancel_futures=True)

    def _task(self, spec: Spec, gpu: bool, progress: Progress) -> None:
        if self.stopping.is_set():
            return
        try:
            outcome, already = self.one(spec, gpu)
        except ExplorerError as error:  # a process that crashed on this setting, or the processes stopping
            outcome, already = Outcome(built=f"not prepared: {error}"), False
        if self.stopping.is_set():
            return  # cut short by the interruption: what it did is kept, and the next prepare finds it
        self.outcomes[spec] = outcome
        progress.one(spec, "already prepared" if already else outcome.line(), already)

    def close(self) -> None:
        self.stopping.set()
        self.measuring.close()
        self.builds.close()
        if self.diagnosing is not None:
            self.diagnosing.close()


def _said(result) -> str:
    if not getattr(result, "correct", True):
        return "measured: wrong result"
    median = getattr(result, "median_us", None)
    return f"measured {median:,.2f} µs" if median is not None else "measured"


def manifest(lesson_ids: list[str], specs: list[Spec], steps: int, outcomes: dict[Spec, Outcome], device: str | None,
             started: float, finished: float, interrupted: bool) -> dict:
    """What a prepare did, for the Device page of a server started on its caches."""
    done = list(outcomes.values())
    return {"lessons": lesson_ids, "settings": len(specs), "steps": steps, "done": len(done),
            "built": sum(not o.built.startswith(("refused", "not prepared")) for o in done),
            "refused": sum(o.built.startswith("refused") for o in done),
            "measured": sum(o.measured.startswith(("measured", "kept")) for o in done),
            "diagnosed": sum(o.diagnosed in ("diagnosed", "diagnosis kept") for o in done),
            "device": device, "started": started, "finished": finished, "interrupted": interrupted,
            "versions": versions()}


def read_manifest(settings: ServerSettings) -> dict | None:
    """The last prepare's summary on this machine for this explorer and TVM (None: none, or another version's)."""
    if not settings.measure_dir:
        return None
    try:
        with open(os.path.join(settings.measure_dir, MANIFEST)) as file:
            found = json.load(file)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("versions") == versions() else None


def _write_manifest(settings: ServerSettings, summary: dict) -> None:
    if not settings.measure_dir or build_disk.own_folder(settings.measure_dir, "Measurements") is None:
        return
    path = os.path.join(settings.measure_dir, MANIFEST)
    with open(path + ".part", "w") as file:
        json.dump(summary, file, indent=1)
    os.replace(path + ".part", path)


def prepare(lesson_ids: list[str], target: str = "auto", around: bool = True, settings: ServerSettings | None = None,
            say=None, measuring: MeasuringInProcess | None = None) -> int:
    """Prepare the lessons (:class:`Preparation`; ``around``: and the settings one knob away from their
    steps), saying how it goes (``say``: a line at a time, printed by default); the exit status (130:
    interrupted)."""
    settings = settings or ServerSettings()
    say = say or functools.partial(print, flush=True)
    specs, steps = settings_to_prepare(lesson_ids, around)
    say(f"Preparing {len(specs)} settings: the {steps} steps of {', '.join(lesson_ids)}"
        + (f" and the {len(specs) - steps} settings one knob away from them." if around else "."))
    for bound, count, name in ((settings.build_disk_cache, len(specs), "EXPLORER_BUILD_DISK_CACHE"),
                               (settings.measure_cache, len(specs), "EXPLORER_MEASURE_CACHE")):
        if count > bound:
            say(f"Note: {count} settings are more than {name}={bound}: a server keeps only the last {bound}.")
    try:
        turn = gpu_turn(settings.measure_dir, alone=True)
    except GPUBusy:
        say(f"A class server on this machine measures on its GPU (its measurements are kept in {settings.measure_dir} "
            "too): stop it before preparing, as two processes timing kernels on one GPU at once disturb each "
            "other's timings.")
        return EXIT_INVALID
    started = time.time()
    run = Preparation(specs, target, settings, measuring)
    interrupted = False
    device = None
    try:
        say("Starting the build and compile processes and warming the GPU…")
        gpu = run.start()
        device = run.measuring.warm.device if gpu else None
        kept = run.measuring.stored.get("loaded", 0)
        error = run.measuring.warm.error or ""
        say(f"Measuring on {device} ({kept} measurements of this GPU already on disk are kept)." if gpu else
            ("No GPU on this machine" if error.startswith("No GPU") else f"The GPU did not warm up ({error})")
            + ": the builds and the kernels' binaries" + (" (and static diagnoses)" if run.diagnosing else "")
            + " are prepared, nothing is measured. Prepare on the class's GPU server to measure too.")
        run.run(Progress(len(specs), say), gpu)
    except KeyboardInterrupt:
        interrupted = True
        run.stopping.set()
    finally:
        run.close()
        if turn is not None:
            turn.close()
    finished = time.time()
    summary = manifest(lesson_ids, specs, steps, run.outcomes, device, started, finished, interrupted)
    summary["oldest"] = min(started, run.measuring.stored.get("oldest", started))  # measured by an earlier prepare
    _write_manifest(settings, summary)
    say(report(summary, settings))
    return 130 if interrupted else 0


def report(summary: dict, settings: ServerSettings) -> str:
    """The closing sentences of a prepare."""
    took = clock(summary["finished"] - summary["started"])
    if summary["interrupted"]:
        return (f"Interrupted after {took}: {summary['done']} of {summary['settings']} settings prepared, and kept. "
                "Run the same command again to prepare the rest.")
    refused = f", {summary['refused']} refused (each with its sentence)" if summary["refused"] else ""
    diagnosed = f", {summary['diagnosed']} diagnosed" if summary.get("diagnosed") else ""
    head = f"Prepared {summary['settings']} settings in {took}: {summary['built']} built{refused}"
    if summary["device"] is None:
        return f"{head}{diagnosed}; nothing measured (no GPU). A server started on this machine reads them."
    until = time.strftime("%H:%M", time.localtime(summary["oldest"] + settings.measure_max_age_s))
    return (f"{head}, {summary['measured']} measured on {summary['device']}{diagnosed}. A server started from now "
            f"on reads them (its Device page says so). The measurements (and the diagnoses placed on them) count as "
            f"fresh for EXPLORER_MEASURE_MAX_AGE_S={settings.measure_max_age_s} s after each was measured (the oldest "
            f"until about {until}): start the class before then, or start its server with a larger "
            "EXPLORER_MEASURE_MAX_AGE_S.")


def prepared_sentence(stored: dict | None, summary: dict | None, max_age_s: float,
                      now: float | None = None) -> str | None:
    """The Device page's sentence about the caches a server started on: the last prepare's ``summary``
    (:func:`read_manifest`) and the measurements it read from the disk (``stored``:
    ``measure_store.describe``); None where it started on neither."""
    loaded = (stored or {}).get("loaded", 0)
    if not summary and not loaded:
        return None
    when = lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t))  # noqa: E731
    parts = []
    if summary:
        what = (f"{summary['done']} of {summary['settings']} settings (interrupted)" if summary["interrupted"]
                else f"{summary['settings']} settings")
        measured = (f"{summary['measured']} measured on {summary['device']}" if summary["device"] else
                    "no GPU there: nothing measured")
        if summary.get("diagnosed"):
            measured += f", {summary['diagnosed']} diagnosed"
        parts.append(f"`python -m explorer prepare` prepared {what} of {', '.join(summary['lessons'])} on "
                     f"{when(summary['started'])} ({summary['built']} built, {summary['refused']} refused, {measured})")
    if loaded:
        by = ("" if not stored.get("prepared") else " by prepare" if stored["prepared"] == loaded else
              f", {stored['prepared']} by prepare")
        until = stored["oldest"] + max_age_s
        again = (f"the oldest is measured again after {when(until)}" if until > (now or time.time()) else
                 "those older than the server's age for measurements are measured again when asked for")
        parts.append(f"this server read {loaded} measurements of this GPU from the disk{by}, measured "
                     f"{when(stored['oldest'])} to {when(stored['newest'])}; {again}")
    return "Started on a prepared cache: " + "; ".join(parts) + "."


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--lesson", action="append", required=True, metavar="NAME",
                        help="a lesson to prepare (repeat for several): its id, e.g. matmul_modern")
    parser.add_argument("--target", default="auto", help="the target the class's pages use (default: auto)")
    parser.add_argument("--steps-only", action="store_true",
                        help="only the lessons' steps, not the settings one knob away (a quick prepare)")
    return parser


def command(args: argparse.Namespace) -> int:
    return prepare(args.lesson, args.target, around=not args.steps_only)


def main(argv: list[str] | None = None) -> int:
    """``python -m explorer.server.prepare OPTIONS`` (the CLI's ``prepare``, e.g. with a stand-in GPU)."""
    args = add_arguments(argparse.ArgumentParser(prog="python -m explorer prepare", description=HELP)).parse_args(argv)
    try:
        return command(args)
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())

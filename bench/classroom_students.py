"""The students of a class: each opens a lesson step from its link, then every think time or so
moves one knob slider to another value that the library can build (a valid move; the app would
refuse the others with its reason), and records the time from the move until the new code is on
the page and until the new latency is. Every error a student meets is kept with the link of the
setting that caused it, so that the report sends a teacher to it."""
from __future__ import annotations

import functools
import multiprocessing
import os
import random
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlencode

from classroom_page import Page, watch
from classroom_sampler import own_cpu

from app.widgets import format_value
from explorer import urlstate
from explorer.build import Spec, scheduled
from explorer.errors import ExplorerError
from explorer.presets import get_preset

KNOB_PREFIX = "knob:"


@dataclass
class Student:
    number: int
    link: str
    code_s: list = field(default_factory=list)  # move → new code shown
    latency_s: list = field(default_factory=list)  # move → new latency shown, for a setting new to the server
    revisit_s: list = field(default_factory=list)  # ... for a setting the class had seen
    open_s: float | None = None  # link → first code
    first_latency_s: float | None = None  # link → first latency
    seed: float = 0.0  # of this student's random moves
    moves: int = 0
    refused: int = 0  # settings the app refused with its reason (not errors)
    no_latency: int = 0  # moves whose latency had not come before the next move
    waiting_notices: list = field(default_factory=list)  # what the page said instead, each time
    errors: list = field(default_factory=list)  # {"error": what the page said, "link": the setting's}
    lost: list = field(default_factory=list)  # the moves that showed no code in time: their settings
    timeline: list = field(default_factory=list)  # (time of the move, template, code_s, latency_s or None)


def link_of(url: str, spec: Spec, preset: str) -> str:
    """The link that opens ``spec`` (moved from the step ``preset``) on the server at ``url``."""
    return f"{url.rstrip('/')}/?{urlencode(urlstate.to_query(spec, preset))}"


def valid_move(spec, sliders: dict, rng: random.Random, tries: int = 30):
    """A random knob slider moved to another value that the library schedules (the app would
    refuse the others, with its reason; the few it refuses later, while lowering, count as
    refused): (new spec, widget id, label, the label it had), or None."""
    prefix = f"{KNOB_PREFIX}{spec.template}."
    knobs = {key[len(prefix):]: key for key in sliders if key.startswith(prefix)}
    if not knobs:  # the page showed no knob (it failed: that is counted as its error)
        return None
    for _ in range(tries):
        name = rng.choice(sorted(knobs))
        widget_id, labels = sliders[knobs[name]]
        by_label = {format_value(v): v for v in spec.knobs.field(name).values(spec.workload)}
        label = rng.choice(labels)
        if label not in by_label or by_label[label] == getattr(spec.knobs, name):
            continue
        try:
            candidate = spec.with_knobs(**{name: by_label[label]})
            _buildable(candidate)
        except ExplorerError:
            continue
        return candidate, widget_id, label, format_value(getattr(spec.knobs, name))
    return None


@functools.lru_cache(maxsize=4096)
def _buildable(spec) -> bool:
    # A third of a build: a load generator on the server's machine takes little of its CPU. It is
    # the load generator's own CPU all the same (TVM's scheduling, under its GIL): sampled with it.
    scheduled(spec, "auto")  # raises ExplorerError for a setting the app would refuse
    return True


class Playing:
    """What one student's thread is doing: its page, the setting on it and where it came from."""

    def __init__(self, url: str, me: Student, page: Page, think: float, want_latency: bool, seen: set):
        self.url, self.me, self.page, self.seen = url, me, page, seen
        self.think, self.want_latency = think, want_latency
        self.spec = get_preset(me.link).spec

    def error(self, text: str) -> None:
        """An error of the setting on the page, with the link that opens it."""
        self.me.errors.append({"error": text, "link": link_of(self.url, self.spec, self.me.link)})

    def open(self, end: float) -> None:
        """The link's first code and latency."""
        started = time.time()
        self.page.rerun()
        code, latency, _, errors, notice = watch(self.page, started, min(end, started + 120), self.want_latency)
        self.me.open_s, self.me.first_latency_s = code, latency
        for text in errors:
            self.error(text)
        if latency is None and self.want_latency:
            self.me.waiting_notices.append(notice)
        elif latency is not None:
            self.seen.add(self.spec)

    def move(self, move: tuple) -> None:
        """One knob moved (``move``: valid_move's answer), and what the page showed for it."""
        me = self.me
        self.spec, widget_id, label, _ = move
        started = time.time()
        self.page.rerun((widget_id, label))
        me.moves += 1
        trace: list[str] = []
        code, latency, refused, errors, notice = watch(self.page, started, started + max(30.0, self.think * 3),
                                                       self.want_latency, trace)
        for text in errors:
            self.error(text)
        if refused:
            me.refused += 1
            return
        if code is None:
            self.error("no code shown within the time limit")
            # Which setting, and what the page said meanwhile: the report's lost_moves.
            me.lost.append({"at": started, "template": self.spec.template, "knobs": repr(self.spec.knobs),
                            "link": link_of(self.url, self.spec, me.link), "notice": notice[:200],
                            "messages": trace})
            return
        me.code_s.append(code)
        me.timeline.append((started, self.spec.template, code, latency))
        if latency is not None:
            (me.revisit_s if self.spec in self.seen else me.latency_s).append(latency)
        elif self.want_latency:
            me.no_latency += 1
            me.waiting_notices.append(notice)
        self.seen.add(self.spec)


def student(url: str, me: Student, end: float, think: float, want_latency: bool, rng: random.Random,
            seen: set, revisit_every: int = 0, open_at: float | None = None) -> None:
    """One student: open ``me.link`` (at the time ``open_at``, where given: the same moment
    as the others), then move a knob every ``think`` seconds or so until ``end``; every ``revisit_every``-th
    move (where more than 0) moves the last slider back, to a setting the server has measured."""
    try:
        page = Page(url, timeout=30, query=urlencode({"preset": me.link}))
    except Exception as error:  # the server refused or is down
        me.errors.append({"error": f"connect: {error}", "link": link_of(url, get_preset(me.link).spec, me.link)})
        return
    playing = Playing(url, me, page, think, want_latency, seen)
    try:
        if open_at is not None:
            time.sleep(max(0.0, open_at - time.time()))
        playing.open(end)
        undo = None  # the last move, reversed (a revisit)
        while time.time() < end:
            for _ in page.read(min(end, time.time() + think * rng.uniform(0.5, 1.5))):
                pass
            revisit = bool(revisit_every and undo and (me.moves + 1) % revisit_every == 0)
            move = undo if revisit else valid_move(playing.spec, page.sliders, rng)
            if move is None or time.time() >= end:
                continue
            before, (_, widget_id, label, previous_label) = playing.spec, move
            undo = None if revisit else (before, widget_id, previous_label, label)
            playing.move(move)
    except Exception as error:  # a broken connection is an error of the run, not of the bench
        playing.error(f"{type(error).__name__}: {error}")
    finally:
        page.close()


def play(url: str, class_: list[Student], end: float, think: float, want_latency: bool, revisit_every: int = 0,
         open_at: float | None = None) -> tuple[list[Student], dict]:
    """``class_`` in this process, one thread each, until ``end``: the students, with what they saw, and
    this process (its pid, when its students began, its cores every SAMPLE_EVERY_S s: ``own_cpu``)."""
    seen: set = set()  # settings these students saw measured (the server's caches are shared)
    threads = [threading.Thread(target=student, args=(url, s, end, think, want_latency, random.Random(s.seed),
                                                      seen, revisit_every, open_at)) for s in class_]
    with own_cpu() as cores:
        began = time.time()
        for t in threads:
            t.start()
            if open_at is None:
                time.sleep(0.02)  # a class does not press enter in the same millisecond
        for t in threads:
            t.join(max(0.0, end - time.time()) + 300)
    return class_, {"pid": os.getpid(), "began": began, "cores": cores}


# How the load processes start: spawned, each importing Streamlit's protocol, the app's widgets and the explorer
# (TVM) again. A test forks them (tests/README.md): they start before this process starts
# its observer thread (play_in_processes), so no thread of ours holds a lock that a forked child would inherit.
START_METHOD = "spawn"


def play_in_processes(processes: int, url: str, class_: list[Student], *args,
                      started=lambda: None) -> tuple[list[Student], list[dict]]:
    """``play`` with the class shared among ``processes`` processes: one Python process cannot
    read a hundred students' websockets and check their moves without its own GIL delaying them.
    ``started()`` is called once the processes have started (the observer starts there).
    The students, and what each process said of itself."""
    if processes <= 1:
        started()
        students, me = play(url, class_, *args)
        return students, [me]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(START_METHOD)) as pool:
        shares = [pool.submit(play, url, class_[i::processes], *args) for i in range(processes)]
        started()  # forked, they all started at the first submit, before the pool's threads and the observer
        played = [share.result() for share in shares]
        return [s for students, _ in played for s in students], [me for _, me in played]

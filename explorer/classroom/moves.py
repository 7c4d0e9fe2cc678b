"""Which knobs the students move next from the class's step: each browser session's moves
away from the setting the teacher put the class on, counted per knob. Kept in this process
only (the server's), like presence: it describes the lesson under way, not a lasting record.

A move counts when a session's previous setting was the class's step and its new one, of
the same template, differs from it: the knobs that differ are what that student moved
next. Each session counts once per knob and step."""
from __future__ import annotations

import threading
from collections import Counter
from urllib.parse import parse_qs, urlsplit

from .. import urlstate
from ..build import Spec
from ..errors import ExplorerError
from ..lessons import get_lesson
from .store import ClassStep

_lock = threading.Lock()
_moved: dict[tuple, dict[str, set[str]]] = {}  # class step key -> session -> knobs moved from it
KEEP_STEPS = 32  # class steps remembered (the most recent ones)


def step_key(state: ClassStep) -> tuple:
    """One key per time the teacher set a step (setting the same step again starts afresh)."""
    return (state.kind, state.lesson, state.step, state.link, state.set_at)


def class_spec(state: ClassStep) -> Spec | None:
    """The setting the class is on: the lesson step's preset, or the link's setting."""
    try:
        if state.kind == "step":
            return get_lesson(state.lesson).step(state.step).preset.spec
        query = {key: values[-1] for key, values in parse_qs(urlsplit(state.link).query).items()}
        return urlstate.from_query(query)[0]
    except ExplorerError:
        return None


def record(session: str, state: ClassStep, previous: Spec | None, now: Spec) -> tuple[str, ...]:
    """Count ``session``'s move ``previous`` → ``now`` if it leaves the class's setting;
    returns the knobs it counted."""
    start = class_spec(state)
    if start is None or previous != start or now == start or now.template != start.template:
        return ()
    knobs = now.knobs.changed_from(start.knobs)
    with _lock:
        moved = _moved.setdefault(step_key(state), {})
        moved.setdefault(session, set()).update(knobs)
        while len(_moved) > KEEP_STEPS:
            del _moved[next(iter(_moved))]
    return knobs


def most_moved(state: ClassStep) -> list[tuple[str, int]]:
    """Knobs the students moved from the class's step, with how many students moved each,
    most common first."""
    with _lock:
        moved = _moved.get(step_key(state), {})
        return Counter(knob for knobs in moved.values() for knob in knobs).most_common()


def forget() -> None:
    with _lock:
        _moved.clear()

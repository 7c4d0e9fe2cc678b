"""Class mode in the app: the banner that tells every student where the teacher has put the
class (refreshed every second, without a click), this session's presence, and whether this
session is the teacher's (unlocked on the Class page, kept in session state only)."""
from __future__ import annotations

import sqlite3

import streamlit as st

from app import latency
from explorer import classroom
from explorer.lessons import current_lesson_id

from . import session

REFRESH_S = 1.0  # the banner follows the teacher within this (plus a page's round trip)


def store() -> classroom.Store:
    return classroom.open_store()


def lesson_place(lesson: str, step: int) -> str:
    return f"{lesson} · step {step}"


def show(where: str) -> None:
    """The class banner, near the top of a page; ``where`` is what this session looks at
    (counted on the teacher's view)."""
    session.set_place(where)
    _banner()


@st.fragment(run_every=REFRESH_S)
def _banner() -> None:
    classroom.presence.beat(session.session_id(), session.place(), teacher=session.is_teacher())
    try:
        state = store().shared_class_step()
    except (sqlite3.Error, OSError):  # no class file here: no banner, the page still works
        return
    if state is None:
        return
    here = state.kind == "step" and session.place() == lesson_place(current_lesson_id(state.lesson), state.step)
    left, right = st.columns([5, 1], vertical_alignment="center")
    left.info(state.banner() + (" (this page)" if here else ""), icon=":material/campaign:")
    # A link, not a jump: a student exploring elsewhere decides when to follow.
    right.link_button("Open it", state.link, icon=":material/open_in_new:", width="stretch")


def record_move(current) -> None:
    """Count this session's move away from the class's step (the Class page shows the knobs
    the students moved next)."""
    try:
        state = store().shared_class_step()
    except (sqlite3.Error, OSError):
        return
    previous = session.previous_try(current)
    if state is not None and previous is not None:
        classroom.moves.record(session.session_id(), state, previous.spec, current)


def can_submit() -> bool:
    """Whether this server can measure a submission (a GPU here or an RPC tracker)."""
    return latency.can_measure()

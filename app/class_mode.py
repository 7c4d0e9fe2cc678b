"""Class mode in the app: the banner that tells every student where the teacher has put the
class (refreshed every second, without a click), the question the teacher has put to the class
(every student page shows it, takes the student's answer and, at the reveal, the answer), this
session's presence, and whether this session is the teacher's (unlocked on the Class page, kept
in session state only)."""
from __future__ import annotations

import sqlite3

import streamlit as st

from app import latency
from explorer import classroom
from explorer.classroom import rounds
from explorer.errors import ExplorerError

from . import questions, session

REFRESH_S = 1.0  # the banner follows the teacher within this (plus a page's round trip)


def store() -> classroom.Store:
    return classroom.open_store()


def lesson_place(lesson: str, step: int) -> str:
    return f"{lesson} · step {step}"


ROUND_MEMO = "class.round"  # this page's view of the round: the key of the round it shows ("seen")


def show(where: str) -> None:
    """The class banner, near the top of a page, and below it the question the class is
    answering; ``where`` is what this session looks at (counted on the teacher's view)."""
    session.set_place(where)
    top = st.container()
    round_panel()  # first: it notes which round the page shows, which the banner then follows
    with top:
        _banner()


def current_round() -> classroom.Round | None:
    """The round the class is in (one read per second for the whole server), or None."""
    try:
        return store().shared_round()
    except (sqlite3.Error, OSError):  # no class file here: no class, the page still works
        return None


@st.fragment(run_every=REFRESH_S)
def _banner() -> None:
    classroom.presence.beat(session.session_id(), session.place(), teacher=session.is_teacher())
    round_ = current_round()
    if (round_.key if round_ else None) != session.memo(ROUND_MEMO).get("seen"):
        st.rerun()  # the teacher opened, closed or revealed a question: the whole page shows it
    try:
        state = store().shared_class_step()
    except (sqlite3.Error, OSError):  # no class file here: no banner, the page still works
        return
    if state is None:
        return
    here = state.kind == "step" and session.place() == lesson_place(state.lesson, state.step)
    left, right = st.columns([5, 1], vertical_alignment="center")
    left.info(state.banner() + (" (this page)" if here else ""), icon=":material/campaign:")
    # A link, not a jump: a student exploring elsewhere decides when to follow.
    right.link_button("Open it", state.link, icon=":material/open_in_new:", width="stretch")


def round_panel() -> None:
    """The question the class is answering: the student's answer form while a vote is open, then
    the wait for the reveal, then the answer with both votes' counts and the step's explanation."""
    round_ = current_round()
    session.memo(ROUND_MEMO)["seen"] = round_.key if round_ else None
    if round_ is None or (session.is_teacher() and session.place() == "Class"):  # the Class page has it all
        return
    try:
        question = rounds.question_of(round_)
    except ExplorerError:
        return
    with st.container(border=True):
        vote = "" if round_.vote == 1 else " · second vote, after the discussion"
        st.markdown(f":material/quiz: **Question for the class** · step {round_.step}{vote}")
        if session.is_teacher():
            st.markdown(question.text)
            st.caption("The students answer on their pages; the Class page shows their answers and the controls.")
        elif round_.state == rounds.REVEALED:
            answer = rounds.answer_of(round_)
            second = rounds.tally(store(), round_, 2, answer) if round_.vote == 2 else None
            mine = {n: rounds.my_answer(store(), round_, session.session_id(), n) for n in (1, round_.vote)}
            # On the step's own Lessons page the explanation follows the panel.
            explain = session.place() != lesson_place(round_.lesson, round_.step)
            questions.reveal(question, answer, rounds.tally(store(), round_, 1, answer), second, mine, explain)
        else:
            _answering(question, round_)


def _answering(question, round_: classroom.Round) -> None:
    mine = rounds.my_answer(store(), round_, session.session_id())
    if round_.state == rounds.VOTING:
        questions.settings_links(question)
        earlier = mine or (rounds.my_answer(store(), round_, session.session_id(), 1) if round_.vote == 2 else None)
        given = questions.answer_form(question, f"class.round.{round_.id}.{round_.vote}", earlier,
                                      "Change my answer" if mine is not None else "Answer")
        if given is not None:
            try:
                rounds.vote(store(), round_, session.session_id(), given)
            except rounds.RoundRefused as error:
                st.error(str(error))
            else:
                st.rerun()  # the form again with the answer given ("Change my answer")
        if mine is not None:
            st.caption(f"Your answer: **{question.words(mine)}**. You may change it until the teacher closes the "
                       "vote; the step's latency shows after the reveal.")
    else:
        st.markdown(question.text)
        yours = f"Your answer: **{question.words(mine)}**. " if mine is not None else "You did not answer. "
        st.info(yours + "The vote is closed: talk it over with your neighbours while the teacher gets the answer "
                "from the GPU.", icon=":material/forum:")


def holds_back(spec) -> bool:
    """Whether the class is answering a question about ``spec``: its latency, and what gives the
    answer away, wait for the reveal."""
    round_ = current_round()
    if round_ is None or round_.state not in (rounds.VOTING, rounds.CLOSED):
        return False
    try:
        return any(p.spec == spec for p in rounds.question_of(round_).settings)
    except ExplorerError:
        return False


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

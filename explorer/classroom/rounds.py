"""A question round: the teacher puts a lesson step's question (explorer.questions) to the
class; every student answers alone and may change the answer until the teacher closes the
vote; optionally a second vote after the class has discussed it; then the reveal, with the
answer measured on the class's GPU (or the lesson's recorded figures) and both votes' counts.

Peer instruction (vote alone, discuss, vote again, then the reveal) is what the teaching
research found to work; this module is its bookkeeping, in the class's SQLite file
(explorer.classroom.store): the rounds and one answer per student session and vote, no
names, so a restart loses nothing. The teacher's view after class (:func:`summary`) lists
the questions the class got most wrong first; :func:`csv_text` exports every answer.
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import io
from dataclasses import dataclass

from ..errors import ExplorerError
from ..lessons import Asked, asked
from ..presets import get_preset
from ..questions import Answer, distribution, is_right, parse_given
from .store import Round, Store, Vote

VOTING, CLOSED, REVEALED, ENDED = "voting", "closed", "revealed", "ended"
VOTES = {1: "first vote", 2: "second vote, after the discussion"}


class RoundRefused(ExplorerError):
    """An answer or a teacher's move the round does not take now (its sentence says why)."""


def question_of(round_: Round) -> Asked:
    """The question the round asks (its step's)."""
    found = asked(get_preset(round_.preset))
    if found is None:
        raise RoundRefused(f"Step {round_.step} of {round_.lesson} asks no question any more.")
    return found


def answer_of(round_: Round) -> Answer | None:
    """The revealed answer, or None before the reveal."""
    return Answer.from_json(round_.answer) if round_.answer else None


def open_question(store: Store, question: Asked) -> Round:
    """Put ``question`` to the class: the class goes to its step, and the first vote opens."""
    preset = question.preset
    link = f"./lessons?lesson={preset.lesson}&step={preset.step}"
    store.set_class_step("step", preset.title, link, lesson=preset.lesson, step=preset.step)
    return store.open_round(preset.lesson, preset.step, preset.id)


def _move(store: Store, round_: Round, from_states: tuple[str, ...], state: str, what: str, **changes) -> Round:
    if not store.move_round(round_.id, from_states, state, **changes):
        now = store.round(round_.id)
        raise RoundRefused(f"Cannot {what}: the round is {now.state if now else 'gone'} now.")
    return store.round(round_.id)


def close_voting(store: Store, round_: Round) -> Round:
    return _move(store, round_, (VOTING,), CLOSED, "close the vote")


def second_vote(store: Store, round_: Round) -> Round:
    """After the discussion: every student answers again (the first vote's answers are kept)."""
    if round_.vote != 1:
        raise RoundRefused("This round has had its second vote.")
    return _move(store, round_, (CLOSED,), VOTING, "open a second vote", vote=2)


def reveal(store: Store, round_: Round, answer: Answer) -> Round:
    """Close the vote (if open) and show everyone ``answer``."""
    return _move(store, round_, (VOTING, CLOSED), REVEALED, "reveal the answer", answer=answer.to_json())


def end(store: Store, round_: Round) -> Round:
    """The round leaves the students' pages (its votes stay for the teacher's view after class)."""
    return _move(store, round_, (VOTING, CLOSED, REVEALED), ENDED, "end the round")


def vote(store: Store, round_: Round, session: str, given) -> None:
    """``session``'s answer in the round's open vote (again: replaces its earlier one)."""
    question = question_of(round_)
    value = parse_given(question.question, given)
    if value is None:
        wanted = "a number above 0" if question.question.kind == "speedup" else "one of the choices"
        raise RoundRefused(f"Give {wanted}.")
    if not store.cast_vote(round_.id, round_.vote, session, str(value)):
        raise RoundRefused("The teacher has closed this vote; your answer was not changed.")


def my_answer(store: Store, round_: Round, session: str, vote_number: int | None = None) -> str | None:
    """What ``session`` answered in a vote of the round (default: the round's current vote)."""
    number = vote_number or round_.vote
    return next((v.answer for v in store.votes(round_.id, number) if v.session == session), None)


@dataclass(frozen=True)
class Tally:
    """A vote's answers: how many students answered, and how many gave each answer."""

    answered: int
    counts: list[tuple[str, int]]  # the question's choices (or speedup bins), in order
    right: int | None  # how many answered right, once the answer is known


def tally(store: Store, round_: Round, vote_number: int, answer: Answer | None = None) -> Tally:
    question = question_of(round_).question
    votes = store.votes(round_.id, vote_number)
    right = sum(is_right(question, v.answer, answer) for v in votes) if answer is not None else None
    return Tally(len(votes), distribution(question, [v.answer for v in votes]), right)


# -- after class ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One revealed round, for the teacher's view after class."""

    round: Round
    question: Asked
    first: Tally
    second: Tally | None  # None without a second vote

    @property
    def first_right_share(self) -> float:
        return self.first.right / self.first.answered if self.first.answered else 1.0


def summary(store: Store) -> list[Result]:
    """Every revealed round, the ones the class got most wrong in the first vote first."""
    results = []
    for round_ in store.rounds():
        answer = answer_of(round_)
        if answer is None:
            continue
        try:
            question = question_of(round_)
        except ExplorerError:  # the lesson changed since: its rounds cannot be judged again
            continue
        second = tally(store, round_, 2, answer) if round_.vote == 2 else None
        results.append(Result(round_, question, tally(store, round_, 1, answer), second))
    return sorted(results, key=lambda r: (r.first_right_share, r.round.id))


def student_label(session: str) -> str:
    """A student's anonymous label in an export: the same for each of the session's answers, and
    not the session id itself (which a browser holds)."""
    return "s-" + hashlib.sha256(session.encode()).hexdigest()[:10]


CSV_COLUMNS = ("round", "opened", "lesson", "step", "preset", "kind", "question", "vote", "student", "answer",
               "right", "answered at", "right answer", "source")


def csv_text(store: Store) -> str:
    """Every answer of every round: one line per student and vote (UTC times)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for round_ in store.rounds():
        try:
            question = question_of(round_)
        except ExplorerError:
            continue
        answer = answer_of(round_)
        for v in store.votes(round_.id):
            writer.writerow(_csv_row(round_, question, answer, v))
    return out.getvalue()


def _csv_row(round_: Round, question: Asked, answer: Answer | None, v: Vote) -> list:
    right = "" if answer is None else ("yes" if is_right(question.question, v.answer, answer) else "no")
    return [round_.id, _utc(round_.opened), round_.lesson, round_.step, round_.preset, question.question.kind,
            question.text, v.vote, student_label(v.session), v.answer, right, _utc(v.at),
            "" if answer is None else question.words(answer.value), "" if answer is None else answer.source()]


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")

"""Predict, then measure, in the app: a lesson step's question (explorer.questions) with the
step's code and static tabs (nothing measured: the latency waits for the answer), a
student's answer form, a vote's counts, the answer measured through the server's one queue
(or the lesson's recorded figures) and the reveal. The class round (class_mode on the
students' pages, the Class page for the teacher) and the Lessons page's "predict first" share
them."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer import lessons as L
from explorer.analyses import ANALYSES
from explorer.build import Spec
from explorer.classroom.rounds import Tally
from explorer.errors import ExplorerError
from explorer.highlight import view_text
from explorer.questions import Answer, is_right, speedup_bin

from . import code_view, latency, panels, server, session, ui

# Tabs that show a measured time (the roofline's point, Nsight Compute's counters, the vthread
# comparison's two latencies): not shown before the answer.
MEASURED_TABS = ("roofline", "counters", "vthread")
SPEEDUP_HELP = "How many times faster: 2 means half the time, 1 the same time, 0.5 twice the time."


def answer_form(question: L.Asked, key: str, current=None, label: str = "Answer") -> object | None:
    """The question's choices (or a number, for a speedup) and a button; the answer given when the
    button was pressed in this run, else None. ``current``: the answer given before."""
    choices = question.choices()
    with st.form(key, border=False):
        if question.question.kind == "speedup":
            value = st.number_input(question.text, min_value=0.01, max_value=100_000.0, step=0.1, format="%.2f",
                                    value=float(current) if current is not None else None, key=f"{key}.value",
                                    placeholder="e.g. 2.5", help=SPEEDUP_HELP)
        else:
            keys = list(choices)
            value = st.radio(question.text, keys, format_func=choices.get, key=f"{key}.value",
                             index=keys.index(current) if current in keys else None)
        submitted = st.form_submit_button(label, type="primary", icon=":material/how_to_vote:")
    if submitted and value is None:
        st.warning("Choose an answer first." if choices else "Type a number first.")
        return None
    return value if submitted else None


def settings_links(question: L.Asked) -> None:
    """For a pick: the two settings, each opening in the Explorer (where its latency waits too)."""
    if question.question.kind != "pick":
        return
    for column, (letter, preset) in zip(st.columns(2), zip("AB", question.settings, strict=True), strict=True):
        column.link_button(f"Open {letter}: {preset.title}", ui.explorer_link(preset.spec, preset.id),
                           icon=":material/open_in_new:", width="stretch")


def code_tabs(spec: Spec, key: str) -> None:
    """The step's code views and its static analyses' tabs, none with a measured time."""
    try:
        built = server.build(spec, session.target())
    except ExplorerError as error:
        st.error(str(error))
        return
    analyses = [a for a in ANALYSES.values() if a.name not in MEASURED_TABS and a.applies(spec.template_def)]
    tabs = st.tabs([*code_view.VIEWS, *(a.title for a in analyses)], key=key, on_change="rerun")
    for tab, (title, (attribute, language)) in zip(tabs, code_view.VIEWS.items(), strict=False):
        if tab.open:
            with tab:
                text, first = view_text(built, attribute)
                code_view.show_code(text, language, attribute, f"{title} · {spec.workload.label()}", first_line=first,
                                    highlighted=built.views_html.get(attribute) if attribute != "cuda" else None)
    for tab, analysis in zip(tabs[len(code_view.VIEWS):], analyses, strict=True):
        if tab.open:
            with tab:
                panels.show(analysis, built)


def start_measuring(question: L.Asked, remote) -> None:
    """Ask the server's queue for both settings now (behind the students' own measurements), so
    that the reveal finds them measured."""
    if not latency.can_measure() and remote is None:
        return
    live = server.live()
    for preset in question.settings:
        live.request(None, preset.spec, session.target(), remote, background=True)


def answer_here(question: L.Asked, remote=None) -> Answer:
    """The answer: both settings measured through the server's one queue where this server can
    measure (each checked against NumPy first), else the lesson's recorded figures."""
    measurer = server.live().measurer(session.target(), remote) if (remote or latency.can_measure()) else None
    if measurer is None:
        return L.answer_question(question)
    where = str(remote) if remote is not None else (server.live().gpu_name() or "this server's GPU")
    with st.status(f"Measuring the two settings on {where}, each checked against NumPy first…") as status:
        answer = L.answer_question(question, measurer, where)
        status.update(label="Measured" if answer.measured else "Not measured: the lesson's recorded figures answer",
                      state="complete" if answer.measured else "error")
    return answer


def counts_table(question: L.Asked, first: Tally, second: Tally | None = None, answer: Answer | None = None):
    """A vote's counts (both votes' after a second one) as a table with a bar per answer; once the
    answer is known, the right one is marked."""
    choices = question.choices()
    rows = []
    second_counts = dict(second.counts) if second is not None else {}
    labels = [label for label, _ in first.counts] + [k for k, _ in (second.counts if second else ())
                                                      if k not in dict(first.counts)]
    for label in labels:
        row = {"answer": choices.get(label, label), "first vote": dict(first.counts).get(label, 0)}
        if second is not None:
            row["second vote"] = second_counts.get(label, 0)
        if answer is not None:
            row["right"] = "✓" if _is_right_label(question, label, answer) else ""
        rows.append(row)
    if not rows:
        st.caption("No answer yet.")
        return
    most = max(1, first.answered, second.answered if second else 0)
    bar = {name: st.column_config.ProgressColumn(name, min_value=0, max_value=most, format="%d")
           for name in ("first vote", "second vote")}
    st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=bar)


def _right_of(tally: Tally) -> str:
    return f"{tally.right} of {tally.answered} right" if tally.answered else "no answer"


def _is_right_label(question: L.Asked, label: str, answer: Answer) -> bool:
    if question.question.kind != "speedup":
        return is_right(question.question, label, answer)
    return speedup_bin(float(answer.value)) == label


def reveal(question: L.Asked, answer: Answer, first: Tally | None = None, second: Tally | None = None,
           mine: dict[int, object] | None = None, explain: bool = True, ask: bool = True) -> None:
    """The question (``ask``), the answer with its figures, the student's own answers (per vote)
    right or wrong, both votes' counts and (``explain``) the step's explanation."""
    if ask:
        st.markdown(f"**{question.text}**")
    st.success(f"Answer: **{question.words(answer.value)}** — {question.figures(answer)}.", icon=":material/check:")
    for number, given in (mine or {}).items():
        if given is None:
            continue
        words = f"You answered {question.words(given)}" + (" (second vote)" if number == 2 else "")
        if is_right(question.question, given, answer):
            st.markdown(f":green-badge[:material/check: right] {words}.")
        else:
            st.markdown(f":red-badge[:material/close: not this time] {words}.")
    if first is not None:
        counts_table(question, first, second, answer)
        st.caption(f"First vote: {_right_of(first)}" + (f"; second vote: {_right_of(second)}" if second else "") + ".")
    if explain and question.preset.explanation:
        st.markdown("**Why:** " + question.preset.explanation)

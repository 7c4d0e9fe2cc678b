"""Class: the teacher puts the class on a lesson step or a setting and sees who is where, puts a
step's question to the class (the students answer on their own pages, the teacher sees the
answers come in, may hold a second vote after the discussion, then reveals the answer measured
on the GPU) and, after class, sees which questions the class got most wrong; every student
submits schedules to a leaderboard per workload that lasts across restarts.

The teacher's token is typed here, compared in constant time, and remembered in this
session's state only: it is never written into the URL."""
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from app import class_mode, diagnosis_panel, questions, server, session, ui
from explorer import classroom
from explorer import lessons as L
from explorer.classroom import rounds
from explorer.errors import ExplorerError
from explorer.measure.remote import server_count
from explorer.presets import get_preset

STUDENTS_REFRESH_S = 2.0
VOTES_REFRESH_S = 1.0  # the teacher sees the answers come in
STATES = {rounds.VOTING: "voting", rounds.CLOSED: "vote closed: the class discusses",
          rounds.REVEALED: "answer revealed", rounds.ENDED: "ended"}


def unlock() -> None:
    given = session.take_widget_value("class.token", "")  # not kept: the session remembers only the outcome
    if classroom.is_teacher(given):
        session.unlock_teacher()
    else:
        session.flash("class.token_error", "That is not the teacher token; the teacher controls stay locked.")


def teacher_login() -> None:
    if not classroom.token_configured():
        st.caption(f"Teacher controls are off on this server: start it with {classroom.TOKEN_ENV}=<a token> in its "
                   "environment to turn them on.")
        return
    with st.form("class.unlock", clear_on_submit=True):
        st.text_input("Teacher token", type="password", key="class.token",
                      help="The token the server was started with. It stays in this session; it is never in a link.")
        st.form_submit_button("Unlock the teacher controls", on_click=unlock, icon=":material/lock_open:")
    token_error = session.flashed("class.token_error")
    if token_error:
        st.error(token_error)


def setting_title(spec, preset_id) -> str:
    preset = get_preset(preset_id) if preset_id else None
    if preset is not None and preset.spec == spec:
        return preset.title
    return f"{spec.template_def.title} · {spec.workload.label()}"


def teacher_controls(store: classroom.Store) -> None:
    lessons = {lesson.id: lesson for lesson in L.lessons()}
    left, middle, right = st.columns([3, 1, 2], vertical_alignment="bottom")
    lesson = lessons[left.selectbox("Lesson", list(lessons), key="class.lesson",
                                    format_func=lambda i: lessons[i].title)]
    number = int(middle.number_input("Step", 1, len(lesson.steps), key="class.step_number"))
    step = lesson.step(number)
    right.caption(step.preset.title)
    one, two, three = st.columns(3)
    if one.button("Put the class on this step", type="primary", icon=":material/campaign:", width="stretch"):
        link = "./lessons?" + urlencode({"lesson": lesson.id, "step": number})
        store.set_class_step("step", step.preset.title, link, lesson=lesson.id, step=number)
    if two.button("Put the class on my current setting", icon=":material/tune:", width="stretch",
                  help="The Explorer's current workload, template and knobs."):
        spec = session.spec()
        link = ui.explorer_link(spec, session.preset_id())
        store.set_class_step("setting", setting_title(spec, session.preset_id()), link)
    if three.button("Clear", icon=":material/close:", width="stretch"):
        store.clear_class_step()
    state = store.class_step()
    st.markdown(f"Now: **{state.banner()}**" if state else "Now: no step set; students explore freely.")
    round_controls(store, lesson, number)
    if state is not None:
        step_diagnosis(state)
    students()
    after_class(store)
    class_gpus(store)


def round_controls(store: classroom.Store, lesson, number: int) -> None:
    """Put the chosen step's question to the class, and move the round along."""
    st.markdown("**Question round**")
    current = store.current_round()
    step = lesson.step(number)
    question = L.asked(step.preset)
    if current is None or current.preset != step.preset.id:
        if question is None:
            asking = ", ".join(str(s.number) for s in lesson.steps if s.preset.question) or "none"
            st.caption(f"Step {number} asks no question; the steps of this lesson that do: {asking}.")
        else:
            st.markdown(f"Step {number} asks: *{question.text}*")
            if st.button("Put this question to the class", type="primary", icon=":material/quiz:",
                         help="The class goes to this step; every student page shows the question, and the step's "
                              "latency waits for your reveal."):
                rounds.open_question(store, question)
                questions.start_measuring(question, class_remote(store))
                st.rerun()
    if current is not None:
        round_view(store, current)


def class_remote(store: classroom.Store):
    """Where the class's measurements run: this session's tracker, the class's, or this server."""
    return session.remote() or classroom.class_remote(store)


def round_view(store: classroom.Store, round_: classroom.Round) -> None:
    try:
        question = rounds.question_of(round_)
    except ExplorerError as error:
        st.caption(str(error))
        return
    vote = " (second vote)" if round_.vote == 2 else ""
    with st.container(border=True):
        st.markdown(f"Round {round_.id} · step {round_.step} · {STATES[round_.state]}{vote}: **{question.text}**")
        buttons = st.columns(3)
        try:
            if round_.state == rounds.VOTING and buttons[0].button("Close the vote", icon=":material/lock:",
                                                                   width="stretch"):
                rounds.close_voting(store, round_)
                st.rerun()
            if (round_.state == rounds.CLOSED and round_.vote == 1
                    and buttons[0].button("Second vote", icon=":material/replay:", width="stretch",
                                          help="After the discussion: every student answers again; the first "
                                               "vote's answers are kept.")):
                rounds.second_vote(store, round_)
                st.rerun()
            if round_.state in (rounds.VOTING, rounds.CLOSED) and buttons[1].button(
                    "Reveal the answer", type="primary", icon=":material/visibility:", width="stretch",
                    help="Closes the vote, measures the two settings on the class's GPU (the lesson's recorded "
                         "figures without one) and shows every student the answer."):
                rounds.reveal(store, round_, questions.answer_here(question, class_remote(store)))
                st.rerun()
            if buttons[2].button("End the round", icon=":material/stop_circle:", width="stretch",
                                 help="The question leaves the students' pages; its answers stay for the view "
                                      "after class."):
                rounds.end(store, round_)
                st.rerun()
        except rounds.RoundRefused as error:
            st.error(str(error))
        if round_.state == rounds.REVEALED:
            answer = rounds.answer_of(round_)
            second = rounds.tally(store, round_, 2, answer) if round_.vote == 2 else None
            questions.reveal(question, answer, rounds.tally(store, round_, 1, answer), second, ask=False)
        else:
            votes_coming_in(store, round_.id)


@st.fragment(run_every=VOTES_REFRESH_S)
def votes_coming_in(store: classroom.Store, round_id: int) -> None:
    """How many students answered and what, while the round is open (the answer not shown)."""
    round_ = store.round(round_id)
    if round_ is None:
        return
    question = rounds.question_of(round_)
    connected = sum(classroom.presence.students().values())
    first = rounds.tally(store, round_, 1)
    second = rounds.tally(store, round_, 2) if round_.vote == 2 else None
    cols = st.columns(2)
    cols[0].metric("Answered, first vote", first.answered, help=f"Of {connected} student session(s) connected now.")
    if second is not None:
        cols[1].metric("Answered, second vote", second.answered, help=f"Of {connected} student session(s) connected.")
    questions.counts_table(question, first, second)


def after_class(store: classroom.Store) -> None:
    """Per revealed question: how many predicted right before and after the discussion, the
    questions the class got most wrong first; every answer as CSV."""
    results = rounds.summary(store)
    with st.expander(f"After class: how the class predicted ({len(results)} question(s) revealed)"):
        if not results:
            st.caption("No answer revealed yet.")
        else:
            st.dataframe(pd.DataFrame([after_class_row(r) for r in results]), hide_index=True, column_config={
                "right, first vote": st.column_config.ProgressColumn(min_value=0, max_value=1, format="percent"),
                "right, second vote": st.column_config.ProgressColumn(min_value=0, max_value=1, format="percent"),
            })
            st.caption("Most wrong first (the first vote's share of right answers). Students are browser sessions; "
                       "no name is kept.")
        st.download_button("Export every answer (CSV)", data=lambda: rounds.csv_text(store),
                           file_name="class-answers.csv", mime="text/csv", on_click="ignore",
                           icon=":material/download:")


def after_class_row(result: rounds.Result) -> dict:
    def share(tally):
        return tally.right / tally.answered if tally and tally.answered else None

    answer = rounds.answer_of(result.round)
    second = result.second
    return {
        "question": f"{result.round.lesson} · step {result.round.step}: {result.question.text}",
        "answer": result.question.words(answer.value),
        "first vote": f"{result.first.right} of {result.first.answered}",
        "right, first vote": share(result.first),
        "second vote": f"{second.right} of {second.answered}" if second else "—",
        "right, second vote": share(second),
    }


def step_diagnosis(state: classroom.ClassStep) -> None:
    """For the class's step: what limits it (the Explorer's diagnosis) and the knobs the
    students moved next from it."""
    spec = classroom.moves.class_spec(state)
    if spec is None:
        return
    if class_mode.holds_back(spec):
        st.caption("What limits this step shows after the reveal: the class is answering a question about it.")
        return
    with st.expander("What limits this step, and what the students moved next", expanded=True):
        moved = classroom.moves.most_moved(state)
        if moved:
            knob, count = moved[0]
            st.markdown(f"Most moved next: **{knob}** ({count} student(s)).")
            st.dataframe(pd.DataFrame(moved, columns=["knob", "students who moved it"]), hide_index=True)
        else:
            st.caption("No student has moved a knob away from this step yet.")
        try:
            built = server.build(spec, session.target())
        except ExplorerError as error:
            st.caption(str(error))
            return
        preset = L.get_lesson(state.lesson).step(state.step).preset.id if state.kind == "step" else None
        diagnosis_panel.panel(built, preset)


def class_gpus(store: classroom.Store) -> None:
    remote = classroom.class_remote(store)
    with st.expander(f"Class GPUs: {remote}" if remote else "Class GPUs: this server's own"):
        st.caption("Leaderboard submissions of every session are measured here. GPU machines that registered under "
                   "one key of a TVM RPC tracker share the work; leave the address empty for this server's GPU.")
        with st.form("class.gpus"):
            left, right = st.columns(2)
            address = left.text_input("Tracker (HOST:PORT)", value=f"{remote.host}:{remote.port}" if remote else "",
                                      key="class.tracker")
            key = right.text_input("Key", value=remote.key if remote else "", key="class.key")
            if st.form_submit_button("Use these GPUs"):
                try:
                    classroom.set_class_remote(store, address, key)
                    st.rerun()
                except ExplorerError as error:
                    st.error(str(error))
        if remote is not None:
            st.caption(f"{server_count(remote)} GPU server(s) registered under key '{remote.key}' now.")


@st.fragment(run_every=STUDENTS_REFRESH_S)
def students() -> None:
    counts = classroom.presence.students()
    st.metric("Students connected", sum(counts.values()),
              help=f"Browser sessions seen in the last {classroom.presence.RECENT_S:.0f} s (not the teacher's).")
    if counts:
        st.dataframe(pd.DataFrame(counts.most_common(), columns=["where", "students"]), hide_index=True)


def board_table(places: list[classroom.Place]) -> pd.DataFrame:
    return pd.DataFrame([{
        "rank": p.rank, "name": p.entry.name, "CUDA graph µs": p.entry.graph_us, "back to back µs": p.entry.median_us,
        "× PyTorch": p.versus_pytorch, "template": p.entry.template,
        "knobs": ", ".join(f"{k}={v}" for k, v in p.entry.knobs.items()),
        "open": "./explorer?" + urlencode(p.entry.query), "measured on": p.entry.server or "",
        "when": pd.Timestamp(p.entry.created, unit="s").strftime("%H:%M"),
    } for p in places])


def show_board(store: classroom.Store, workload: str) -> list[classroom.Place]:
    places = classroom.board(store, workload)
    if not places:
        st.caption("No entries on this board yet.")
    for device in dict.fromkeys(p.entry.device for p in places):
        st.markdown(f"**{device}**")
        st.dataframe(board_table([p for p in places if p.entry.device == device]), hide_index=True, column_config={
            "CUDA graph µs": st.column_config.NumberColumn(format="%.2f"),
            "back to back µs": st.column_config.NumberColumn(format="%.2f"),
            "× PyTorch": st.column_config.NumberColumn(
                format="%.2f", help="PyTorch's time on this GPU over this entry's: above 1, faster than PyTorch."),
            "open": st.column_config.LinkColumn(display_text="open"),
        })
    st.caption("Ranked by the time replayed from a CUDA graph (as PyTorch is timed), back to back where there is none; "
               "entries are compared only with entries measured on the same device.")
    return places


def submit_form(store: classroom.Store) -> None:
    spec = session.spec()
    remote = session.remote() or classroom.class_remote(store)
    if remote is None and not class_mode.can_submit():
        st.info("This board is read-only here: a submission is checked and timed on the server's GPU, and this "
                "server has no GPU and no RPC tracker (Device page).", icon=":material/visibility:")
        return
    with st.form("class.submit"):
        st.text_input("Display name", max_chars=classroom.leaderboard.NAME_MAX, key="class.name",
                      help="1 to 32 characters: letters, digits, spaces, '-', '_' and '.'.")
        submitted = st.form_submit_button(f"Submit my current setting ({setting_title(spec, session.preset_id())})",
                                          type="primary", icon=":material/leaderboard:")
    if not submitted:
        return
    entry, refused = None, None
    with st.status("Checking the kernel against NumPy, then timing it…") as status:
        try:
            entry = classroom.submit(
                store, st.session_state.get("class.name", ""), spec, target=session.target(), remote=remote,
                measure=server.board_measure, pytorch=server.board_pytorch,
                on_wait=lambda ahead: status.update(label=f"Waiting for the GPU: {ahead} measurement(s) ahead…"))
        except ExplorerError as error:
            refused = str(error)
        status.update(label="Not on the board" if refused else "Measured", state="error" if refused else "complete")
    if refused:
        st.error(refused)  # outside the status box, which is folded
    else:
        st.success(f"On the board: {entry.score_us:.2f} µs on {entry.device}.")


def reset_board(store: classroom.Store, workload: str) -> None:
    store.reset_board(workload)
    session.set_widget("class.confirm_reset", False)


def teacher_board_tools(store: classroom.Store, workload: str, places: list[classroom.Place]) -> None:
    with st.expander("Teacher: hide an entry, reset this board"):
        if places:
            entry = st.selectbox("Entry", [p.entry for p in places], key="class.hide_entry",
                                 format_func=lambda e: f"{e.name} · {e.score_us:.2f} µs · {e.device}")
            st.button("Hide this entry", icon=":material/visibility_off:", on_click=store.hide_entry, args=(entry.id,))
        if st.checkbox("I want to remove every entry of this board", key="class.confirm_reset"):
            st.button("Reset this board", type="primary", icon=":material/delete:", on_click=reset_board,
                      args=(store, workload))


session.sync_url()
class_mode.show("Class")
st.title("Class")
store = class_mode.store()

st.header("Teacher")
if session.is_teacher():
    teacher_controls(store)
else:
    teacher_login()

st.header("Leaderboard")
current = session.spec().workload.label()
workloads = list(dict.fromkeys([current, *store.workloads()]))
workload = st.selectbox("Workload", workloads, key="class.workload", help="One board per workload (shape included).")
submit_form(store)  # before the board, so that a submission is on it at once
places = show_board(store, workload)
if session.is_teacher():
    teacher_board_tools(store, workload, places)

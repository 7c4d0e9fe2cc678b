"""Lessons: a tutorial step by step. Each step says what changed and why it should help,
states the tutorial's claim with its numbers, and checks it: static claims on the build
shown, timing claims on this machine's GPU when there is one.

The lesson and the step live in the URL (``?lesson=depthwise_blog&step=8``), so a teacher can
hand out a link to any step; a link to a lesson or a step that does not exist says so.
"""
import functools

import streamlit as st

from app import class_mode, questions, server, session, ui
from explorer import lesson_reasons as R
from explorer import lessons as L
from explorer import style
from explorer.errors import ExplorerError
from explorer.questions import is_right
from explorer.targets import target_label
from explorer.units import byte_size, count

MEASURED = "lessons.measured"  # (device, target, preset id) -> lesson_reasons.MeasuredStep, this session
PREDICTIONS = "lessons.predictions"  # preset id -> (the student's prediction, explorer.questions.Answer), this session
PREDICT = "lessons.predict"  # the "predict first" toggle


def restart_lesson() -> None:
    session.set_widget(session.STEP, 1)


def badge(verdict: str, container=st) -> None:
    colour, icon = style.VERDICT_BADGES[verdict]
    container.badge(verdict, icon=icon, color=colour)


def knob_table(step: L.Step) -> str:
    """The step's knobs as a markdown table; those changed from the previous step are
    highlighted, with their previous value."""
    knobs = step.preset.spec.knobs
    before = step.previous.spec.knobs if step.previous is not None else None
    same_template = before is not None and type(before) is type(knobs)
    lines = ["| knob | value | previous step |", "| --- | --- | --- |"]
    for knob in knobs.fields():
        value = knob.format(getattr(knobs, knob.name))
        if knob.name in step.changed_knobs:
            was = knob.format(getattr(before, knob.name)) if same_template else "(another template)"
            mark = style.CHANGED_KNOB_HIGHLIGHT
            lines.append(f"| :{mark}-background[**{knob.name}**] | :{mark}-background[**{value}**] | {was} |")
        else:
            lines.append(f"| {knob.name} | {value} | |")
    return "\n".join(lines)


def show_knobs(step: L.Step) -> None:
    if step.previous is None:
        st.caption("The first step: every knob as the tutorial sets it.")
    else:
        changed = ", ".join(step.changed_knobs) or "none"
        shape = ", ".join(step.changed_shape)
        st.markdown(f"Changed from step {step.number - 1}: **{changed}**" + (f"; shape: **{shape}**" if shape else ""))
    with st.expander("All knobs of this step", expanded=bool(step.changed_knobs)):
        st.markdown(knob_table(step))


def show_static(checks: tuple[L.StaticCheck, ...]) -> None:
    if not checks:
        return
    st.markdown("**Structural claims**, checked on the build of this step")
    lines = ["| fact | the claim says | this build | verdict |", "| --- | --- | --- | --- |"]
    for check in checks:
        colour, icon = style.VERDICT_BADGES[check.verdict]
        actual = L.format_fact(check.actual) if check.actual is not None else f"— ({check.error})"
        lines.append(f"| {check.label} | {L.format_fact(check.claimed)} | {actual} | "
                     f":{colour}-badge[{icon} {check.verdict}] |")
    st.markdown("\n".join(lines))


def show_timing(step: L.Step, checks: tuple[L.ComparisonCheck, ...], measured: dict, sm_count) -> None:
    """Each timing claim with the tutorial's and this GPU's figures and its verdict; a
    measured claim that is not reproduced says why it may differ (``sm_count()`` gives
    the GPU's SMs, or None)."""
    if not checks:
        return
    st.markdown("**Timing claims**")
    for check in checks:
        with st.container(border=True):
            st.markdown(check.sentence(step.preset))
            cols = st.columns([3, 3, 2])
            if check.tutorial is not None:
                t = check.tutorial
                cols[0].metric(f"Tutorial · {t.where}", f"{t.this_us:g} vs {t.other_us:g} µs", f"ratio ×{t.ratio:.2f}",
                               delta_color="off", delta_arrow="off")
            else:
                cols[0].metric("Tutorial", "—", help="The tutorial gives no time for one of the two schedules.")
            if check.measured is not None:
                m = check.measured
                cols[1].metric(f"This GPU · {m.where}", f"{m.this_us:.2f} vs {m.other_us:.2f} µs",
                               f"ratio ×{m.ratio:.2f}", delta_color="off", delta_arrow="off")
            else:
                cols[1].metric("This GPU", "—", help=check.measure_error or "Measured only on a machine with a GPU.")
            with cols[2]:
                badge(check.verdict)
            if check.measure_error:
                st.caption(check.measure_error)
            elif check.measured is not None and check.verdict != L.REPRODUCED:
                why = R.reasons(check, step.number, measured[step.preset.id], measured.get(check.other.id), sm_count())
                st.markdown(f"**Why it may differ:** {why}")


def show_evidence(step: L.Step, target: str) -> None:
    built = server.build(step.preset.spec, target)
    ev = R.evidence(built)
    st.markdown(f"**Static evidence** for {target_label(built.target)} (no kernel run)")
    cols = st.columns(4)
    cols[0].metric("Worst bank conflict", f"{ev.bank_conflict_degree}-way" if ev.bank_conflict_degree else "—",
                   help="The most distinct words one bank serves for one warp-wide shared load (1 = none).")
    cols[1].metric("Input loads per output", f"{ev.loads_per_output:.2f}" if ev.loads_per_output is not None else "—",
                   help="Each thread loads its input tile once: smaller is more reuse.")
    cols[2].metric("Shared memory / block", byte_size(ev.shared_bytes), help=f"{ev.shared_bytes:,} bytes")
    cols[3].metric("Occupancy", f"{ev.occupancy:.0%}", f"{count(ev.blocks_per_sm, 'block')}/SM", delta_color="off",
                   delta_arrow="off", help=f"Limited by {ev.occupancy_limiter}. Registers are not counted until the "
                                           f"kernel is compiled (Explorer page, Resources tab).")
    if ev.notes:
        st.caption(" ".join(ev.notes))


def measure_step(step: L.Step, device: tuple, measure_spec, target: str) -> None:
    """Time this step and the steps its claims compare it with (once per session and device;
    a failed measurement is tried again)."""
    measured = session.memo(MEASURED)
    todo = [p for p in L.presets_to_time([step.preset])
            if (*device, p.id) not in measured or measured[(*device, p.id)].median_us is None]
    with st.status(f"Measuring {len(todo)} kernel(s), each checked against NumPy first…") as status:
        found = R.measure_steps(
            todo, measure_spec, functools.partial(server.build, target=target),
            on_done=lambda p, us, error: status.write(f"{p.title}: " + (f"{us:.2f} µs" if us is not None else error)))
        timed = sum(m.median_us is not None for m in found.values())
        status.update(label=f"Measured {timed} kernel(s)", state="complete" if timed == len(found) else "error")
    measured.update({(*device, pid): m for pid, m in found.items()})


def score() -> str:
    """This session's predictions: how many were right."""
    made = session.memo(PREDICTIONS)
    right = sum(is_right(L.all_presets()[pid].question, given, answer) for pid, (given, answer) in made.items())
    return f"Your predictions this session: {right} right of {len(made)}." if made else "No prediction yet."


def predict_first(question: L.Asked) -> bool:
    """The step's question before its measurement: False while the student has not predicted
    (the page stops after the step's code), True once the answer is shown."""
    made = session.memo(PREDICTIONS)
    with st.container(border=True):
        st.markdown(":material/psychology: **Predict first**")
        if question.preset.id in made:
            given, answer = made[question.preset.id]
            questions.reveal(question, answer, mine={1: given}, explain=False)
            return True
        questions.settings_links(question)
        given = questions.answer_form(question, f"lessons.predict.{question.preset.id}", label="Lock in my prediction")
    if given is None:
        st.caption("The step's claim, figures and latency show once you have predicted.")
        questions.code_tabs(question.preset.spec, "lessons.question_view")
        return False
    made[question.preset.id] = (given, questions.answer_here(question, session.remote()))
    st.rerun()


lessons = {lesson.id: lesson for lesson in L.lessons()}  # in the curriculum's order
st.title("Lessons")
unknown = session.follow_lesson_link({i: len(lesson.steps) for i, lesson in lessons.items()},
                                     {i: lesson.title for i, lesson in lessons.items()})
if unknown:
    st.warning(ui.plain(unknown, limit=400))  # the link's text, shown as text
lesson_id = st.selectbox("Lesson", list(lessons), key=session.LESSON, on_change=restart_lesson,
                         format_func=ui.lesson_label)
lesson = lessons[lesson_id]
source = f"[{lesson.source}]({lesson.url})" if lesson.url else lesson.source
st.caption(lesson.summary + (f" — source: {source}" if source else ""))
number = st.pagination(len(lesson.steps), key=session.STEP, max_visible_pages=12)
session.sync_lesson_url(lesson_id, number)
step = lesson.step(number)
class_mode.show(class_mode.lesson_place(lesson_id, number))
preset = step.preset
target = session.target()

question = L.asked(preset)
session.keep_widget(PREDICT, (True, False), False)
left, right = st.columns([1, 3], vertical_alignment="center")
predicting = left.toggle("Predict first", key=PREDICT,
                         help="A step with a question asks it before it shows its claim, figures and latency.")
if predicting:
    right.caption(score())

st.header(f"Step {step.number} of {len(lesson.steps)}: {preset.title}")
st.caption(f"{preset.spec.workload.label()} · {preset.source}")
st.link_button("Open this step in the Explorer", ui.explorer_link(preset.spec, preset.id),
               icon=":material/open_in_new:",
               help="The Explorer with this preset's knobs, in a new tab: move the knobs from there.")
show_knobs(step)
if class_mode.holds_back(preset.spec):
    st.caption("The class is answering a question about this step (above): its claim, figures and latency show "
               "after the reveal.")
    questions.code_tabs(preset.spec, "lessons.question_view")
    st.stop()
if predicting and question is not None and not predict_first(question):
    st.stop()
if preset.explanation:
    st.write(preset.explanation)

st.subheader("The claim")
st.info(preset.claim)
step_verdict = st.empty()  # filled once the claims are checked below
if preset.reported:
    st.markdown("Reported by the tutorial: " + "; ".join(str(r) for r in preset.reported))

try:
    statics = L.static_checks(preset, target)
    show_static(statics)
    # Through the server's one measuring queue: a step a student just measured is not timed again.
    remote = session.remote()
    where = str(remote) if remote is not None else (server.live().gpu_name() or "")
    device = (where, target)
    if where and L.presets_to_time([preset]) and st.button(
            "Measure on this GPU", type="primary", icon=":material/timer:",
            help="This step and the steps it is compared with: each kernel is checked against NumPy, then timed."):
        measure_step(step, device, functools.partial(server.live().measure_now, target=target, remote=remote),
                     target)
    found = {pid: m for (*d, pid), m in session.memo(MEASURED).items() if tuple(d) == device}
    times = {pid: m.median_us for pid, m in found.items() if m.median_us is not None}
    errors = {pid: m.error for pid, m in found.items() if m.error}
    timings = L.step_checks(preset, times, where, errors)
    # The SMs are known only for this machine's GPU: a remote one's reasons go without them.
    show_timing(step, timings, found, R.local_sm_count if remote is None else lambda: None)
    verdict = L.overall(c.verdict for c in (*statics, *timings))
    if verdict is not None:
        badge(verdict, step_verdict.container())
    show_evidence(step, target)
except ExplorerError as e:
    st.error(str(e))
if preset.found_by:
    st.caption(f"Found by: `{preset.found_by}`")

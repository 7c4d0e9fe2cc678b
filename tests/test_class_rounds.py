"""A question round: the teacher puts a step's question to the class, the students answer on
their own pages (and may change their answer until the vote closes), a second vote after the
discussion, the reveal; the answers kept in the class's SQLite file through a restart, the
teacher's view after class and the CSV export. Under AppTest with several sessions (no GPU
here: the answer comes from the lesson's recorded figures, and says so), and the bookkeeping
(explorer.classroom.rounds) directly."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_classroom import STORE_ALONE
from test_classroom_app import TOKEN, page, unlocked_teacher

from app import handle, latency, session
from explorer import classroom
from explorer import lessons as L
from explorer.classroom import presence, rounds, store
from explorer.questions import recorded_answer

ROOT = Path(__file__).resolve().parent.parent
LESSON, STEP = "depthwise_blog", 15  # "Will step 15 be faster than step 14?": slower (13.59 vs 10.03 µs on the H100)


@pytest.fixture(autouse=True)
def class_server(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CLASS_DB", str(tmp_path / "class.sqlite3"))
    monkeypatch.setenv("EXPLORER_TEACHER_TOKEN", TOKEN)


def question():
    return L.asked(L.get_lesson(LESSON).step(STEP).preset)


def teacher_on_the_step() -> AppTest:
    at = unlocked_teacher()
    at.selectbox(key="class.lesson").set_value(LESSON).run()
    at.number_input(key="class.step_number").set_value(STEP).run()
    return at


def click(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def answer(at: AppTest, given: str) -> AppTest:
    """A student answers the class's question on whatever page the student is."""
    radio = next(r for r in at.radio if r.key.startswith("class.round."))
    radio.set_value(given)
    label = next(b.label for b in at.button if b.label in ("Answer", "Change my answer"))
    return click(at, label)


def counts(at: AppTest) -> dict[str, list[int]]:
    """The teacher's table of answers: answer -> [first vote, second vote]."""
    table = next(d.value for d in at.dataframe if "first vote" in d.value.columns)
    columns = [c for c in ("first vote", "second vote") if c in table.columns]
    return {row["answer"]: [int(row[c]) for c in columns] for _, row in table.iterrows()}


def restart_the_server(monkeypatch) -> None:
    """What a restart loses: the process's open class files and its presence counts."""
    monkeypatch.setattr(store, "_stores", {})
    monkeypatch.setattr(presence, "_seen", {})


def test_a_round_three_students_answer_the_teacher_reveals_and_a_restart_keeps_it(monkeypatch):
    teacher = teacher_on_the_step()
    assert f"Step {STEP} asks: *{question().text}*" in [m.value for m in teacher.markdown]
    click(teacher, "Put this question to the class")
    assert any("· voting: **Will step 15 be faster" in m.value for m in teacher.markdown)

    # Three students: one on the step's page, two elsewhere; every page shows the question.
    students = [page("views/lessons.py", {"lesson": LESSON, "step": str(STEP)}), page("views/lessons.py"),
                page("views/explorer.py")]
    on_step = students[0]
    assert "The claim" not in [s.value for s in on_step.subheader]  # nothing gives the answer away yet
    assert any("show after the reveal" in c.value for c in on_step.caption) and on_step.tabs
    for student, given in zip(students, ["slower", "faster", "slower"], strict=True):
        answer(student, given)
        assert any(f"Your answer: **{given}**" in c.value for c in student.caption)
    answer(students[1], "same")  # changed before the vote closes: still one answer
    teacher.run()
    assert counts(teacher) == {"faster": [0], "about the same": [1], "slower": [2]}
    assert [m.value for m in teacher.metric if m.label == "Answered, first vote"] == ["3"]
    assert not any(s.value.startswith("Answer:") for s in teacher.success)  # the teacher's screen keeps it too

    click(teacher, "Close the vote")
    students[1].run()
    assert not [r for r in students[1].radio if r.key.startswith("class.round.")]  # no form once closed
    assert any("The vote is closed" in i.value for i in students[1].info)
    assert not classroom.open_store().cast_vote(1, 1, "late", "faster")  # a late answer is not taken

    click(teacher, "Second vote")
    for student in students:
        student.run()
        answer(student, "slower")  # after the discussion
    click(teacher, "Reveal the answer")
    expected = recorded_answer(question().question)  # no GPU here: the lesson's recorded figures
    assert expected.value == "slower" and not expected.measured
    reveal = f"Answer: **slower** — {question().figures(expected)}."
    assert reveal in [s.value for s in teacher.success]
    assert "recorded figures (NVIDIA H100 80GB HBM3), not measured here" in reveal
    assert counts(teacher) == {"faster": [0, 0], "about the same": [1, 0], "slower": [2, 3]}
    for student in students:
        student.run()
        assert reveal in [s.value for s in student.success]
    assert any("You answered about the same" in m.value and "not this time" in m.value for m in students[1].markdown)
    assert any("You answered slower (second vote)" in m.value and "right" in m.value for m in students[1].markdown)
    assert "The claim" in [s.value for s in students[0].subheader]  # the step's page shows everything again
    assert any(m.value.startswith("**Why:**") for m in students[1].markdown)  # the explanation, on another page

    restart_the_server(monkeypatch)
    teacher = teacher_on_the_step()  # a new session of the restarted server
    assert reveal in [s.value for s in teacher.success]
    assert counts(teacher) == {"faster": [0, 0], "about the same": [1, 0], "slower": [2, 3]}
    after = next(d.value for d in teacher.dataframe if "right, first vote" in d.value.columns)
    assert list(after["first vote"]) == ["2 of 3"] and list(after["second vote"]) == ["3 of 3"]
    assert reveal in [s.value for s in page("views/lessons.py").success]  # and a new student's page

    # The file itself, read by another process: both votes of every student and the answer.
    read = STORE_ALONE + ("round = store.rounds()[-1]\n"
                          "print(json.dumps([round.answer, [(v.vote, v.answer) for v in store.votes(round.id)]]))")
    out = subprocess.run([sys.executable, "-c", read, str(classroom.default_path())], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    saved, votes = json.loads(out)
    assert json.loads(saved)["value"] == "slower" and sorted(map(tuple, votes)) == sorted(
        [(1, "slower"), (1, "same"), (1, "slower"), (2, "slower"), (2, "slower"), (2, "slower")])


def test_the_teachers_own_pages_show_the_question_without_a_form_and_the_students_lessons_page_holds_back():
    teacher = teacher_on_the_step()
    click(teacher, "Put this question to the class")
    assert any("What limits this step shows after the reveal" in c.value for c in teacher.caption)
    teacher.switch_page("views/lessons.py").run()  # the teacher's own session on a student page
    assert teacher.session_state[session.TEACHER] and question().text in [m.value for m in teacher.markdown]
    assert not [r for r in teacher.radio if r.key.startswith("class.round.")]
    assert any("The students answer on their pages" in c.value for c in teacher.caption)
    teacher.switch_page("views/classroom.py").run()
    explorer = page("views/explorer.py", {"preset": question().preset.id})
    claim = f"**Step {STEP}: {question().preset.title}**"
    assert not any(m.value.startswith(claim) for m in explorer.markdown)  # the claim waits for the reveal
    click(teacher, "End the round")
    assert any(m.value.startswith(claim) for m in page("views/explorer.py", {"preset": question().preset.id}).markdown)


def test_predict_first_asks_each_steps_question_before_its_claim_and_keeps_the_score():
    at = page("views/lessons.py", {"lesson": LESSON, "step": str(STEP)})
    assert "The claim" in [s.value for s in at.subheader]  # off: the page as it always was
    at.toggle(key="lessons.predict").set_value(True).run()
    assert "The claim" not in [s.value for s in at.subheader] and at.tabs  # the step's code, not its claim
    at.radio(key="lessons.predict.dw-blog-kernel5-96.value").set_value("faster")
    click(at, "Lock in my prediction")
    assert any("You answered faster" in m.value and "not this time" in m.value for m in at.markdown)
    assert any(s.value.startswith("Answer: **slower**") for s in at.success)
    assert "The claim" in [s.value for s in at.subheader]
    assert "Your predictions this session: 0 right of 1." in [c.value for c in at.caption]

    at.session_state["step"] = 9  # the next step: what limits it?
    at.run()
    at.radio(key="lessons.predict.dw-blog-threads-case3.value").set_value("grid")
    click(at, "Lock in my prediction")
    assert any("You answered grid" in m.value and "right" in m.value for m in at.markdown)
    assert "Your predictions this session: 1 right of 2." in [c.value for c in at.caption]


# -- the bookkeeping ---------------------------------------------------------------------------


def test_a_vote_is_taken_only_while_it_is_open(tmp_path):
    s = classroom.Store(tmp_path / "c.sqlite3")
    round_ = rounds.open_question(s, question())
    assert s.class_step().step == STEP  # the class goes to the question's step
    rounds.vote(s, round_, "ann", "faster")
    rounds.vote(s, round_, "ann", "slower")  # changed: one answer
    with pytest.raises(rounds.RoundRefused, match="Give one of the choices"):
        rounds.vote(s, round_, "bo", "quicker")
    assert [(v.session, v.answer) for v in s.votes(round_.id)] == [("ann", "slower")]
    closed = rounds.close_voting(s, round_)
    with pytest.raises(rounds.RoundRefused, match="closed this vote; your answer was not changed"):
        rounds.vote(s, closed, "ann", "faster")
    with pytest.raises(rounds.RoundRefused, match="Cannot close the vote: the round is closed now"):
        rounds.close_voting(s, round_)
    again = rounds.second_vote(s, closed)
    with pytest.raises(rounds.RoundRefused, match="had its second vote"):
        rounds.second_vote(s, again)
    rounds.vote(s, again, "ann", "slower")
    assert rounds.my_answer(s, again, "ann", 1) == "slower" and rounds.my_answer(s, again, "bo") is None
    shown = rounds.reveal(s, again, recorded_answer(question().question))
    assert rounds.answer_of(shown).value == "slower" and s.current_round() == shown
    rounds.end(s, shown)
    assert s.current_round() is None  # off the students' pages ...
    assert len(rounds.summary(s)) == 1  # ... and in the view after class


def test_opening_a_question_ends_the_round_before_it(tmp_path):
    s = classroom.Store(tmp_path / "c.sqlite3")
    first = rounds.open_question(s, question())
    second = rounds.open_question(s, L.asked(L.get_lesson(LESSON).step(9).preset))
    assert s.round(first.id).state == rounds.ENDED and s.current_round() == second


def test_after_class_the_questions_most_got_wrong_come_first_and_the_csv_names_no_one(tmp_path):
    s = classroom.Store(tmp_path / "c.sqlite3")
    asked = {n: L.asked(L.get_lesson(LESSON).step(n).preset) for n in (STEP, 9)}  # slower; grid
    given = {STEP: ["slower", "slower", "faster"], 9: ["spills", "grid", "reuse"]}
    for n in (STEP, 9):
        round_ = rounds.open_question(s, asked[n])
        for i, g in enumerate(given[n]):
            rounds.vote(s, round_, f"session-{i}", g)
        rounds.reveal(s, round_, recorded_answer(asked[n].question))
    results = rounds.summary(s)
    assert [(r.round.step, r.first.right, r.first.answered) for r in results] == [(9, 1, 3), (STEP, 2, 3)]
    text = rounds.csv_text(s)
    lines = text.splitlines()
    assert lines[0].split(",") == list(rounds.CSV_COLUMNS) and len(lines) == 7
    assert "session-0" not in text and rounds.student_label("session-0") in text
    assert text.count(",yes,") == 3 and text.count(",no,") == 3


def test_a_round_survives_a_new_store_on_the_same_file(tmp_path):
    path = tmp_path / "c.sqlite3"
    round_ = rounds.open_question(classroom.Store(path), question())
    rounds.vote(classroom.Store(path), round_, "ann", "slower")
    again = classroom.Store(path)
    assert again.current_round() == round_ and [v.answer for v in again.votes(round_.id)] == ["slower"]
    assert again.schema_version() == len(store.MIGRATIONS)


def test_on_a_gpu_the_round_measures_both_settings_through_the_servers_queue(monkeypatch):
    """A stand-in GPU: the server's measurer (Server.measurer, through its one queue) times the two
    settings, asked for in the background when the round opens; the reveal shows its figures."""
    server = handle.server()
    asked_for, measured = [], []
    times = {question().settings[0].spec: 3.0, question().settings[1].spec: 6.0}  # step 15 twice as fast here

    def measurer(target, remote):
        return lambda spec: measured.append(spec) or times[spec]

    monkeypatch.setattr(latency, "can_measure", lambda: True)
    monkeypatch.setattr(server, "request", lambda session, spec, *a, **k: asked_for.append((session, spec, k)))
    monkeypatch.setattr(server, "measurer", measurer)
    monkeypatch.setattr(server, "gpu_name", lambda: "Test GPU")
    teacher = teacher_on_the_step()
    click(teacher, "Put this question to the class")
    assert asked_for == [(None, p.spec, {"background": True}) for p in question().settings]
    answer(page("views/lessons.py"), "slower")
    click(teacher, "Reveal the answer")
    assert sorted(measured, key=str) == sorted(times, key=str)
    assert (f"Answer: **faster** — step 14 6.00 µs → step {STEP} 3.00 µs: ×2.00 faster, measured on Test GPU."
            in [s.value for s in teacher.success])
    table = next(d.value for d in teacher.dataframe if "right" in d.value.columns)
    assert counts(teacher)["slower"] == [1] and list(table[table["right"] == "✓"]["answer"]) == ["faster"]

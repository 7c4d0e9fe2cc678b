"""The Class page and the class banner under AppTest: the teacher's token (refused when
wrong, never in the URL), a second session following the teacher's step, the leaderboard
read-only without a GPU, and a submission through the page (with a stand-in measurement,
since this machine has no GPU)."""
import dataclasses

import pytest
from streamlit.testing.v1 import AppTest

from app import class_mode, server, session
from explorer import lessons as L
from explorer.measure import Measurement, Timing
from explorer.measure.gate import Check

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")
TOKEN = "class-token-42"


@pytest.fixture(autouse=True)
def class_server(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CLASS_DB", str(tmp_path / "class.sqlite3"))
    monkeypatch.setenv("EXPLORER_TEACHER_TOKEN", TOKEN)


def page(view: str, query=None) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    if query:
        at.query_params.update(query)
    at.switch_page(view).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def unlocked_teacher() -> AppTest:
    at = page("views/classroom.py")
    at.text_input(key="class.token").input(TOKEN)
    at.button[0].click().run()
    assert at.session_state[session.TEACHER]
    return at


def banner(at: AppTest) -> list[str]:
    return [info.value for info in at.info if info.value.startswith("The class is on")]


def link_urls(at: AppTest) -> list[str]:
    return [element.proto.url for element in at.get("link_button")]


def url_text(at: AppTest) -> str:
    return " ".join(f"{key}={value}" for key, value in at.query_params.items())


def test_without_a_server_token_there_are_no_teacher_controls(monkeypatch):
    monkeypatch.delenv("EXPLORER_TEACHER_TOKEN")
    at = page("views/classroom.py")
    assert any("Teacher controls are off" in c.value for c in at.caption)
    assert len(at.text_input) == 0


def test_a_wrong_token_is_refused_and_the_right_one_never_reaches_the_url():
    at = page("views/classroom.py")
    at.text_input(key="class.token").input("guess")
    at.button[0].click().run()
    assert [e.value for e in at.error] == ["That is not the teacher token; the teacher controls stay locked."]
    assert session.TEACHER not in at.session_state or not at.session_state[session.TEACHER]
    assert "Put the class on this step" not in [b.label for b in at.button]
    at = unlocked_teacher()
    assert "Put the class on this step" in [b.label for b in at.button]
    assert TOKEN not in url_text(at) and "class.token" not in at.session_state
    at.switch_page("views/lessons.py").run()  # another page writes the URL too
    assert TOKEN not in url_text(at)


def test_a_second_session_sees_the_teachers_step_and_the_teacher_sees_it():
    lesson = L.lessons()[0]
    teacher = unlocked_teacher()
    teacher.number_input(key="class.step_number").set_value(3).run()
    next(b for b in teacher.button if b.label == "Put the class on this step").click().run()
    title = lesson.step(3).preset.title
    student = page("views/lessons.py")  # on step 1: exploring elsewhere, not moved
    assert banner(student) == [f"The class is on step 3: {title}"]
    assert f"./lessons?lesson={lesson.id}&step=3" in link_urls(student)
    assert not any(TOKEN in url for url in [*link_urls(student), *link_urls(teacher), url_text(teacher)])
    assert student.session_state["step"] == 1
    on_step = page("views/lessons.py", {"lesson": lesson.id, "step": "3"})
    assert banner(on_step) == [f"The class is on step 3: {title} (this page)"]
    assert banner(page("views/explorer.py")) == [f"The class is on step 3: {title}"]
    teacher.run()
    assert teacher.metric[0].label == "Students connected" and int(teacher.metric[0].value) >= 3
    where = teacher.dataframe[0].value
    assert where.set_index("where")["students"][f"{lesson.id} · step 3"] >= 1
    next(b for b in teacher.button if b.label == "Clear").click().run()
    assert banner(page("views/lessons.py")) == []


def test_the_teacher_can_put_the_class_on_a_setting():
    teacher = unlocked_teacher()
    next(b for b in teacher.button if b.label == "Put the class on my current setting").click().run()
    student = page("views/lessons.py")
    assert banner(student)[0].startswith("The class is on: ")
    assert any(url.startswith("./explorer?template=") and "knob." in url for url in link_urls(student))


def test_without_a_gpu_the_board_is_read_only():
    at = page("views/classroom.py")
    assert any("read-only" in info.value for info in at.info)
    assert "Display name" not in [t.label for t in at.text_input]


def measured(spec, **options) -> Measurement:
    """A stand-in for the GPU: a correct kernel at 4 µs (CUDA graph) and 5 µs (back to back)."""
    times = [Timing.from_seconds([us * 1e-6] * 3, 1) for us in (5.0, 4.0)]
    return Measurement("w", "cuda", "Test GPU", Check(True, 0.0, 1.0, 0, None), times[0], None, 1, 1, 0.0, times[1])


def test_a_submission_reaches_the_board_and_an_html_name_is_refused(monkeypatch):
    monkeypatch.setattr(class_mode, "can_submit", lambda: True)
    monkeypatch.setattr(server, "board_measure", measured)
    monkeypatch.setattr(server, "board_pytorch", lambda workload: 8.0)
    at = page("views/classroom.py")
    at.text_input(key="class.name").input("<b>Eve</b>")
    next(b for b in at.button if b.label.startswith("Submit my current setting")).click().run()
    assert any("not '<'" in e.value for e in at.error)
    right = measured(None)
    wrong = dataclasses.replace(right, check=Check(False, 0.5, 1e-3, 1, (0, 2, 1, 0), 0.25, 0.75), timing=None)
    monkeypatch.setattr(server, "board_measure", lambda spec, **options: wrong)
    at.text_input(key="class.name").input("Eve")
    next(b for b in at.button if b.label.startswith("Submit my current setting")).click().run()
    assert [e.value for e in at.error] == [f"Not on the board: the kernel's output is {wrong.check.describe()}."]
    assert "wrong at index (0, 2, 1, 0): expected 0.25, got 0.75" in at.error[0].value
    assert len(at.dataframe) == 0  # the board is still empty
    monkeypatch.setattr(server, "board_measure", measured)
    at.text_input(key="class.name").input("Ann Lee")
    next(b for b in at.button if b.label.startswith("Submit my current setting")).click().run()
    assert not at.error and "On the board: 4.00 µs on Test GPU." in [s.value for s in at.success]
    table = at.dataframe[0].value
    assert list(table["name"]) == ["Ann Lee"] and table["× PyTorch"][0] == pytest.approx(2.0)
    assert table["open"][0].startswith("./explorer?template=")
    other = page("views/classroom.py")  # another session, same board
    assert list(other.dataframe[0].value["name"]) == ["Ann Lee"]


def test_the_teacher_hides_an_entry_resets_a_board_and_sets_the_class_gpus(monkeypatch):
    monkeypatch.setattr(class_mode, "can_submit", lambda: True)
    monkeypatch.setattr(server, "board_measure", measured)
    # No PyTorch time beside the entries (what this machine's measuring worker answers, without starting it:
    # a process that imports TVM): this test is about the teacher's controls, not the ratio.
    monkeypatch.setattr(server, "board_pytorch", lambda workload: None)
    student = page("views/classroom.py")
    for name in ("Ann", "Bo"):
        student.text_input(key="class.name").input(name)
        next(b for b in student.button if b.label.startswith("Submit my current setting")).click().run()
    teacher = unlocked_teacher()
    assert sorted(teacher.dataframe[-1].value["name"]) == ["Ann", "Bo"]
    teacher.selectbox(key="class.hide_entry").select_index(0).run()
    next(b for b in teacher.button if b.label == "Hide this entry").click().run()
    assert len(teacher.dataframe[-1].value) == 1
    teacher.checkbox(key="class.confirm_reset").check().run()
    next(b for b in teacher.button if b.label == "Reset this board").click().run()
    assert "No entries on this board yet." in [c.value for c in teacher.caption]

    monkeypatch.setattr(class_mode, "can_submit", lambda: False)  # no GPU here: the class's GPUs measure
    assert any("read-only" in info.value for info in page("views/classroom.py").info)
    teacher.text_input(key="class.tracker").input("nowhere")
    next(b for b in teacher.button if b.label == "Use these GPUs").click().run()
    assert any("HOST:PORT" in e.value for e in teacher.error)
    teacher.text_input(key="class.tracker").input("127.0.0.1:1")
    teacher.text_input(key="class.key").input("h100")
    next(b for b in teacher.button if b.label == "Use these GPUs").click().run()
    assert any(e.label.startswith("Class GPUs: 127.0.0.1:1 key h100") for e in teacher.expander)
    assert "Display name" in [t.label for t in page("views/classroom.py").text_input]


def test_the_banners_of_many_sessions_share_one_read_of_the_class_step(monkeypatch):
    teacher = unlocked_teacher()
    next(b for b in teacher.button if b.label == "Put the class on this step").click().run()
    reads = []
    store = class_mode.store()
    real = store.class_step
    monkeypatch.setattr(store, "class_step", lambda: reads.append(1) or real())
    monkeypatch.setitem(store._shared, "step", (__import__("time").monotonic(), real()))  # read just now
    students = [page("views/lessons.py") for _ in range(3)]
    assert all(banner(s) and banner(s)[0].startswith("The class is on step 1") for s in students)
    assert reads == []  # served from the server's one read of the last second

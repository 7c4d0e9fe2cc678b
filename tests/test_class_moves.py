"""What the students moved next from the class's step (explorer.classroom.moves) and the
Class page's section for it: the step's diagnosis and the most moved knob (AppTest)."""
from urllib.parse import urlencode

import pytest
from streamlit.testing.v1 import AppTest

from app import diagnosis_panel, handle, session
from explorer import urlstate
from explorer.classroom import ClassStep, moves
from explorer.errors import ExplorerError
from explorer.lessons import get_lesson
from explorer.presets import get_preset
from explorer.server.diagnosing import NOT_DIAGNOSED

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")
TOKEN = "class-token-42"
STEP = 4  # depthwise_blog: dw-blog-channel-96
THREAD_X, THREAD_Y = "knob:depthwise_blog.num_thread_x", "knob:depthwise_blog.num_thread_y"

pytestmark = pytest.mark.usefixtures("diagnoses_in_this_process", "assumed_calibration")


@pytest.fixture(autouse=True)
def class_server(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CLASS_DB", str(tmp_path / "class.sqlite3"))
    monkeypatch.setenv("EXPLORER_TEACHER_TOKEN", TOKEN)
    moves.forget()


def state(set_at=1.0) -> ClassStep:
    return ClassStep("step", "depthwise_blog", STEP, "title", "./lessons?lesson=depthwise_blog&step=14", set_at)


def test_a_move_counts_only_when_it_leaves_the_class_step():
    start = get_preset("dw-blog-channel-96").spec
    assert moves.class_spec(state()) == start
    assert moves.record("a", state(), start, start.with_knobs(num_thread_x=16)) == ("num_thread_x",)
    assert moves.record("a", state(), start, start.with_knobs(num_thread_x=32)) == ("num_thread_x",)  # once a session
    both = start.with_knobs(num_thread_x=16, unroll=True)
    assert moves.record("b", state(), start, both) == ("num_thread_x", "unroll")
    other = start.with_knobs(num_thread_y=4)
    assert moves.record("c", state(), other, other.with_knobs(num_thread_x=16)) == ()  # not from the class's step
    assert moves.most_moved(state()) == [("num_thread_x", 2), ("unroll", 1)]
    assert moves.most_moved(state(set_at=2.0)) == []  # the teacher set the step again


def test_a_setting_link_is_the_class_setting():
    spec = get_preset("dw-blog-channel-96").spec.with_knobs(num_thread_x=8)
    setting = ClassStep("setting", None, None, "t", "./?" + urlencode(urlstate.to_query(spec)), 1.0)
    assert moves.class_spec(setting) == spec


def test_the_class_page_shows_the_steps_findings_and_what_the_students_moved_next(monkeypatch):
    # The students' pages ask for their own settings' diagnoses too, which this test never reads (only the
    # teacher's page, the step's): each built the setting's neighbours and compiled and disassembled its kernel
    # (NVRTC, nvdisasm) while the test ran. They are answered as by a server that does not diagnose.
    step = get_preset("dw-blog-channel-96").spec
    diagnose = handle.server()._diagnoses._run
    monkeypatch.setattr(handle.server()._diagnoses, "_run",
                        lambda spec, *rest: diagnose(spec, *rest) if spec == step else ExplorerError(NOT_DIAGNOSED))
    teacher = AppTest.from_file(MAIN, default_timeout=120)
    teacher.switch_page("views/classroom.py").run()
    teacher.text_input(key="class.token").input(TOKEN)
    teacher.button[0].click().run()
    assert teacher.session_state[session.TEACHER]
    teacher.selectbox(key="class.lesson").set_value("depthwise_blog").run()
    teacher.number_input(key="class.step_number").set_value(STEP).run()
    next(b for b in teacher.button if b.label == "Put the class on this step").click().run()
    assert get_lesson("depthwise_blog").step(STEP).preset.id == "dw-blog-channel-96"
    for knob, value in ((THREAD_X, 16), (THREAD_X, 4), (THREAD_Y, 4)):
        student = AppTest.from_file(MAIN, default_timeout=120)
        student.query_params.update({"preset": "dw-blog-channel-96"})  # the step's link
        student.run()
        student.sidebar.select_slider(key=knob).set_value(value).run()
        assert not student.exception
    diagnosis_panel.job(get_preset("dw-blog-channel-96").spec, "auto").result(timeout=300)
    teacher.run()
    assert not teacher.exception, [e.value for e in teacher.exception]
    text = " ".join(m.value for m in teacher.markdown)
    assert "Most moved next: **num_thread_x** (2 student(s))." in text, text[:300]
    assert "What limits this setting" in text
    links = [b.proto.url for b in teacher.get("link_button") if b.value == "Open this setting"]
    assert links and all("preset=dw-blog-channel-96" in url and "knob." in url for url in links)
    table = next(d.value for d in teacher.dataframe if "knob" in d.value.columns)
    assert table.set_index("knob")["students who moved it"].to_dict() == {"num_thread_x": 2, "num_thread_y": 1}

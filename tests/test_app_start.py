"""The way in, under AppTest: the Start page (what the tool is, the lessons in the curriculum's
order, the Explorer a click away), the pickers by title in that order, a shared link that keeps
what it can and says in one line what it left out, the Class page at /class and at /classroom."""
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import session, ui
from explorer import lessons as L
from explorer.presets import all_presets, default_preset, get_preset

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def page(view: str | None = None, query: dict | None = None) -> AppTest:
    """A session's first run: of ``view`` (else the app's own first page, as ``/`` opens it), with a link's query."""
    at = AppTest.from_file(MAIN, default_timeout=60)
    if query:
        at.query_params.update(query)
    if view:
        at.switch_page(view)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def params(at: AppTest) -> dict[str, str]:
    return {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}


def page_links(at: AppTest) -> list:
    return [element.proto for element in at.get("page_link")]


def test_the_start_page_says_what_the_tool_is_and_offers_the_lessons():
    at = page()
    assert [t.value for t in at.title] == ["TVM schedule explorer"] and [h.value for h in at.header] == ["Lessons"]
    intro = [m.value for m in at.markdown][:2]
    assert "TVM" in intro[0] and "Start with a lesson" in intro[1]
    links = page_links(at)
    assert links[0].label == "Or open the Explorer and move the knobs yourself" and links[0].page.endswith("explorer")
    lessons = L.lessons()
    # One link per lesson, in the curriculum's order, each to its first step.
    assert [link.label for link in links[1:]] == [f"{n}. {lesson.title}" for n, lesson in enumerate(lessons, 1)]
    assert all(link.page.endswith("lessons") for link in links[1:])
    assert [link.query_string for link in links[1:]] == [f"lesson={lesson.id}&step=1" for lesson in lessons]
    captions = [c.value for c in at.caption]
    blog = lessons[0]
    assert f"Introductory · {len(blog.steps)} steps · timing on any NVIDIA GPU" in captions
    assert "Advanced · 4 steps · timing on Hopper (sm_90a: H100, H200)" in captions  # attention, part 3
    assert blog.tagline in [m.value for m in at.markdown]
    assert not at.sidebar.selectbox  # no knobs before the first word of what to do


def test_without_a_link_the_explorer_opens_on_the_first_step_of_the_first_lesson():
    at = page("views/explorer.py")
    assert at.session_state["preset"] == default_preset() == L.lessons()[0].steps[0].preset.id
    assert at.markdown[0].value.startswith("**Step 1: ")


def test_a_link_from_before_the_start_page_opens_the_explorer():
    """``/?preset=…`` was the Explorer's address: such a link goes on to it, once (the Start page is still one
    click away afterwards)."""
    at = page(query={"preset": "reduce-2-interleaved-strided"})
    assert at.title[0].value != "TVM schedule explorer" and at.session_state["preset"] == "reduce-2-interleaved-strided"
    assert params(at)["preset"] == "reduce-2-interleaved-strided"
    at.switch_page("views/start.py").run()
    assert at.title[0].value == "TVM schedule explorer"


def test_a_link_with_one_bad_parameter_keeps_the_rest_and_says_what_it_dropped():
    at = page(query={"preset": "reduce-2-interleaved-strided", "knob.threads": "7"})
    assert not at.error
    assert at.session_state["spec"] == get_preset("reduce-2-interleaved-strided").spec
    (warning,) = [w.value for w in at.warning]
    assert warning == ui.plain("This link was opened without knob.threads (Knob 'threads' = 7 is not allowed; "
                               "allowed: 64, 128, 256, 512, 1024.)", limit=600)
    assert "python -m explorer" not in warning
    at.run()  # the page runs again by itself (a diagnosis, a latency arrives): still said
    assert [w.value for w in at.warning] == [warning]
    at.sidebar.select_slider(key="knob:reduce_tree.threads").set_value(128).run()  # another setting: said no more
    assert not at.warning


def test_a_link_the_app_cannot_use_says_so_as_text():
    at = page(query={"knob.x": "<script>alert(1)</script>**bold** :red[red]"})
    (error,) = [e.value for e in at.error]
    assert error.startswith("This link could not be opened") and "first lesson" in error
    assert at.session_state["preset"] == default_preset()
    at = page(query={"preset": "**nope** :material/home: [x](javascript:alert(1))"})
    (error,) = [e.value for e in at.error]
    # Every character Markdown or Streamlit's directives would read is escaped: the value shows as itself.
    assert r"\*\*nope\*\* \:material/home\: \[x\]\(javascript\:alert\(1\)\)" in error
    assert "python -m explorer" not in error


def test_plain_text_escapes_markdown_and_cuts_long_values():
    assert ui.plain("a*b_c`d<e>") == r"a\*b\_c\`d\<e\>"
    assert ui.plain("x" * 200, limit=10) == "x" * 10 + "…"
    assert ui.plain("two\nlines") == "two lines"


def test_an_unknown_lesson_or_step_says_so():
    at = page("views/lessons.py", {"lesson": "nope", "step": "3"})
    assert [w.value for w in at.warning] == [ui.plain("There is no lesson 'nope' here: this is the first lesson.")]
    assert at.selectbox(key="lesson").value == L.lessons()[0].id and at.session_state["step"] == 1
    assert params(at) == {"lesson": L.lessons()[0].id, "step": "1"}
    conv = L.get_lesson("conv2d_modern")
    at = page("views/lessons.py", {"lesson": "conv2d_modern", "step": "9"})
    assert [w.value for w in at.warning] == [ui.plain(f"“{conv.title}” has steps 1 to 4, not '9': this is step 4.")]
    assert at.session_state["step"] == 4 and params(at) == {"lesson": "conv2d_modern", "step": "4"}
    at = page("views/lessons.py", {"lesson": "conv2d_modern", "step": "two"})
    assert at.warning[0].value.endswith(ui.plain("not 'two': this is step 1."))
    at = page("views/lessons.py", {"lesson": "conv2d_modern", "step": "2"})
    assert not at.warning and at.session_state["step"] == 2


def test_the_lessons_page_keeps_the_students_choice_over_the_url_it_wrote():
    at = page("views/lessons.py", {"lesson": "conv2d_modern", "step": "2"})
    at.selectbox(key="lesson").set_value("reduction").run()
    assert at.session_state["step"] == 1 and params(at) == {"lesson": "reduction", "step": "1"}
    at.switch_page("views/device.py").run()
    at.switch_page("views/lessons.py").run()  # back, with no lesson in the URL: where the student was
    assert at.selectbox(key="lesson").value == "reduction" and params(at) == {"lesson": "reduction", "step": "1"}


def test_the_pickers_speak_in_titles_in_the_curriculums_order():
    lessons = L.lessons()
    titles = [lesson.title for lesson in lessons]
    at = page("views/lessons.py")
    assert at.selectbox(key="lesson").options == titles
    # The Explorer's presets of a template: grouped by lesson (in order), each with its lesson's short name.
    at = page("views/explorer.py", {"preset": "reduce-2-interleaved-strided"})
    options = at.sidebar.selectbox(key="ui.preset").options
    reduction = L.get_lesson("reduction")
    expected = [f"{reduction.name} · {p.step}. {p.title}" for p in reduction.presets
                if p.spec.template == "reduce_tree"]
    assert options[0] == "— none (custom) —" and options[1:1 + len(expected)] == expected
    assert all(re.match(r"[^·]+ · \d+\. ", option) for option in options[1:])
    # Compare's B: every step of every lesson, in the curriculum's order.
    at.switch_page("views/compare.py").run()
    assert at.selectbox(key=session.B_PRESET_WIDGET).options == [ui.preset_label(p) for p in all_presets()]
    assert [get_preset(p).lesson for p in all_presets()][0] == lessons[0].id


def test_the_class_page_answers_at_its_old_address():
    """AppTest finds a page by its file name before the first run: views/classroom.py is /classroom, the Class
    page's address before /class (both run the Class page; tests/test_browser.py opens /class)."""
    at = page("views/classroom.py")
    assert [t.value for t in at.title] == ["Class"]

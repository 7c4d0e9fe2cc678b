"""The app in a real browser: Debian's chromium driven by Playwright against
``streamlit run app/main.py`` on a free local port (one server and one browser for the module).
Moves a thread-count slider with the keyboard and checks that the CUDA view changes; in class
mode, the teacher unlocks the Class page and puts the class on a step, and a student's open
Lessons page shows the banner by itself, without a click, and stays where the student is (the
time from the teacher's click to the student's banner goes to test-output/class-banner.txt); a
question round: the teacher puts a step's question to the class, two students see it by
themselves, answer, and see the answer the teacher reveals. Saves screenshots under test-output/.

Skipped only where chromium or Playwright is genuinely missing on a developer machine;
under CI (the ``CI`` environment variable, set by .ci/run) a missing browser is a failure.
"""
import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_classroom_bench import free_port, server_environment, stop_server

from explorer import lessons as L
from explorer import serve

# Not marked waits: the server and chromium keep about a core busy for the file's time (conftest.py's LONG).

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
CHROMIUM = "/usr/bin/chromium"
# Without the omnibox popup's pages, which the browser's own window loads at its start in a renderer of its own
# (0.4 CPU-s): a headless browser shows no address bar, and the app's pages are what is tested.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup"]
START_TIMEOUT_S = 90
WAIT_MS = 60_000
TOKEN = "browser-class-token"
BANNER_WAIT_MS = 5_000  # the banner refreshes every second: far more than that means it does not refresh by itself


def _require_browser():
    missing = []
    if not os.path.exists(CHROMIUM):
        missing.append(f"chromium ({CHROMIUM}; apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -r requirements-dev.txt)")
    if missing:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test but is missing: " + ", ".join(missing))
        pytest.skip("not installed here: " + ", ".join(missing))


@contextlib.contextmanager
def streamlit_server(log_path: Path, env: dict | None = None):
    """``streamlit run app/main.py`` on a free local port; yields its URL once healthy."""
    port = free_port()
    log_path.parent.mkdir(exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            # The README's command; without the file watcher, which polls every imported module for edits
            # (a development aid: seconds of the server's CPU here, none of its behaviour).
            [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            # Builds in the server's own process: the pages in a browser are what is tested.
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=server_environment(env, build_processes=False),
        )
        try:
            url = f"http://127.0.0.1:{port}"
            try:
                serve.wait_healthy(url, proc, timeout_s=START_TIMEOUT_S)
            except RuntimeError as error:
                raise RuntimeError(f"streamlit did not start ({error}); see {log_path}") from None
            yield url
        finally:
            stop_server(proc)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server in class mode (its class board and teacher token): the pages outside the Class
    page are the same as without it."""
    _require_browser()
    class_mode = {"EXPLORER_CLASS_DB": str(tmp_path_factory.mktemp("class") / "class.sqlite3"),
                  "EXPLORER_TEACHER_TOKEN": TOKEN}
    with streamlit_server(OUTPUT / "streamlit.log", class_mode) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def tabs(browser):
    """One browser window's tabs: they share its cache, so the app's scripts are compiled once
    (a fresh context for each page compiled them again: a fifth of the browser's CPU)."""
    context = browser.new_context()
    yield context
    context.close()


def new_page(tabs, width=1600, height=1000):
    page = tabs.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.set_default_timeout(WAIT_MS)
    return page


@pytest.fixture(scope="module")
def page(tabs):
    return new_page(tabs)


def cuda_text(page) -> str:
    return page.locator('.tvm-code[data-view="cuda"] textarea').evaluate("e => e.value")


def launch_bounds(cuda: str) -> set[int]:
    return {int(n) for n in re.findall(r"__launch_bounds__\((\d+)\)", cuda)}


def test_a_fresh_server_opens_a_page_link(server, page):
    """The server's first visitor arrives on a page's URL (a link from the class chat)."""
    page.goto(f"{server}/device")
    page.get_by_role("heading", name="Device").wait_for()
    assert page.locator('[data-testid="stException"]').count() == 0


def wait_for_code(page) -> None:
    """The page's first code view (a fresh server's first build, which the rest of the suite may slow
    down: twice the usual wait); where it does not come, a screenshot of what the page showed instead
    (test-output/browser-no-code.png)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(".tvm-code", timeout=2 * WAIT_MS)
    except PlaywrightTimeout:
        page.screenshot(path=OUTPUT / "browser-no-code.png", full_page=True)
        raise


def test_slider_changes_the_cuda_view(server, page):
    page.goto(f"{server}/?preset=dw-blog-final-96")
    wait_for_code(page)
    page.get_by_role("tab", name="CUDA").click()
    page.wait_for_selector('.tvm-code[data-view="cuda"]')
    before = cuda_text(page)
    assert launch_bounds(before) == {8 * 16}
    page.screenshot(path=OUTPUT / "browser-explorer-before.png", full_page=True)

    slider = page.get_by_role("slider", name="num_thread_x")
    assert slider.get_attribute("aria-valuetext") == "16"
    slider.focus()
    page.keyboard.press("ArrowLeft")  # 16 -> 8, the previous allowed value
    page.wait_for_function(
        "before => { const t = document.querySelector('.tvm-code[data-view=\"cuda\"] textarea');"
        " return t && t.value !== before; }",
        arg=before,
    )
    after = cuda_text(page)
    assert launch_bounds(after) == {8 * 8}
    assert "knob.num_thread_x=8" in page.url  # the link now describes the new setting
    page.screenshot(path=OUTPUT / "browser-explorer-after.png", full_page=True)


def test_the_teachers_step_reaches_an_open_student_page_by_itself(server, tabs, page):
    lesson = L.lessons()[0]
    banner = f"The class is on step 3: {lesson.step(3).preset.title}"
    student = new_page(tabs, 1400, 900)  # a tab of its own: a session of the app of its own
    student.goto(f"{server}/lessons?lesson={lesson.id}&step=1")
    student.get_by_role("heading", name="Lessons").wait_for()

    # The teacher: the tab of the tests above, which goes to the Class page by the app's navigation (the app's
    # scripts are not loaded again: a page load is about a second of the browser's CPU).
    teacher = page
    if not teacher.url.startswith(server):  # this test alone
        teacher.goto(server)
    teacher.get_by_role("link", name="Class").click()
    teacher.get_by_label("Teacher token", exact=True).fill(TOKEN)
    teacher.get_by_role("button", name="Unlock the teacher controls").click()
    teacher.get_by_role("button", name="Put the class on this step").wait_for()
    assert TOKEN not in teacher.url
    step = teacher.get_by_label("Step", exact=True)
    step.fill("3")
    step.press("Enter")
    teacher.get_by_text(lesson.step(3).preset.title).first.wait_for()
    teacher.get_by_role("button", name="Put the class on this step").click()
    clicked = time.monotonic()
    teacher.get_by_text(f"Now: {banner}").wait_for()

    student.get_by_text(banner).wait_for(timeout=BANNER_WAIT_MS)  # no reload, no click
    seconds = time.monotonic() - clicked
    # The student was not moved: still on step 1.
    assert "step=3" not in student.url and student.get_by_role("heading", name="Step 1 of").count() == 1
    assert student.get_by_role("link", name="Open it").get_attribute("href").endswith(
        f"lessons?lesson={lesson.id}&step=3")
    student.screenshot(path=OUTPUT / "browser-class-banner.png", full_page=True)
    (OUTPUT / "class-banner.txt").write_text(f"teacher's click to the student's banner: {seconds:.2f} s\n")


def test_a_question_round_with_a_teacher_and_two_students(server, tabs, page):
    """The teacher puts step 2's question to the class; two students on another step see it come by
    itself, answer, and see the answer the teacher reveals (no GPU here: the lesson's recorded figures).
    The teacher's view goes to test-output/browser-class-round-teacher.png (docs/screenshots/ has one)."""
    lesson = L.lessons()[0]  # the Class page's first lesson; its step 2 asks "faster, about the same or slower?"
    question = L.asked(lesson.step(2).preset)
    students = [new_page(tabs, 1200, 900) for _ in range(2)]
    for student in students:
        student.goto(f"{server}/lessons?lesson={lesson.id}&step=1")
        student.get_by_role("heading", name="Lessons").wait_for()

    from playwright.sync_api import expect

    teacher = page
    if not teacher.url.startswith(server):  # this test alone
        teacher.goto(server)
    teacher.get_by_role("link", name="Class").click()
    unlock = teacher.get_by_role("button", name="Unlock the teacher controls")
    step = teacher.get_by_label("Step", exact=True)
    unlock.or_(step).first.wait_for()
    if unlock.count():  # the teacher of the test above is unlocked already
        teacher.get_by_label("Teacher token", exact=True).fill(TOKEN)
        unlock.click()
    step.fill("2")
    step.press("Enter")
    teacher.get_by_role("button", name="Put this question to the class").click()
    teacher.get_by_text("Answered, first vote").wait_for()

    for student, given in zip(students, ("slower", "faster"), strict=True):
        student.get_by_text("Question for the class").wait_for(timeout=BANNER_WAIT_MS)  # no reload, no click
        student.get_by_test_id("stRadio").get_by_text(given, exact=True).click()
        student.get_by_role("button", name="Answer", exact=True).click()
        student.get_by_text(re.compile(f"Your answer: {given}")).wait_for()
    answered = teacher.get_by_test_id("stMetric").filter(has_text="Answered, first vote")
    expect(answered.get_by_test_id("stMetricValue")).to_have_text("2", timeout=BANNER_WAIT_MS)  # by itself

    teacher.get_by_role("button", name="Reveal the answer").click()
    answer = re.compile(r"Answer: slower — ")
    teacher.get_by_text(answer).wait_for()
    assert question.question.answer == "slower"
    for student, given, verdict in zip(students, ("slower", "faster"), ("right", "not this time"), strict=True):
        student.get_by_text(answer).wait_for(timeout=BANNER_WAIT_MS)
        expect(student.get_by_text(f"You answered {given}.")).to_contain_text(verdict)  # the badge beside it
    teacher.get_by_text("Round").first.scroll_into_view_if_needed()
    teacher.screenshot(path=OUTPUT / "browser-class-round-teacher.png")
    teacher.get_by_role("button", name="End the round").click()
    for student in students:
        student.get_by_text("Question for the class").wait_for(state="detached", timeout=BANNER_WAIT_MS)
        student.close()

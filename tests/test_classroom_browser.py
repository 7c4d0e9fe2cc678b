"""Class mode in a real browser (Debian's chromium, as tests/test_browser.py): the teacher
unlocks the Class page and puts the class on a step; a student's open Lessons page shows the
banner by itself, without a click, and stays where the student is. The time from the
teacher's click to the student's banner is written to test-output/class-banner.txt."""
import os
import time

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS, OUTPUT, WAIT_MS, _require_browser, streamlit_server

from explorer import lessons as L

pytestmark = pytest.mark.waits  # real servers or processes waited on: handed out first (conftest.py)

TOKEN = "browser-class-token"
BANNER_WAIT_MS = 5_000  # the banner refreshes every second: far more than that means it does not refresh by itself


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    _require_browser()
    saved = {name: os.environ.get(name) for name in ("EXPLORER_CLASS_DB", "EXPLORER_TEACHER_TOKEN")}
    os.environ.update(EXPLORER_CLASS_DB=str(tmp_path_factory.mktemp("class") / "class.sqlite3"),
                      EXPLORER_TEACHER_TOKEN=TOKEN)
    try:
        with streamlit_server(OUTPUT / "streamlit-class.log") as url:
            yield url
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.update({name: value})


def test_the_teachers_step_reaches_an_open_student_page_by_itself(class_server):
    from playwright.sync_api import sync_playwright

    lesson = L.lessons()[0]
    banner = f"The class is on step 3: {lesson.step(3).preset.title}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        student, teacher = (browser.new_page(viewport={"width": 1400, "height": 900}) for _ in range(2))
        for page in (student, teacher):
            page.set_default_timeout(WAIT_MS)
        student.goto(f"{class_server}/lessons?lesson={lesson.id}&step=1")
        student.get_by_role("heading", name="Lessons").wait_for()

        teacher.goto(f"{class_server}/classroom")
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
        browser.close()

"""The app in a real browser: Debian's chromium driven by Playwright against
``streamlit run app/main.py`` on a free local port (one server and one browser for the module).
Moves a thread-count slider with the keyboard and checks that the CUDA view changes; every code
view's text reaches WCAG AA contrast against its background (light and dark); every page, under a
dark colour scheme at a projector's 800 px, names itself in its title, has its headings in order,
no label cut short and every tab in sight; a theme picked in the menu stays after a reload on
another page; in class mode, the teacher unlocks the Class page and puts the class on a step, and
a student's open Lessons page shows the banner by itself, without a click, and stays where the
student is (the time from the teacher's click to the student's banner goes to
test-output/class-banner.txt). Saves screenshots under test-output/.

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
from explorer import serve, style

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
    page.goto(f"{server}/?preset=dw-blog-final-96")  # a link from before the Start page: on to the Explorer
    wait_for_code(page)
    assert page.url.startswith(f"{server}/explorer?")
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


# Each code block's text, as pairs (its colour, the colour behind it) with a sample of the text, once per pair:
# the nearest opaque background up the tree is what the text is read against.
CODE_COLOURS_JS = """blocks => {
  const behind = e => {
    for (; e; e = e.parentElement) {
      const c = getComputedStyle(e).backgroundColor;
      if (c && c !== "transparent" && !/^rgba\\(.*,\\s*0\\)$/.test(c)) return c;
    }
    return "rgb(255, 255, 255)";
  };
  const pairs = new Map();
  for (const block of blocks) {
    const walker = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const e = node.parentElement;
      if (!node.textContent.trim() || e.closest("textarea") || !e.offsetParent) continue;
      const key = getComputedStyle(e).color + "|" + behind(e);
      if (!pairs.has(key)) pairs.set(key, (e.className || e.tagName) + ": " + node.textContent.trim().slice(0, 30));
    }
  }
  return [...pairs.entries()];
}"""


def _hex(css_colour: str) -> str:
    channels = [int(float(c)) for c in re.findall(r"[\d.]+", css_colour)[:3]]
    return "#" + "".join(f"{c:02x}" for c in channels)


def low_contrast_code(page) -> list[str]:
    """Text in the page's code views below WCAG AA against its background (Copy button and bar included)."""
    pairs = page.locator(".tvm-code").evaluate_all(CODE_COLOURS_JS)
    assert pairs, "no code text on the page"
    found = []
    for key, sample in pairs:
        colour, background = key.split("|")
        ratio = style.contrast(_hex(colour), _hex(background))
        if ratio < style.AA_CONTRAST:
            found.append(f"{sample} ({colour} on {background}: {ratio:.2f})")
    return found


def each_code_view(page, labels):
    """Open each code tab in turn (each a rerun of the page) and yield its label once its block is drawn."""
    for label in labels:
        page.get_by_role("tab", name=label, exact=True).click()
        page.locator('[role="tabpanel"]:visible .tvm-code').first.wait_for()
        yield label


CODE_TABS = ("Scheduled TensorIR", "Lowered TIR", "CUDA", "Schedule trace", "SASS")


def test_every_code_view_reads_in_the_light_theme(server, page):
    """The page of the tests above (light, 1600 px): the code views, and the diff against the previous try."""
    if "knob.num_thread_x=8" not in page.url:  # this test alone: a try, and another to compare it with
        page.goto(f"{server}/explorer?preset=dw-blog-final-96")
        wait_for_code(page)
        page.get_by_role("slider", name="num_thread_x").focus()
        page.keyboard.press("ArrowLeft")
        page.wait_for_url("**knob.num_thread_x=8**")
    for label in each_code_view(page, CODE_TABS):
        assert low_contrast_code(page) == [], label
    page.get_by_text("Show changes since the previous try").click()
    page.locator('.tvm-code[data-view$="-diff"]').first.wait_for()
    assert low_contrast_code(page) == []
    page.get_by_text("Show changes since the previous try").click()  # back as it was


CUT_LABELS_JS = """() => [...document.querySelectorAll('button, [data-testid="stPageLink"] a, [role="tab"], '
                                                 + '[data-testid="stMetricLabel"], [data-testid="stMetricValue"]')]
  .filter(e => e.offsetParent !== null && !e.closest('[data-testid="stSidebar"][data-collapsed="true"]'))
  .flatMap(e => [e, ...e.querySelectorAll("*")].filter(t => t.scrollWidth > t.clientWidth + 1
    && (t.tagName === "P" || getComputedStyle(t).textOverflow === "ellipsis")).map(t => t.textContent))"""
HEADINGS_JS = """() => [...document.querySelectorAll('[data-testid="stMain"] :is(h1, h2, h3, h4, h5, h6)')]
  .filter(h => h.offsetParent !== null && h.textContent.trim())
  .map(h => [Number(h.tagName[1]), h.textContent.trim()])"""
TABS_OUT_OF_SIGHT_JS = """() => [...document.querySelectorAll('[role="tab"]')].filter(t => {
  const r = t.getBoundingClientRect(), list = t.closest('[role="tablist"]').getBoundingClientRect();
  return r.right > Math.min(window.innerWidth, list.right) + 1 || r.left < list.left - 1; }).map(t => t.textContent)"""


def settle(page) -> None:
    """Wait for the page's script run to end: no element left from the run before, none still a placeholder."""
    page.wait_for_function("""() => !document.querySelector('[data-testid="stStatusWidget"], '
                           + '[data-testid="stSkeleton"], [data-stale="true"]')""")


def check_page(page, name: str) -> None:
    """What every page must do on any screen: name itself in the browser's title, keep its headings in
    order (an H1, then no level skipped), show each button, link, tab and metric label whole, and keep
    every tab in sight."""
    assert page.title() == f"{name} · TVM schedule explorer"
    levels = page.evaluate(HEADINGS_JS)
    assert levels and levels[0][0] == 1, levels
    assert all(b[0] <= a[0] + 1 for a, b in zip(levels, levels[1:], strict=False)), levels
    assert page.evaluate(CUT_LABELS_JS) == []
    assert page.evaluate(TABS_OUT_OF_SIGHT_JS) == []


@pytest.fixture(scope="module")
def projector(tabs):
    """A tab 800 px wide, its browser set to a dark colour scheme (Streamlit's System theme follows it)."""
    projector = new_page(tabs, 800, 1000)
    projector.emulate_media(color_scheme="dark")
    return projector


PAGES = {  # each page by its name, at a link that shows what it has
    "Start": "", "Lessons": "lessons?lesson=depthwise_blog&step=8", "Explorer": "explorer?preset=dw-blog-final-96",
    "Compare": "compare?preset=dw-blog-final-96", "Sweep": "sweep?preset=dw-blog-final-96", "Device": "device",
    "Class": "class",
}


def is_dark(page) -> bool:
    background = page.evaluate("() => getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor")
    return style.luminance(_hex(background)) < 0.2


def test_every_page_on_a_projector_in_the_dark(server, projector):
    page = projector
    for name, path in PAGES.items():
        page.goto(f"{server}/{path}")
        page.get_by_role("heading", level=1).first.wait_for()
        if name in ("Explorer", "Compare"):
            wait_for_code(page)
        settle(page)
        assert is_dark(page)
        # The sidebar folds away below 1000 px (Streamlit itself folds it below 768 px only).
        assert page.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed") == "true", name
        check_page(page, name)
        if name == "Explorer":
            for label in each_code_view(page, CODE_TABS):
                settle(page)
                assert low_contrast_code(page) == [], label
                check_page(page, name)
        if name == "Compare":  # the diffs A -> B
            assert low_contrast_code(page) == []
        page.screenshot(path=OUTPUT / f"browser-dark-800-{name.lower()}.png")


def test_the_theme_picked_in_the_menu_stays_on_every_page(server, tabs):
    """Streamlit keeps the theme picked in its menu only for the path the page was loaded at: Dark picked
    after going from the Start page to the Lessons page came back light on a reload of the Lessons page
    (app/ui.py's script keeps it for every page)."""
    page = new_page(tabs, 1200, 900)
    page.emulate_media(color_scheme="light")
    page.goto(server)
    page.get_by_role("heading", name="TVM schedule explorer").wait_for()
    page.get_by_role("link", name="Lessons").first.click()
    page.get_by_role("heading", name="Lessons", exact=True).wait_for()
    assert not is_dark(page)
    page.locator('[data-testid="stMainMenu"]').click()
    page.locator('[data-testid="stMainMenuItem-theme-Dark"]').click()
    page.wait_for_function("() => getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor"
                           " !== 'rgb(255, 255, 255)'")
    page.reload()
    page.get_by_role("heading", name="Lessons", exact=True).wait_for()
    assert is_dark(page)
    page.locator('[data-testid="stMainMenu"]').click()  # back to the browser's own scheme for the tabs after
    page.locator('[data-testid="stMainMenuItem-theme-System"]').click()
    page.close()


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

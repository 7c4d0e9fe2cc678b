"""The app in a real browser: Debian's chromium driven by Playwright against
``streamlit run app/main.py`` on a free local port (one server and one browser for the module).
Moves a thread-count slider with the keyboard and checks that the CUDA view changes; every code
view's text reaches WCAG AA contrast against its background (light and dark); every page, under a
dark colour scheme at a projector's 800 px, names itself in its title, has its headings in order,
no label cut short and every tab in sight; a theme picked in the menu stays after a reload on
another page; in class mode, the teacher unlocks the Class page and puts the class on a step, and
a student's open Lessons page shows the banner by itself, without a click, and stays where the
student is (the time from the teacher's click to the student's banner goes to
test-output/class-banner.txt); a question round: the teacher puts a step's question to the class,
two students see it by themselves, answer, and see the answer the teacher reveals. Saves
screenshots under test-output/.

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
from explorer import style
from explorer.server import launcher

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
                launcher.wait_healthy(url, proc, timeout_s=START_TIMEOUT_S)
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


def class_page_as_teacher(teacher, server: str):
    """The tab on the Class page by the app's navigation (the app's scripts are not loaded again: a page load is
    about a second of the browser's CPU), its teacher controls unlocked by the token unless a test before did;
    the Step input of those controls."""
    if not teacher.url.startswith(server):  # a test run alone
        teacher.goto(server)
    teacher.get_by_role("link", name="Class").click()
    unlock = teacher.get_by_role("button", name="Unlock the teacher controls")
    step = teacher.get_by_label("Step", exact=True)
    unlock.or_(step).first.wait_for()
    if unlock.count():
        teacher.get_by_label("Teacher token", exact=True).fill(TOKEN)
        unlock.click()
    step.wait_for()
    assert TOKEN not in teacher.url
    return step


def test_the_teachers_step_reaches_an_open_student_page_by_itself(server, tabs, page):
    lesson = L.lessons()[0]
    banner = f"The class is on step 3: {lesson.step(3).preset.title}"
    student = new_page(tabs, 1400, 900)  # a tab of its own: a session of the app of its own
    student.goto(f"{server}/lessons?lesson={lesson.id}&step=1")
    student.get_by_role("heading", name="Lessons").wait_for()

    teacher = page  # the tab of the tests above
    step = class_page_as_teacher(teacher, server)
    teacher.get_by_role("button", name="Put the class on this step").wait_for()
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
    """The teacher puts a step's question to the class; two students on another step see it come by
    itself, answer, and see the answer the teacher reveals (no GPU here: the lesson's recorded figures).
    The teacher's view goes to test-output/browser-class-round-teacher.png (docs/screenshots/ has one)."""
    lesson = L.lessons()[0]  # the Class page's first lesson; its first step asking "faster, the same or slower?"
    number, question = next((s.number, q) for s in lesson.steps if (q := L.asked(s.preset)) is not None
                            and q.question.kind == "direction" and q.question.answer == "slower")
    students = [new_page(tabs, 1200, 900) for _ in range(2)]
    for student in students:
        student.goto(f"{server}/lessons?lesson={lesson.id}&step=1")
        student.get_by_role("heading", name="Lessons").wait_for()

    from playwright.sync_api import expect

    teacher = page
    step = class_page_as_teacher(teacher, server)
    step.fill(str(number))
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


# -- every tab of a written kernel, against its header and the other tabs (issue 47) ------------------------

# One written kernel per family, the first preset of its template (test_app.py's tabs test compiles the same
# cubins, which the SASS and Resources tabs read from the compile cache on disk).
WRITTEN_KERNELS = ("reduce-1-interleaved-divergent", "attention-fused", "attention-mma",
                   "attention-hopper-one-consumer", "hopper-wgmma-fp16-4096")
# What each analysis tab shows once its panel has run (the tabs run lazily: only the open one).
TAB_MARKERS = {"SASS": "registers/thread", "Tiling": "Block 0 ", "Bank conflicts": "Modelled bank conflicts",
               "Reduction tree": "adds its sums in", "Resources": "Occupancy assumes",
               "Roofline": "Ceilings:", "Counters": "The counters need"}  # the roofline: its notes, under the figure
# Sentences no page may say: a count with the wrong number or article, a size rounded to nothing, and the
# false ones the walk of issue 47 found.
NEVER = (r"\b1 blocks\b", r"\b1 warps\b", r"\ba 8-step\b", r"\b0\.0 KB\b", r"TensorLoad in an index",
         r"no compute stage to analyse", r"leaves the reduction's steps to TVM", r"does not use shared memory")


def shared_bytes_of_header(line: str) -> list[int]:
    """The shared memory of each kernel in the build line ("…, 160.0 KB shared; …"), in bytes (KB rounded)."""
    units = {"B": 1, "KB": 1024, "MB": 1 << 20}
    return [round(float(n.replace(",", "")) * units[u]) for n, u in re.findall(r"([\d,.]+) (B|KB|MB) shared", line)]


def tab_text(page, label: str) -> str:
    """Open an analysis tab and return the text of its panel once the panel's run has ended."""
    page.get_by_role("tab", name=label, exact=True).click()
    panel = page.locator('[role="tabpanel"]:visible')
    panel.get_by_text(TAB_MARKERS[label]).first.wait_for()
    settle(page)  # a panel streams in as it runs: the SASS of a build's second kernel comes after the first's
    return panel.inner_text()


def test_every_tab_of_a_written_kernel_agrees_with_its_header_and_the_other_tabs(server, page):
    """A student walking every tab of one written kernel per family finds no sentence the header (the build
    line's shared memory, the kernel's units) or another tab contradicts."""
    for preset in WRITTEN_KERNELS:
        page.goto(f"{server}/?preset={preset}")
        wait_for_code(page)
        line = page.get_by_text("Built in").first.inner_text()
        shared = shared_bytes_of_header(line)
        assert shared and all(shared), (preset, line)  # every kernel of these uses shared memory
        labels = [t.strip() for t in page.get_by_role("tab").all_inner_texts()]
        assert ("Reduction tree" in labels) == preset.startswith("reduce") and "vthread" not in labels, labels
        said = {label: tab_text(page, label) for label in TAB_MARKERS if label in labels}
        everything = "\n".join([page.locator('[data-testid="stMain"]').inner_text(), *said.values()])
        for pattern in NEVER:
            assert not re.search(pattern, everything), (preset, pattern)
        assert page.locator('[data-testid="stException"]').count() == 0, preset
        # The SASS header counts the shared memory the header counts: the cubin's and the dynamic part.
        sass = [int(a.replace(",", "")) + int((b or "0").replace(",", "")) for a, b in
                re.findall(r"registers/thread, ([\d,]+) B shared(?: \+ ([\d,]+) B dynamic)?", said["SASS"])]
        assert len(sass) == len(shared) and all(s >= h - 52 for s, h in zip(sass, shared, strict=True)), (preset, sass)
        # What the bank tab does not count, it says in plain words.
        banks = said["Bank conflicts"]
        assert ("not modelled" not in banks) or "cannot evaluate" in banks, preset
        if "hopper" in preset:
            assert "the TMA unit writes" in banks and "which the model does not count" in banks
        # The roofline's compute roof is the units' the kernel multiplies on, and the Tiling tab says who owns what.
        roofline, tiling = said["Roofline"], said["Tiling"]
        if preset == "attention-fused":
            assert "multiplies them on the CUDA cores" in roofline and "on the tensor cores, not" not in roofline
        elif preset != "reduce-1-interleaved-divergent":
            assert "multiplies these matrices on the tensor cores" in roofline, preset
        assert re.search(r"Block 0 (owns query rows|computes \d+ tile|of [\d,]+ sums)", tiling), (preset, tiling[:300])
    page.screenshot(path=OUTPUT / "browser-written-tabs.png", full_page=True)

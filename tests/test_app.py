"""The Streamlit app under Streamlit's AppTest: every page for every preset, knob changes,
invalid settings, links. Builds are cached per Spec in this process, so reruns are fast."""
import html
import math
import re
import threading

import pytest
import tvm
from server_fakes import fake_measurements, settle
from streamlit.testing.v1 import AppTest

from app import code_view, handle, latency, panels, session, widgets
from explorer import urlstate
from explorer.analysis import races
from explorer.build import Spec, build
from explorer.cli import make_parser
from explorer.errors import ExplorerError
from explorer.figures import alt, tries_figure
from explorer.highlight import kernels_only
from explorer.presets import all_presets, default_preset, get_preset
from explorer.server.diagnosing import NOT_DIAGNOSED
from explorer.tabs import ANALYSES

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")
TIMEOUT = 60
THREAD_X = "knob:depthwise_blog.num_thread_x"


def app(query=None, view=None) -> AppTest:
    """The Explorer page (opened by a link with ``query``, on its tab ``view``)."""
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).switch_page("views/explorer.py")
    if query:
        at.query_params.update(query)
    if view:
        at.session_state["ui.view"] = view
    return at


def code_text(at: AppTest, view: str) -> str | None:
    """The raw text of a code view (from the block's copy buffer)."""
    for element in at.html:
        if f'data-view="{view}"' in element.value:
            return html.unescape(re.search(r"<textarea[^>]*>(.*)</textarea>", element.value, re.S).group(1))
    return None


def launch_bounds(cuda: str) -> set[int]:
    return {int(n) for n in re.findall(r"__launch_bounds__\((\d+)\)", cuda)}


def param(at: AppTest, key: str) -> str:
    """A query parameter of the app's URL after the run (AppTest keeps lists or strings)."""
    value = at.query_params[key]
    return value[-1] if isinstance(value, list) else value


def assert_clean(at: AppTest):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def unhighlighted(text: str, language: str, hl_lines=(), first_line: int = 1) -> str:
    """A code block's text as the page would show it unhighlighted: for the tests that read a view's
    text (its copy buffer) and not its colours, which are a fifth of a page run with a 150 KB kernel."""
    return f"<pre>{html.escape(text)}</pre>"


@pytest.mark.parametrize("preset", list(all_presets()))
def test_explorer_page_for_every_preset(preset, monkeypatch):
    # The CUDA is read from its copy buffer; tests/test_server.py checks its highlighting.
    monkeypatch.setattr(code_view, "highlight", unhighlighted)
    at = app({"preset": preset}, view="CUDA").run()
    assert_clean(at)
    spec = get_preset(preset).spec
    assert at.session_state["spec"] == spec
    assert at.title[0].value == spec.template_def.title
    # The page shows the server's build of the setting (tests/test_server.py checks that build against one made here).
    assert code_text(at, "cuda") == kernels_only(handle.build(spec, at.session_state["target"]).cuda)[0]
    assert param(at, "preset") == preset and param(at, "knob.num_thread_x" if "knob.num_thread_x" in
                                                          at.query_params else "template") is not None
    assert urlstate.from_query({k: param(at, k) for k in at.query_params}) == (spec, preset)


@pytest.mark.parametrize("preset", list(all_presets()))
def test_compare_page_for_every_preset(preset):
    at = app({"preset": preset}).switch_page("views/compare.py").run()  # a link to the Compare page
    assert_clean(at)
    assert at.title[0].value == "Compare two settings"
    assert at.session_state["spec"] == get_preset(preset).spec


def test_device_page():
    at = app().run()
    at.switch_page("views/device.py").run()
    assert_clean(at)
    assert at.title[0].value == "Device"
    if not tvm.cuda(0).exist:
        assert "No GPU: code and diagrams only" in at.info[0].value
    versions = next(d.value for d in at.dataframe if "version" in d.value)
    assert tvm.__version__ in set(versions["version"])
    assert any("compiling on the compile processes first" in m.help for m in at.metric)
    assert any("measured again in full once the GPU is free" in c.value for c in at.caption)
    page_cpu = next(m for m in at.metric if m.label == "Page run CPU (p95)")
    assert page_cpu.value.endswith(" ms") and int(page_cpu.value[:-3]) > 0  # the Explorer's run, at least
    assert re.search(r"over \d+ runs so far", page_cpu.help)


def test_device_page_counts_the_worker_hosts_calls(monkeypatch):
    server = handle.server()
    real = server.stats
    hosts = {"address": "tcp://10.0.0.1:8786", "ran on": {"host-b": 3, "host-a": 5}, "ran here": 1,
             "libraries not whole": 0}
    monkeypatch.setattr(server, "stats", lambda: {**real(), "builds": {**real()["builds"], "worker hosts": hosts}})
    at = app().switch_page("views/device.py").run()
    assert_clean(at)
    assert any("Worker hosts of tcp://10.0.0.1:8786, calls run by each: host-a: 5, host-b: 3; 1 run on this machine"
               in c.value for c in at.caption)


def test_device_page_says_the_server_started_on_a_prepared_cache(monkeypatch):
    """A server started after ``python -m explorer prepare`` says so: how many settings, of which lessons, when."""
    server = handle.server()
    real = server.stats
    stored = {"loaded": 329, "prepared": 329, "oldest": 1_800_000_000.0, "newest": 1_800_000_480.0}
    summary = {"lessons": ["matmul_modern", "conv2d_modern"], "settings": 345, "done": 345, "built": 330,
               "refused": 15, "measured": 329, "device": "NVIDIA H200", "started": 1_800_000_000.0,
               "interrupted": False}
    monkeypatch.setattr(server, "stats", lambda: {**real(), "prepared": summary,
                                                  "measurements": {**real()["measurements"], "stored": stored}})
    at = app().run()
    at.switch_page("views/device.py").run()
    assert_clean(at)
    [said] = [s.value for s in at.success if "prepared cache" in s.value]
    assert "prepared 345 settings of matmul_modern, conv2d_modern" in said and "329 measured on NVIDIA H200" in said
    assert "this server read 329 measurements of this GPU from the disk by prepare" in said


# Of these templates, a preset whose cubin other tests compile too (the SASS and Resources tabs read it): on a
# clean machine one NVRTC compile and one nvdisasm fewer each (tests/README.md).
COMPILED_ELSEWHERE = {"depthwise_blog": "dw-blog-final-96",  # test_every_analysis_is_a_tab_with_its_panel_and_a_view
                      "conv2d_autotvm": "conv2d-autotvm-resnet-last",  # tests/test_schedule_conv2d.py
                      "conv2d_async": "conv2d-modern-transposed",  # tests/test_schedule_conv2d_async.py (its conv())
                      "conv1d": "conv1d-v5",  # tests/test_analysis_sass.py (the unrolling test, the SASS tab)
                      # tests/test_schedule_matmul_modern.py (the compiles without spills)
                      "matmul_tensorcore": "modern-tensorcore-fp16-4096"}
# Of these, whose presets no other test compiles, the preset that NVRTC compiles fastest: best-matmul-async-4096,
# the first, unrolls its 128 × 256 tiles (2.2 CPU-s for its cubin and SASS on a clean machine, this one 0.6).
CHEAPEST_TO_COMPILE = {"matmul_async": "modern-async-1024"}


def _first_preset_per_template():
    chosen, firsts = {**CHEAPEST_TO_COMPILE, **COMPILED_ELSEWHERE}, {}
    for p in all_presets().values():
        firsts.setdefault(p.spec.template, chosen.get(p.spec.template, p.id))
    return sorted(firsts.values())


def tab_titles(preset: str) -> list[str]:
    """The analyses' tabs of a preset's template: those that apply to it (explorer/tabs.py)."""
    template = get_preset(preset).spec.template_def
    return [analysis.title for analysis in ANALYSES.values() if analysis.applies(template)]


@pytest.mark.parametrize("preset", _first_preset_per_template())
def test_analysis_tabs_render(preset):
    """Every analysis tab of one preset of each template (tabs are lazy: only the selected
    one runs), opened one after the other in one session as a student clicks through them."""
    labels = tab_titles(preset)
    at = app({"preset": preset})
    for label in labels:
        at.session_state["ui.view"] = label
        at.run()
        assert_clean(at)
        assert at.session_state["ui.view"] == label
        assert [t.label for t in at.tabs][len(code_view.VIEWS):] == labels


@pytest.mark.parametrize("name", list(ANALYSES))
def test_every_analysis_is_a_tab_with_its_panel_and_a_view(name):
    """Each entry of the registry: a --view of the command line, and a tab of its title whose
    panel (its own, or the default one) shows something, on a preset of a template it describes."""
    analysis = ANALYSES[name]
    preset = next(p for p in ("dw-blog-final-96", "reduce-3-sequential") if name in
                  [a.name for a in ANALYSES.values() if a.title in tab_titles(p)])
    assert make_parser().parse_args(["show", preset, "--view", name]).view == name
    at = app({"preset": preset}, view=analysis.title).run()
    assert_clean(at)
    titles = [t.label for t in at.tabs][len(code_view.VIEWS):]
    assert titles == tab_titles(preset)
    tab = at.tabs[len(code_view.VIEWS) + titles.index(analysis.title)]
    assert len(tab.children) > 0


# The analyses' tabs of a scheduled template and of each family of written kernels: only those that describe it.
TABS_OF = {
    "dw-blog-final-96": ["SASS", "Tiling", "Bank conflicts", "Resources", "vthread", "Roofline", "Counters"],
    "reduce-3-sequential": ["SASS", "Tiling", "Bank conflicts", "Reduction tree", "Resources", "Roofline", "Counters"],
    **{preset: ["SASS", "Tiling", "Bank conflicts", "Resources", "Roofline", "Counters"]
       for preset in ("attention-fused", "attention-mma", "attention-hopper", "hopper-ws-fp16-4096",
                      "rowwise-softmax-separate")},
}


# The headline of shared memory: in the unit its size fills, the dynamic part counted.
SHARED_METRIC = {"rowwise-softmax-separate": "36 B", "attention-hopper": "160.0 KB", "attention-fused": "24.5 KB"}


@pytest.mark.parametrize("preset", list(TABS_OF))
def test_a_template_shows_only_the_tabs_that_describe_it(preset):
    assert tab_titles(preset) == TABS_OF[preset]
    at = app({"preset": preset}).run()
    assert_clean(at)
    assert [t.label for t in at.tabs][len(code_view.VIEWS):] == TABS_OF[preset]
    if preset in SHARED_METRIC:
        assert next(m.value for m in at.metric if m.label == "Shared mem / block") == SHARED_METRIC[preset]


def test_a_tab_the_next_template_lacks_falls_back_to_the_first():
    at = app({"preset": "reduce-3-sequential"}, view="Reduction tree").run()
    assert_clean(at)
    assert at.session_state["ui.view"] == "Reduction tree"
    at.sidebar.selectbox(key="ui.workload").set_value("attention").run()
    assert_clean(at)
    assert "Reduction tree" not in [t.label for t in at.tabs]
    assert at.session_state["ui.view"] == next(iter(code_view.VIEWS))


def test_the_bank_conflicts_tab_leads_with_a_race(monkeypatch):
    """A race the check finds (one made up here: no shipped setting has one) heads the tab, with its lines."""
    write = races.RaceAccess(5, "store", "row_max_shared", "row_max_shared[threadIdx_y]", 113, (0, 0, 0), {})
    read = races.RaceAccess(6, "load", "row_max_shared", "row_max_shared[threadIdx_y]", 117, (32, 0, 0), {})
    race = races.Race("main_kernel", "row_max_shared", write, read, False, 0, (0, 0, 0), 2, False)
    report = races.RaceReport((races.KernelRaces("main_kernel", (race,), 9),))
    monkeypatch.setattr(races, "analyze_races", lambda built: report)
    at = app({"preset": "dw-blog-final-96"}, view="Bank conflicts").run()
    assert not at.exception
    (error,) = at.error
    assert "this kernel's result is wrong" in error.value and race.sentence() in error.value
    assert "CUDA line 113" in race.sentence() and "CUDA line 117" in race.sentence()


def test_every_panel_of_its_own_belongs_to_an_analysis():
    """A panel keyed by a name the registry lacks would never be shown."""
    assert set(panels.PANELS) <= set(ANALYSES)


def test_a_server_that_does_not_diagnose_says_so_on_the_page():
    # EXPLORER_DIAGNOSE=0 in the tests (conftest.py): the pages here are not diagnosed.
    assert not handle.server()._settings.diagnose
    at = app({"preset": "dw-blog-final-96"}).run()
    assert_clean(at)
    for _ in range(50):  # the refusal comes back from the diagnoses' thread at once
        if any(NOT_DIAGNOSED in c.value for c in at.caption):
            break
        at.run()
    assert f"Diagnosis: {NOT_DIAGNOSED}" in [c.value for c in at.caption]


def test_a_server_setting_it_cannot_take_is_its_sentence_on_every_page(monkeypatch):
    def refused():
        raise ExplorerError("EXPLORER_BUILD_WORKERS must be a whole number from 0, not '-1'.")

    monkeypatch.setattr(handle, "server", refused)
    at = app({"preset": "dw-blog-final-96"}).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["EXPLORER_BUILD_WORKERS must be a whole number from 0, not '-1'."]


def test_thread_slider_changes_launch_bounds():
    at = app({"preset": "dw-blog-final-96"}, view="CUDA").run()
    assert launch_bounds(code_text(at, "cuda")) == {8 * 16}
    at.sidebar.select_slider(key=THREAD_X).set_value(8).run()
    assert_clean(at)
    assert launch_bounds(code_text(at, "cuda")) == {8 * 8}
    assert at.session_state["spec"].knobs.num_thread_x == 8
    assert param(at, "knob.num_thread_x") == "8"


def build_line(at: AppTest) -> str:
    """The line under the title that says how the current setting built."""
    (line,) = [c.value for c in at.caption if "Built in" in c.value or "cannot be built" in c.value]
    return line


def test_invalid_setting_shows_error_and_keeps_last_result_stale():
    at = app({"preset": "dw-blog-final-96"}, view="CUDA").run()
    built = handle.build(get_preset("dw-blog-final-96").spec, at.session_state["target"])
    assert re.fullmatch(r":material/check_circle: Built in \d+ ms — (.*)", build_line(at)).group(1) == \
        panels.launch_summary(built)
    before = code_text(at, "cuda")
    at.sidebar.select_slider(key=THREAD_X).set_value(64).run()
    assert not at.exception
    assert build_line(at) == ":material/error: This setting cannot be built"
    assert len(at.error) == 1 and "num_thread_x" in at.error[0].value and "\n" not in at.error[0].value
    assert "stale" in at.warning[0].value
    assert code_text(at, "cuda") == before
    assert any('class="tvm-code stale"' in h.value for h in at.html)
    at.sidebar.select_slider(key=THREAD_X).set_value(4).run()  # and the app keeps working
    assert_clean(at)
    assert launch_bounds(code_text(at, "cuda")) == {8 * 4}


def test_link_restores_the_knobs():
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=4, num_vthread_x=4, unroll=True)
    at = app(urlstate.to_query(spec, "dw-blog-final-96"), view="CUDA").run()
    assert_clean(at)
    assert at.session_state["spec"] == spec
    assert at.sidebar.select_slider(key=THREAD_X).value == 4
    assert at.sidebar.select_slider(key="knob:depthwise_blog.num_vthread_x").value == 4
    assert at.sidebar.toggle(key="knob:depthwise_blog.unroll").value is True
    assert launch_bounds(code_text(at, "cuda")) == {8 * 4}
    assert "Changed from the preset: num_thread_x, num_vthread_x, unroll" in at.sidebar.caption[0].value


def test_a_bad_value_in_a_link_is_left_out_and_the_rest_opens():
    at = app({"template": "depthwise_blog", "knob.num_thread_x": "3", "knob.unroll": "true"}).run()
    assert_clean(at)
    assert "opened without knob" in at.warning[0].value and "num\\_thread\\_x" in at.warning[0].value
    template = get_preset("dw-blog-final-96").spec.template_def
    assert at.session_state["spec"] == Spec("depthwise_blog", template.default_workload(),
                                            template.knobs().replace(unroll=True))


def test_a_link_that_names_nothing_usable_says_why_and_opens_the_default():
    at = app({"template": "nope"}).run()
    assert not at.exception
    assert "could not be opened" in at.error[0].value and "nope" in at.error[0].value
    assert at.session_state["preset"] == default_preset()


def test_reset_to_preset():
    at = app({"preset": "dw-blog-final-96"}).run()
    at.sidebar.select_slider(key=THREAD_X).set_value(8).run()
    at.sidebar.button[0].click().run()
    assert_clean(at)
    assert at.session_state["spec"] == get_preset("dw-blog-final-96").spec
    assert at.sidebar.select_slider(key=THREAD_X).value == 16


def test_switching_workload_opens_its_first_preset():
    at = app().run()
    at.sidebar.selectbox(key="ui.workload").set_value("matmul").run()
    assert_clean(at)
    spec = at.session_state["spec"]
    assert spec.template == "matmul" and at.session_state["preset"] == spec_preset_id(spec)
    assert at.sidebar.select_slider(key="knob:matmul.block_m").value == spec.knobs.block_m


def spec_preset_id(spec):
    return next(p.id for p in all_presets().values() if p.spec == spec)


def test_diff_against_previous_try():
    at = app({"preset": "dw-blog-final-96"}, view="CUDA").run()
    at.sidebar.select_slider(key=THREAD_X).set_value(8).run()
    at.toggle(key="ui.diff").set_value(True).run()
    assert_clean(at)
    diff = code_text(at, "cuda-diff")
    assert "-extern \"C\" __global__ void __launch_bounds__(128)" in diff
    assert "+extern \"C\" __global__ void __launch_bounds__(64)" in diff
    assert any("Previous try: num_thread_x 16 → 8" in c.value for c in at.caption)


def test_only_the_latest_tries_keep_their_build():
    # A build is about a megabyte: a session keeps the two the page shows (the last, the one
    # the diff compares with), and of the older tries only their setting and latency.
    at = app({"preset": "dw-blog-final-96"}, view="CUDA").run()
    for threads in (8, 4, 2):
        at.sidebar.select_slider(key=THREAD_X).set_value(threads).run()
    assert_clean(at)
    tries = at.session_state["tries"]
    assert [t.spec.knobs.num_thread_x for t in tries] == [16, 8, 4, 2]
    assert [t.build is not None for t in tries] == [False, False, True, True]
    assert session.TRIES_WITH_BUILD == 2
    at.toggle(key="ui.diff").set_value(True).run()
    assert_clean(at)
    assert "+extern \"C\" __global__ void __launch_bounds__(16)" in code_text(at, "cuda-diff")
    assert any("Previous try: num_thread_x 4 → 2" in c.value for c in at.caption)


# -- helpers, without a running app ---------------------------------------------------------


def test_nearest_split_and_value():
    assert widgets.nearest((8, 2, 4, 1), ((1, 1, 8), (8, 2, 4, 1))) == (8, 2, 4, 1)
    # 64 -> 32 output channels: the factorization closest part by part in log2 scale
    # (distances 5, 3, 1 and 7 from 8×2×4×1)
    options = ((32, 1, 1, 1), (16, 2, 1, 1), (4, 2, 4, 1), (1, 1, 32, 1))
    assert widgets.nearest((8, 2, 4, 1), options) == (4, 2, 4, 1)
    assert widgets.nearest(5, (1, 2, 4, 8)) == 4
    assert widgets.nearest("x", ("shared", "local")) == "shared"


def test_widget_kinds_and_labels():
    from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
    from explorer.workloads import Conv1d

    assert widgets.widget_kind(DepthwiseBlogKnobs.field("num_thread_x")) == "select_slider"
    assert widgets.widget_kind(DepthwiseBlogKnobs.field("input_cache")) == "selectbox"
    assert widgets.widget_kind(DepthwiseBlogKnobs.field("unroll")) == "toggle"
    assert widgets.widget_kind(Conv1d.field("input_length")) == "number_input"
    assert widgets.format_value((8, 2, 4, 1)) == "8×2×4×1" and widgets.format_value(True) == "on"


def test_code_block_escapes_and_numbers_lines():
    block = code_view.block_html('x = "<script>"\ny = 1\n', "python", "tensorir", caption="<b>")
    assert "<script>" not in block and "&lt;b&gt;" in block
    assert 'class="linenos">1<' in block and 'class="linenos">2<' in block


def test_a_code_block_shows_the_html_the_build_processes_made():
    block = code_view.block_html("x = 1\n", "python", "tensorir", highlighted="<pre>made elsewhere</pre>")
    assert '<div class="tvm-code-body"><pre>made elsewhere</pre></div>' in block
    assert "<textarea hidden readonly>x = 1\n</textarea>" in block  # the copy buffer is the text itself


def test_two_sessions_on_one_setting_share_one_highlighting(monkeypatch):
    import explorer.highlight as highlight_module

    lexed = []
    real = highlight_module.pygments_highlight
    monkeypatch.setattr(highlight_module, "pygments_highlight", lambda text, *a: lexed.append(text) or real(text, *a))
    # An empty cache for this test only (the pages' highlighting goes through code_view's name for it): the
    # process's cache, with the views the earlier tests highlighted, comes back for the tests after this one.
    monkeypatch.setattr(highlight_module, "highlight", highlight_module.highlight)
    highlight_module.keep_highlights(highlight_module.highlight.cache_info().maxsize)
    monkeypatch.setattr(code_view, "highlight", highlight_module.highlight)
    first, second = (app({"preset": "dw-blog-final-96"}).run() for _ in range(2))
    assert_clean(first)
    assert_clean(second)
    tensorir = code_text(first, "tensorir")
    assert tensorir and code_text(second, "tensorir") == tensorir
    assert lexed.count(tensorir) <= 1  # made once for the server (here or in a build process), sent twice


def test_kernels_only_keeps_line_numbers():
    cuda = '#include <x>\nusing t = int;\nextern "C" __global__ void k();\nextern "C" __global__ void k() {\n}\n'
    assert kernels_only(cuda) == ('extern "C" __global__ void k();\nextern "C" __global__ void k() {\n}\n', 3)
    assert kernels_only("int x;\n") == ("int x;\n", 1)


def test_diff_counts():
    text = code_view.diff("a\nb\nc", "a\nB\nc\nd", "old", "new")
    assert code_view.diff_counts(text) == (2, 1)
    assert code_view.diff("same", "same", "old", "new") == ""


def test_tries_figure_shows_measured_tries_with_knobs_on_hover():
    spec = get_preset("dw-blog-final-96").spec
    tries = [(spec, 9.5), (spec.with_knobs(num_thread_x=8), None), (spec.with_knobs(num_thread_x=4), 12.0)]
    figure = tries_figure(tries)
    trace = figure.data[0]
    assert list(trace.x) == [1, 3] and list(trace.y) == [9.5, 12.0]
    assert "num_thread_x = 4" in trace.hovertext[1]
    assert figure.layout.xaxis.dtick == 1  # tries are counted: no tick at 1.5
    assert alt(figure) == ("Latency of this session's 2 measured tries of 3, in order: from 9.50 µs to 12.00 µs, "
                           "the best 9.50 µs.")


def test_latency_panel_measures_each_setting_once(monkeypatch):
    gpu_free = threading.Event()  # the first measurement runs until the page has shown it waits
    calls = fake_measurements(monkeypatch, lambda spec: gpu_free.wait(10) and 640 / spec.knobs.num_thread_x)
    at = app({"preset": "dw-blog-final-96"}).run()  # 40 µs, then 80 µs
    assert_clean(at)
    assert any("Measuring" in i.value or "Waiting for the GPU" in i.value for i in at.info)  # the page did not block
    gpu_free.set()
    settle(at)
    latency = next(m for m in at.metric if m.label == "Latency (median)")
    assert latency.value == "40.00 µs"
    placement = next(m for m in at.metric if m.label == "Of the roofline")
    assert placement.value == "5%"  # a 2 µs roofline bound against 40 µs
    at.sidebar.select_slider(key=THREAD_X).set_value(8).run()
    settle(at)
    latency = next(m for m in at.metric if m.label == "Latency (median)")
    assert latency.value == "80.00 µs" and latency.delta == "+40.00 µs"
    at.run()  # a rerun with the same setting does not measure again
    assert len(calls) == 2
    assert [t.latency_us for t in at.session_state["tries"]] == [40.0, 80.0]
    assert any("Measured just now on Fake GPU" in c.value for c in at.caption)


def test_a_page_waiting_far_back_in_the_queue_polls_once_a_second():
    assert latency.poll_interval(None) == latency.poll_interval(0) == latency.POLL_NEAR_S  # compiling, or being timed
    assert latency.poll_interval(latency.FAR_AHEAD - 1) == latency.POLL_NEAR_S
    assert latency.poll_interval(latency.FAR_AHEAD) == latency.poll_interval(20) == latency.POLL_FAR_S == 1.0


class _Job:
    """A measurement job that never finishes and records how long the page waited on it."""
    done, state = False, "measuring"

    def __init__(self):
        self.waits = []

    def wait(self, timeout):
        self.waits.append(timeout)
        return False


@pytest.mark.parametrize("ahead,fragment_run,waits", [
    (0, True, [latency.POLL_NEAR_S]),  # on the GPU, the fragment's own run: it waits for the end
    (None, True, [latency.POLL_NEAR_S]),  # compiling: the same
    (0, False, []),  # the page's run goes on to the code views
    (2, True, []),  # measurements ahead: it only says so
])
def test_a_waiting_fragment_waits_for_a_job_near_its_end_only_on_its_own_runs(monkeypatch, ahead, fragment_run,
                                                                               waits):
    job = _Job()
    monkeypatch.setattr(handle.server(), "position", lambda j: ahead)
    context = type("Context", (), {"fragment_ids_this_run": ["latency"] if fragment_run else None})()
    monkeypatch.setattr(latency, "get_script_run_ctx", lambda: context)
    latency._measuring(job, latency.POLL_NEAR_S)
    assert job.waits == waits


def test_a_page_behind_a_long_queue_says_its_place_then_shows_its_latency(monkeypatch):
    gpu_free = threading.Event()
    fake_measurements(monkeypatch, lambda spec: gpu_free.wait(10) and 640 / spec.knobs.num_thread_x)
    server = handle.server()
    spec = get_preset("dw-blog-final-96").spec
    for x in (1, 2, 4, 8):  # four students' measurements ahead of this page's
        server.request(f"student {x}", spec.with_knobs(num_thread_x=x), "auto")
    at = app({"preset": "dw-blog-final-96"}).run()
    assert_clean(at)
    waiting = [i.value for i in at.info if i.value.startswith("Waiting for the GPU")]
    assert waiting == ["Waiting for the GPU: 4 measurement(s) ahead of this one (one kernel is timed at a time)."]
    assert server.position(server.request("test", spec, "auto")) >= latency.FAR_AHEAD  # polled once a second
    gpu_free.set()
    settle(at)
    assert next(m for m in at.metric if m.label == "Latency (median)").value == "40.00 µs"


def test_the_measurement_starts_before_the_page_builds_the_setting(monkeypatch):
    measuring = threading.Event()
    fake_measurements(monkeypatch, lambda spec: measuring.set() or 10.0)
    real_build, measured_first = handle.build, []

    def build_after_a_measurement_started(spec, target):
        measured_first.append(measuring.wait(10))
        return real_build(spec, target)

    monkeypatch.setattr(handle, "build", build_after_a_measurement_started)
    at = settle(app({"preset": "dw-blog-final-96"}).run())
    assert_clean(at)
    assert measured_first[0]
    assert next(m for m in at.metric if m.label == "Latency (median)").value == "10.00 µs"


def test_latency_panel_says_when_a_measurement_was_quick(monkeypatch):
    fake_measurements(monkeypatch, lambda spec: 10.0, quick=True)
    at = settle(app({"preset": "dw-blog-final-96"}).run())
    assert_clean(at)
    assert latency.QUICK_NOTE in [c.value for c in at.caption]
    # The repeats and their spread: the fake GPU's three repeats of 100 launches.
    assert "Timed: 3 timed repeats (100 launches each): min 10.00, max 10.00 µs, 0.0% apart." in \
        [c.value for c in at.caption]


def test_latency_panel_shows_a_wrong_result(monkeypatch):
    fake_measurements(monkeypatch, lambda spec: None)
    at = settle(app({"preset": "dw-blog-final-96"}).run())
    assert not at.exception
    assert "WRONG" in at.error[0].value and "(0, 0, 1, 2)" in at.error[0].value
    assert not any(m.label == "Latency (median)" for m in at.metric)


def test_latency_panel_says_the_gpu_is_warming_up(monkeypatch):
    release = threading.Event()

    def slow_warm_up(first, target, warm):
        warm.step("CUDA")
        release.wait(30)
        return "Fake GPU"

    fake_measurements(monkeypatch, lambda spec: 10.0, warm_up=slow_warm_up)
    measuring = handle.server()._measuring
    measuring.warm = type(measuring.warm)()  # not warm yet
    measuring.ready.clear()
    measuring.start()
    at = app({"preset": "dw-blog-final-96"}).run()
    assert_clean(at)
    assert any("Warming up the GPU" in i.value and "CUDA" in i.value for i in at.info)
    assert "Latency (median)" not in [m.label for m in at.metric]
    release.set()
    measuring.ready.wait(30)
    at.run()
    settle(at)
    assert next(m for m in at.metric if m.label == "Latency (median)").value == "10.00 µs"


def test_shape_change_keeps_splits_valid():
    """Halving the input channels: the reduction split over them moves to the nearest
    factorization of the new size, and the page still builds."""
    at = app({"preset": "conv2d-autotvm-resnet-last"}).run()
    at.sidebar.number_input(key="shape:conv2d.in_channels").set_value(256).run()
    assert_clean(at)
    spec = at.session_state["spec"]
    assert spec.workload.in_channels == 256
    assert math.prod(spec.knobs.tile_rc) == 256
    # from 32×8×2: 16×8×2, 32×4×2 and 32×8×1 are all 1 away in log2; the first in factorization order wins
    assert spec.knobs.tile_rc == (16, 8, 2)
    assert at.sidebar.select_slider(key="knob:conv2d_autotvm.tile_rc").value == "16×8×2"


def test_resources_tab_compiles_when_opened():
    """Registers come from the cubin (NVRTC and the pip disassembler; nvcc where they are
    missing) as soon as the tab opens."""
    from explorer.analysis.sass import binary_compiler

    if binary_compiler() is None:
        pytest.skip("neither NVRTC with the pip disassembler nor nvcc is installed")
    at = app({"preset": "dw-blog-final-96"}, view="Resources").run()
    assert_clean(at)
    assert int(at.dataframe[0].value["registers/thread"][0]) > 0


def test_compare_shows_a_diff_then_both_sides():
    at = app({"preset": "dw-blog-channel-21"}).run()
    at.session_state["ui.compare_view"] = "CUDA"
    at.switch_page("views/compare.py").run()
    assert_clean(at)
    b_preset = at.session_state["compare.preset"]
    assert b_preset == "dw-blog-channel-32"  # the next step of the same lesson
    a_cuda, b_cuda = build(get_preset("dw-blog-channel-21").spec).cuda, build(get_preset(b_preset).spec).cuda
    assert code_text(at, "cuda-diff") == code_view.diff(a_cuda, b_cuda, "A", "B")
    at.toggle(key="ui.side_by_side").set_value(True).run()
    assert (code_text(at, "cuda-a"), code_text(at, "cuda-b")) == (a_cuda, b_cuda)

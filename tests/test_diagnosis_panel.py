"""The Explorer's diagnosis panel under AppTest: the findings with a link to each suggested
setting, without a GPU; with the stand-in GPU, the suggestions tried through the server's
queue and shown as faster or slower."""
import time
from urllib.parse import parse_qs, urlparse

import pytest
from server_fakes import fake_measurements, settle
from streamlit.testing.v1 import AppTest

from app import diagnosis_panel
from explorer import urlstate
from explorer.presets import get_preset
from explorer.targets import local_gpu_target

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")
PRESET = "dw-blog-channel-96"  # one block per 96×96 channel: uncoalesced stores, an idle GPU
pytestmark = pytest.mark.usefixtures("diagnoses_in_this_process", "assumed_calibration")


def diagnosed(query: dict) -> AppTest:
    """The Explorer once the server's diagnosis of the setting is done (the page polls for it;
    on a server that measures, the diagnosis starts once the setting is measured)."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    spec, _ = urlstate.from_query(query)
    deadline = time.monotonic() + 60
    while (future := diagnosis_panel.job(spec, "auto")) is None:
        assert time.monotonic() < deadline, "the setting was never measured"
        time.sleep(0.05)
    future.result(timeout=300)
    return at.run()


def test_the_panel_lists_findings_with_a_link_to_each_suggestion():
    at = diagnosed({"preset": PRESET})
    assert not at.exception and not at.error
    head = next(m.value for m in at.markdown if "What limits this setting" in m.value)
    assert ("static evidence only" in head) == (local_gpu_target() is None)
    findings = [m.value for m in at.markdown if m.value[:2] in ("1.", "2.", "3.", "4.")]
    assert findings and "µs" in findings[0]
    links = [b for b in at.get("link_button") if b.value == "Open this setting"]
    assert links
    query = {k: v[-1] for k, v in parse_qs(urlparse(links[0].proto.url).query).items()}
    suggested, preset = urlstate.from_query(query)
    assert preset == PRESET and suggested != get_preset(PRESET).spec
    assert len(suggested.knobs.changed_from(get_preset(PRESET).spec.knobs)) in (1, 2)


def test_a_refused_setting_gets_no_diagnosis():
    at = AppTest.from_file(MAIN, default_timeout=120)
    # 64 × 32 = 2,048 threads in a block: the GPU verifier refuses it.
    at.query_params.update({"preset": PRESET, "knob.num_thread_x": "64", "knob.num_thread_y": "32"})
    at.run()
    assert "2048" in at.error[0].value
    assert not any("What limits this setting" in m.value for m in at.markdown)


def test_tried_suggestions_say_faster_or_slower(monkeypatch):
    spec = get_preset(PRESET).spec
    tried = {}  # the suggestions' times, once the diagnosis has made them
    # The stand-in GPU: 40 µs for the setting, 20 µs for the first suggestion, 50 µs for the others.
    calls = fake_measurements(monkeypatch, lambda s: 40.0 if s == spec else tried.get(s, 50.0))
    at = settle(diagnosed({"preset": PRESET}))
    diagnosis = diagnosis_panel.job(spec, "auto").result(timeout=300)  # placed on the measured roofline
    suggestions = diagnosis.suggestions(4)
    assert len(suggestions) >= 2
    faster, slower = suggestions[0].spec, suggestions[1].spec
    tried[faster] = 20.0
    at.run()
    assert any("measured 40.00 µs" in m.value for m in at.markdown)
    at.button(key="ui.diagnosis.try").click().run()
    at = settle(at)
    at = settle(at)
    captions = " ".join(c.value for c in at.caption)
    assert "Tried on the GPU: faster, 20.00 µs (2.00× this setting's speed)." in captions
    assert "Tried on the GPU: slower, 50.00 µs (1.25× this setting's time)." in captions
    assert slower in calls and calls.count(spec) == 1  # the setting measured once, for the latency panel and this


def test_verdict_sentences():
    assert diagnosis_panel.verdict(10.0, 5.0).startswith("Tried on the GPU: faster, 5.00 µs (2.00×")
    assert diagnosis_panel.verdict(10.0, 12.5).startswith("Tried on the GPU: slower, 12.50 µs (1.25×")
    assert diagnosis_panel.verdict(10.0, 10.2) == "Tried on the GPU: the same speed, 10.20 µs."
    assert diagnosis_panel.verdict(10.0, None) == "Tried on the GPU: its result was wrong."


def test_a_diagnosis_that_does_not_come_in_time_says_why_and_the_page_stops_looking(monkeypatch):
    from concurrent.futures import Future

    from app import handle

    never = Future()  # the diagnosing process is busy with the class's other settings
    monkeypatch.setattr(handle.server(), "diagnosis", lambda *args, **kwargs: never)
    monkeypatch.setattr(handle.server(), "diagnosis_queue", lambda future: (3, 31.0))
    monkeypatch.setattr(diagnosis_panel, "PATIENCE_S", 30.0)
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params.update({"preset": PRESET})
    at.run()
    assert not at.exception
    said = [c.value for c in at.caption if c.value.startswith("Diagnosis: not ready after 31 s")]
    assert said and "3 setting(s) the class opened are ahead of this one" in said[0]
    assert not any("Diagnosing this setting" in c.value for c in at.caption)  # no fragment polls any more


def test_a_suggestion_measured_slower_goes_after_the_others_and_the_next_leads():
    from explorer.analysis.diagnosis import Diagnosis, Finding, Suggestion

    spec = get_preset(PRESET).spec
    first, second = spec.with_knobs(unroll=True), spec.with_knobs(num_thread_x=16)
    found = (Finding("a", "A", (), 3.0, "", Suggestion(first, (), 0, 1)),
             Finding("b", "B", (), 2.0, "", Suggestion(second, (), 0, 1)), Finding("c", "C", (), 1.0, ""))
    d = Diagnosis(spec, found)
    slower = {first: (diagnosis_panel.verdict(10.0, 12.5), diagnosis_panel.not_faster(10.0, 12.5))}
    assert [f.rule for f in diagnosis_panel.ordered(d, slower)] == ["b", "c", "a"]
    faster = {first: (diagnosis_panel.verdict(10.0, 5.0), diagnosis_panel.not_faster(10.0, 5.0))}
    assert [f.rule for f in diagnosis_panel.ordered(d, faster)] == ["a", "b", "c"]
    assert diagnosis_panel.not_faster(10.0, None) and not diagnosis_panel.not_faster(10.0, 10.2)

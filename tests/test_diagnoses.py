"""The server's diagnoses (explorer.server.diagnosing): one per setting for every session, one at a
time, settings left behind dropped before they start, a refusal raised to the caller."""
import hashlib
import threading
from types import SimpleNamespace

import pytest

from explorer import build as build_module
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.server import diagnosing
from explorer.server.builds import build_source_only
from explorer.server.diagnosing import WAITING, Diagnoses

SPEC = get_preset("dw-blog-final-96").spec


def spec_x(x: int):
    return SPEC.with_knobs(num_thread_x=x)


def test_sessions_share_one_diagnosis_and_they_run_one_at_a_time():
    gate, running, ran = threading.Event(), [], []

    def run(spec, target, ceilings, measured_us):
        running.append(spec)
        assert len(running) - len(ran) == 1  # never two at once
        gate.wait(10)
        ran.append(spec)
        return f"diagnosis of {spec.knobs.num_thread_x}"

    service = Diagnoses(run)
    try:
        first = service.get(spec_x(8), "auto")
        assert service.get(spec_x(8), "auto") is first  # a second session shares it
        later = [service.get(spec_x(x), "auto") for x in (1, 2, 4, 16, 32)]  # five wait behind the first
        gate.set()
        assert first.result(10) == "diagnosis of 8"
        assert [f.cancelled() for f in later] == [True] * (len(later) - WAITING) + [False] * WAITING
        assert later[-1].result(10) == "diagnosis of 32"
        assert service.get(spec_x(1), "auto").result(10) == "diagnosis of 1"  # asked again: it starts again
    finally:
        service.close()


def test_a_refused_setting_raises_its_sentence():
    service = Diagnoses(lambda *args: ExplorerError("Too many threads in a block."))
    try:
        with pytest.raises(ExplorerError, match="Too many threads"):
            service.get(SPEC, "auto").result(10)
    finally:
        service.close()


def test_a_waiting_diagnosis_knows_how_many_are_ahead_and_since_when():
    gate = threading.Event()
    service = Diagnoses(lambda spec, target, ceilings, measured_us: gate.wait(10) and "done")
    try:
        first, second, third = (service.get(spec_x(x), "auto") for x in (8, 16, 32))
        assert service.wait(first)[0] == 0  # running: nothing ahead of it
        assert [service.wait(f)[0] for f in (second, third)] == [1, 2]
        assert 0 <= service.wait(third)[1] < 10
        gate.set()
        assert third.result(10) == "done" and service.wait(third)[0] == 0
    finally:
        service.close()


def test_a_setting_is_diagnosed_once_after_its_measurement(monkeypatch):
    """Its measurement on its way, the diagnosis waits for it and is placed on it; the full
    measurement after a quick one diagnoses nothing again; a measurement that does not come in
    MEASURE_WAIT_S is not waited for."""
    runs = []
    service = Diagnoses(lambda spec, target, ceilings, measured_us: runs.append(measured_us) or f"at {measured_us}")
    quick, full = (SimpleNamespace(median_us=us, ceilings=None) for us in (10.0, 9.6))
    try:
        assert service.get(SPEC, "auto", None, True) is None  # measuring: nothing started yet
        first = service.get(SPEC, "auto", quick)
        assert first.result(10) == "at 10.0"
        assert service.get(SPEC, "auto", full) is first and service.get(SPEC, "auto") is first
        assert runs == [10.0]
        monkeypatch.setattr(diagnosing, "MEASURE_WAIT_S", 0.0)  # a measurement that never comes
        assert service.get(spec_x(4), "auto", None, True).result(10) == "at None"
    finally:
        service.close()


def test_app_processes_sharing_a_folder_diagnose_a_setting_once(tmp_path, monkeypatch):
    """Two app processes' diagnoses (two services here) on one folder: the first diagnoses, the
    second reads its diagnosis; a claim another process left behind is waited for, then not."""
    runs = []

    def run(spec, target, ceilings, measured_us):
        runs.append(spec)
        return f"diagnosis of {spec.knobs.num_thread_x}"

    first, second = Diagnoses(run), Diagnoses(run)
    try:
        for service in (first, second):
            service.share(str(tmp_path / "diagnoses"))
        assert first.get(SPEC, "auto").result(10) == "diagnosis of 16"
        assert second.get(SPEC, "auto").result(10) == "diagnosis of 16" and runs == [SPEC]
        # Both at once: one diagnoses, the other waits for its file.
        both = [service.get(spec_x(8), "auto") for service in (first, second)]
        assert [f.result(10) for f in both] == ["diagnosis of 8"] * 2 and runs.count(spec_x(8)) == 1
        # A process that died while diagnosing left its claim: waited for SHARED_WAIT_S, then diagnosed here.
        monkeypatch.setattr(diagnosing, "SHARED_WAIT_S", 0.3)
        name = hashlib.sha256(repr((spec_x(4), "auto")).encode()).hexdigest() + ".pickle.lock"
        (tmp_path / "diagnoses" / name).write_text("")  # another process's claim, never released
        assert second.get(spec_x(4), "auto").result(10) == "diagnosis of 4" and runs.count(spec_x(4)) == 1
    finally:
        first.close()
        second.close()


def test_a_diagnosis_reads_the_pages_kept_build_and_says_what_building_it_says(tmp_path, monkeypatch):
    """The page's build process kept the setting on disk: the diagnosing process reads it instead of
    scheduling and lowering it again, and the diagnosis is the one a build of its own gives."""
    kept_at = str(tmp_path / "kept.pickle")
    build_source_only(SPEC, "h100", keep_at=kept_at, keep_at_most=10)  # the page's build process
    monkeypatch.setattr(build_module, "_build_cached", build_module._build_cached)  # handed back after the test
    build_module.keep_builds(128)  # this process has built nothing yet
    scheduled, real = [], build_module.scheduled
    monkeypatch.setattr(build_module, "scheduled",
                        lambda spec, target=None: scheduled.append(spec) or real(spec, target))
    from_disk = diagnosing.diagnose_in_process(SPEC, "h100", kept_at=kept_at)
    assert SPEC not in scheduled and scheduled  # its neighbours are built, the setting itself is read
    assert from_disk == diagnosing.diagnose_in_process(SPEC, "h100") and from_disk.findings
    assert SPEC in scheduled  # without the kept build it is built here

"""A class prepared before it meets (explorer/server/prepare.py): the settings counted up front, progress
with an estimate, the measurements kept on disk (explorer/server/measure_store.py) and read by a fresh
server, which measures none of them again; an interrupted prepare goes on where it stopped."""
import dataclasses
import os
import threading
import time
from types import SimpleNamespace

import pytest
from server_fakes import fake_measurement

from explorer.lessons import get_lesson
from explorer.measure import NoDevice
from explorer.presets import get_preset
from explorer.server import measure_store
from explorer.server import prepare as prepare_module
from explorer.server.diagnosing import Diagnoses, kept_folder
from explorer.server.in_process import MeasuringInProcess
from explorer.server.measure_store import PREPARE, MeasurementStore, describe
from explorer.server.prepare import Progress, prepare, prepared_sentence, read_manifest, settings_to_prepare
from explorer.server.scheduler import Scheduler
from explorer.server.settings import ServerSettings

SPEC = get_preset("dw-blog-final-96").spec
LESSONS = ["matmul", "conv2d_autotvm"]  # two steps each: four settings, prepared in seconds


def stand_in_measuring(settings, measured: list, us: float = 5.0) -> MeasuringInProcess:
    """A server's measuring with a stand-in GPU ("Fake GPU", ``us`` µs a kernel) that records what it measures."""
    def measure(job):
        measured.append(job.spec)
        return fake_measurement(job.spec, us)

    return MeasuringInProcess(settings, measure_fn=measure, warm_up_fn=lambda first, target, warm: "Fake GPU")


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """A server's settings whose builds and measurements are kept in this test's own folders."""
    monkeypatch.setattr(MeasuringInProcess, "_measure_ceilings", lambda self, target: None)  # no GPU to ask
    return ServerSettings(build_dir=str(tmp_path / "builds"), build_disk_cache=4096, build_workers=0,
                          compile_workers=1, measure_dir=str(tmp_path / "measurements"))


def test_the_settings_are_the_steps_and_their_one_knob_neighbours_each_once():
    steps = list(dict.fromkeys(step.preset.spec for step in get_lesson("matmul").steps))
    around, count = settings_to_prepare(["matmul"])
    assert count == len(steps) == 2 and around[0] == steps[0] and set(steps) <= set(around)
    assert len(around) == len(set(around)) > 10
    moved = [spec for spec in around if spec not in steps]
    assert all(sum(a != b for a, b in zip(spec.knobs.to_dict().values(), steps[0].knobs.to_dict().values(),
                                          strict=True)) == 1
               or sum(a != b for a, b in zip(spec.knobs.to_dict().values(), steps[1].knobs.to_dict().values(),
                                             strict=True)) == 1 for spec in moved)
    assert settings_to_prepare(["matmul"], around=False) == (steps, 2)


def test_progress_estimates_the_rest_at_the_pace_of_this_run():
    now, lines = [0.0], []
    progress = Progress(10, lines.append, now=lambda: now[0])
    progress.one(SPEC, "already prepared", already=True)  # found done: costs nothing, says nothing of the pace
    assert "estimating the rest" in lines[-1] and lines[-1].startswith("[ 1/10]  10%")
    now[0] = 4.0
    progress.one(SPEC, "built, measured 5.00 µs")
    progress.one(SPEC, "built, measured 5.00 µs")  # two in 4 s: 2 s each, 7 to go
    assert "0:04 elapsed · about 0:14 left · depthwise_blog: built, measured 5.00 µs" in lines[-1]
    for _ in range(7):
        progress.one(SPEC, "built")
    assert lines[-1].startswith("[10/10] 100%") and "· done ·" in lines[-1]


def test_the_store_reads_this_gpus_full_measurements_until_their_age(tmp_path, monkeypatch):
    result = fake_measurement(SPEC, 5.0)
    store = MeasurementStore(str(tmp_path), "NVIDIA H200", max_age_s=600)
    store.put(SPEC, "auto", result, time.time() - 60, PREPARE)
    store.put(SPEC.with_knobs(num_thread_x=8), "auto", result, time.time() - 700)  # older than the age
    [kept] = store.fresh()
    assert (kept.spec, kept.target, kept.result, kept.measured_by) == (SPEC, "auto", result, PREPARE)
    assert MeasurementStore(str(tmp_path), "NVIDIA H100", 600).fresh() == []  # another GPU's
    store.put(SPEC, "auto", dataclasses.replace(result, compile_ms=1.0), time.time())  # measured again: replaced
    assert [k.result.compile_ms for k in store.fresh()] == [1.0]
    store.put(SPEC.with_knobs(num_thread_x=4), "auto", result, time.time() - measure_store.PRUNE_AFTER_S - 1)
    store.close()
    store = MeasurementStore(str(tmp_path), "NVIDIA H200", max_age_s=10 * measure_store.PRUNE_AFTER_S)
    assert {k.spec.knobs.num_thread_x for k in store.fresh()} == {16, 8}  # older than a week: deleted at the open
    monkeypatch.setattr(measure_store, "versions", lambda: "another explorer")
    assert store.fresh() == []  # another version's measurements are not read
    os.chmod(tmp_path, 0o777)
    assert MeasurementStore.open(str(tmp_path), "NVIDIA H200", 600) is None  # others may write there
    assert MeasurementStore.open("", "NVIDIA H200", 600) is None  # none kept


def test_a_measurement_read_from_the_disk_ends_a_job_asked_for_during_the_warm_up():
    measured, ready = [], threading.Event()
    scheduler = Scheduler(lambda job: measured.append(job) or "measured here", ready=ready)
    try:
        job = scheduler.request("a student", SPEC, "auto")  # the GPU still warming up: it waits
        assert scheduler.preload([(SPEC, "auto", "kept", time.time() - 5)]) == 1
        assert job.wait(1) and job.result == "kept" and 4 < job.age_s() < 60
        ready.set()
        assert scheduler.request("another", SPEC, "auto") is job and scheduler.result(SPEC, "auto") == "kept"
        assert scheduler.preload([(SPEC, "auto", "older", time.time() - 9)]) == 0  # its own result stands
        time.sleep(0.3)
        assert measured == []
    finally:
        scheduler.close()


def test_a_prepared_cache_is_read_by_a_fresh_server_which_measures_none_of_it(settings):
    """Interrupted after two settings and run again, the prepare measures the other two only; a server
    started afterwards reads all four from the disk, measures nothing and says so."""
    specs, _ = settings_to_prepare(LESSONS, around=False)
    lines, first = [], []

    def interrupt_after_two(line):
        lines.append(line)
        if line.startswith("[2/4]"):
            raise KeyboardInterrupt  # the teacher's Ctrl-C, once two settings are done

    assert prepare(LESSONS, around=False, settings=settings, say=interrupt_after_two,
                   measuring=stand_in_measuring(settings, first)) == 130
    assert lines[0] == "Preparing 4 settings: the 4 steps of matmul, conv2d_autotvm."
    assert any(line.startswith("Measuring on Fake GPU") for line in lines)
    assert "Interrupted after" in lines[-1] and "2 of 4 settings prepared" in lines[-1]
    assert first == specs[:2] and read_manifest(settings)["interrupted"]

    lines.clear()
    again = []
    assert prepare(LESSONS, around=False, settings=settings, say=lines.append,
                   measuring=stand_in_measuring(settings, again)) == 0
    progress = [line for line in lines if line.startswith("[")]
    assert [line.endswith("already prepared") for line in progress] == [True, True, False, False]
    assert again == specs[2:] and "measured 5.00 µs" in progress[-1] and "· done ·" in progress[-1]
    assert lines[-1].startswith("Prepared 4 settings in ") and "4 measured on Fake GPU" in lines[-1]

    measured = []
    fresh = stand_in_measuring(settings, measured, us=9.0)
    fresh.start()
    try:
        fresh.wait_started()
        jobs = [fresh.request(f"student {i}", spec, "auto") for i, spec in enumerate(specs)]
        assert all(job.done and job.result.median_us == 5.0 for job in jobs)
        time.sleep(0.3)
        assert measured == []  # nothing prepared is measured again
        stored = fresh.stats()["measurements"]["stored"]
        assert stored == describe(MeasurementStore(settings.measure_dir, "Fake GPU", 1800).fresh())
        assert stored["loaded"] == stored["prepared"] == 4
    finally:
        fresh.close()
    said = prepared_sentence(stored, read_manifest(settings), settings.measure_max_age_s)
    assert said.startswith("Started on a prepared cache: `python -m explorer prepare` prepared 4 settings of matmul, "
                           "conv2d_autotvm on ")
    assert "(4 built, 0 refused, 4 measured on Fake GPU)" in said and "read 4 measurements of this GPU" in said


def test_without_a_gpu_the_prepare_builds_and_says_nothing_is_measured(settings):
    lines = []
    def no_gpu_here(first, target, warm):
        raise NoDevice("No GPU on this machine: code and diagrams only.")

    no_gpu = MeasuringInProcess(settings, measure_fn=lambda job: pytest.fail("measured without a GPU"),
                                warm_up_fn=no_gpu_here)
    assert prepare(["matmul"], around=False, settings=settings, say=lines.append, measuring=no_gpu) == 0
    assert any(line.startswith("No GPU on this machine: the builds and the kernels' binaries are prepared")
               for line in lines)
    assert lines[-1].startswith("Prepared 2 settings in ") and "nothing measured (no GPU)" in lines[-1]
    assert all(os.path.exists(os.path.join(settings.build_dir, name)) for name in os.listdir(settings.build_dir))
    assert prepared_sentence(None, read_manifest(settings), 1800).endswith("no GPU there: nothing measured).")


def test_a_prepare_refuses_while_a_server_measures_on_the_machines_gpu(settings):
    """No two processes time kernels on one GPU at once: a server holds its turn, a prepare needs it alone."""
    server, measured = stand_in_measuring(settings, []), []
    server.start()
    try:
        server.wait_started()
        lines = []
        assert prepare(LESSONS, around=False, settings=settings, say=lines.append,
                       measuring=stand_in_measuring(settings, measured)) == 2
        assert "stop it before preparing" in lines[-1] and measured == []
    finally:
        server.close()
    assert prepare(LESSONS, around=False, settings=settings, say=lines.append,
                   measuring=stand_in_measuring(settings, measured)) == 0 and len(measured) == 4


def test_a_prepared_diagnosis_is_what_a_fresh_servers_page_reads(settings, monkeypatch):
    """With diagnoses on, the prepare diagnoses each setting on its measurement and keeps it beside the
    measurements; a server's diagnoses read it for that measurement instead of diagnosing again."""
    settings = dataclasses.replace(settings, diagnose=True)
    diagnosed = []
    monkeypatch.setattr(prepare_module, "diagnosing_process", lambda settings, workers: SimpleNamespace(close=list))
    monkeypatch.setattr(prepare_module, "diagnose_in", lambda process, spec, target, ceilings, us, disk=None:
                        diagnosed.append(spec) or f"diagnosis of {spec.template} at {us}")
    lines = []
    assert prepare(LESSONS, around=False, settings=settings, say=lines.append,
                   measuring=stand_in_measuring(settings, [])) == 0
    specs, _ = settings_to_prepare(LESSONS, around=False)
    assert diagnosed == specs and all(line.endswith("measured 5.00 µs, diagnosed") for line in lines if "·" in line)
    assert ", 4 diagnosed. " in lines[-1]

    pages = Diagnoses(lambda *args: pytest.fail("diagnosed again"))
    pages.share(kept_folder(settings), settings.measure_max_age_s)  # as a server started afterwards does
    try:
        assert pages.get(specs[0], "auto", fake_measurement(specs[0], 5.0)).result(10) == "diagnosis of matmul at 5.0"
    finally:
        pages.close()
    lines.clear()
    assert prepare(LESSONS, around=False, settings=settings, say=lines.append,
                   measuring=stand_in_measuring(settings, [])) == 0
    assert diagnosed == specs and [line.endswith("already prepared") for line in lines if "·" in line] == [True] * 4

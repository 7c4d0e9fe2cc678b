"""A server with several GPUs (``EXPLORER_GPUS``): one measuring worker per GPU, a job on
whichever is free, never two on one GPU at once, a job whose worker died handed to another
GPU once, and each worker started seeing its one GPU (stand-in GPUs: no CUDA needed)."""
import os
import threading
import time

import pytest
from server_fakes import fake_measurement

from explorer.measure import KernelCrashed
from explorer.measure.worker import VISIBLE, _PinnedWorker
from explorer.presets import get_preset
from explorer.server import local_gpus
from explorer.server.in_process import MeasuringInProcess
from explorer.server.settings import ServerSettings

SPEC = get_preset("dw-blog-final-96").spec
SETTINGS = [SPEC.with_knobs(num_thread_x=x) for x in (1, 2, 4, 8, 16, 32)]


def server(gpus: int, measure, monkeypatch) -> MeasuringInProcess:
    monkeypatch.setattr(local_gpus, "measure_job", measure)
    measuring = MeasuringInProcess(ServerSettings(build_workers=0, diagnose=False, gpus=gpus),
                                   compile_fn=lambda spec, target: None,
                                   warm_up_fn=lambda first, target, warm: "Stand-in GPU")
    measuring.ready.set()
    measuring.warm.finish("Stand-in GPU")
    return measuring


def results(measuring: MeasuringInProcess, specs) -> list:
    jobs = [measuring.request(f"student {n}", spec, "auto") for n, spec in enumerate(specs)]
    assert all(job.wait(30) for job in jobs)
    assert [job.error for job in jobs] == [None] * len(jobs)
    return [job.result for job in jobs]


def test_jobs_run_on_every_gpu_and_never_two_on_one(monkeypatch):
    runs, lock = [], threading.Lock()

    def measure(job, gpu):
        started = time.monotonic()
        time.sleep(0.2)
        with lock:
            runs.append((gpu, started, time.monotonic()))
        return fake_measurement(job.spec, 5.0)

    measuring = server(2, measure, monkeypatch)
    try:
        measured = results(measuring, SETTINGS)
        assert len(measuring.gpus) == 2 and {gpu for gpu, _, _ in runs} == set(measuring.gpus.all)
        for gpu in measuring.gpus.all:  # one kernel at a time on each GPU
            mine = sorted((start, end) for g, start, end in runs if g is gpu)
            assert all(later[0] >= earlier[1] for earlier, later in zip(mine, mine[1:], strict=False))
        assert any(a[1] < b[2] and b[1] < a[2] for a in runs for b in runs if a[0] is not b[0])  # both at once
        assert sorted({m.gpu for m in measured}) == ["0", "1"]
        counted = [sum(g is gpu for g, _, _ in runs) for gpu in measuring.gpus.all]
        assert [c["measured"] for c in measuring.gpus.counts] == counted
    finally:
        measuring.close()


def test_a_job_whose_worker_died_goes_to_the_other_gpu(monkeypatch):
    died = []

    def measure(job, gpu):
        if gpu is measuring.gpus.all[1] and not died:
            died.append(job.spec)
            raise KernelCrashed("The kernel crashed the measuring process.")
        time.sleep(0.05)
        return fake_measurement(job.spec, 5.0)

    measuring = server(2, measure, monkeypatch)
    try:
        measured = results(measuring, SETTINGS[:4])
        assert died and all(m.correct for m in measured)
        assert measuring.gpus.counts[1]["crashed"] == 1 and sum(c["measured"] for c in measuring.gpus.counts) == 4
    finally:
        measuring.close()


def test_with_one_gpu_a_crash_is_the_measurement_s_answer(monkeypatch):
    def measure(job, gpu):
        raise KernelCrashed("The kernel crashed the measuring process.")

    measuring = server(1, measure, monkeypatch)
    try:
        job = measuring.request("a student", SPEC, "auto")
        assert job.wait(30) and job.error == "The kernel crashed the measuring process."
        assert measuring.gpus.counts == [{"measured": 0, "crashed": 1}] and measuring.gpus.all[0].gpu is None
    finally:
        measuring.close()


@pytest.mark.parametrize(("seen", "index", "child"), [(None, "1", "1"), ("2,3", "1", "3"), ("5", "0", "5")])
def test_a_pinned_worker_sees_its_one_gpu(monkeypatch, seen, index, child):
    """What a worker process inherits as it starts (``environment``, around TVM's spawn)."""
    if seen is None:
        monkeypatch.delenv(VISIBLE, raising=False)
    else:
        monkeypatch.setenv(VISIBLE, seen)
    with _PinnedWorker(index).environment():
        assert os.environ.get(VISIBLE) == child
    assert os.environ.get(VISIBLE) == seen  # this process's own view is kept


def test_a_worker_of_every_gpu_starts_only_between_other_workers_pinnings(monkeypatch):
    """GPU 0's worker (no pin: it sees every GPU and uses the first) started while GPU 1's is being
    started waits for it, and so never inherits GPU 1's pin from this process's environment."""
    monkeypatch.delenv(VISIBLE, raising=False)
    seen = []

    def start():
        with _PinnedWorker(None).environment():
            seen.append(os.environ.get(VISIBLE))

    with _PinnedWorker("1").environment():  # GPU 1's worker starting: its pin is in the environment
        thread = threading.Thread(target=start)
        thread.start()
        thread.join(0.5)
        assert seen == [] and os.environ[VISIBLE] == "1"  # it waits
    thread.join(10)
    assert seen == [None]


def test_a_server_setting_of_gpus_it_cannot_take_is_refused(monkeypatch):
    from explorer.errors import ExplorerError

    monkeypatch.setenv("EXPLORER_GPUS", "two")
    with pytest.raises(ExplorerError, match="EXPLORER_GPUS must be a positive whole number, not 'two'"):
        ServerSettings()

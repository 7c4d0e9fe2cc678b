"""A stand-in GPU for tests of real servers: the warm-up takes ``STAND_IN_WARM_UP_S`` seconds
and every measurement answers 5 µs after 50 ms, each logged as a kernel run (``EXPLORER_RUN_LOG``,
the measuring worker's format: explorer.measure.worker.read_run_line) where that is set. Its
workloads' data goes through the worker's own keeping (explorer.measure.data.KeptData), made by a
stand-in that only counts: ``explorer.measure.data.COUNTS`` says how often each workload's inputs
and reference were put on the device, and each logged run says whether its data was made or kept.
:func:`install` patches the library in the process that measures: the app's own
(tests/stand_in_gpu_app.py) or a class server's measuring service (tests/stand_in_gpu_service.py)."""
import os
import time

import tvm
from live_fakes import fake_measurement

import explorer.live as live
from explorer.measure import data
from explorer.measure.settings import MeasureSettings
from explorer.services.compiles import CompileService

MEASURE_S = 0.05
DEVICE = tvm.cpu(0)


def make_nothing(workload, seed, device):
    """The worker's data of ``workload``, counted as the worker counts it and never made: an upload
    of its inputs and one reference."""
    label = workload.label()
    for what in ("inputs", "uploads", "references"):
        data.COUNTS[what, label] += 1
    return StandInKept(workload)


class StandInKept:
    def __init__(self, workload):
        self.workload, self.nbytes = workload, data.kept_bytes(workload)


KEPT = data.KeptData(make=make_nothing)


def measure(job, gpu=None):
    started = time.time_ns()
    _, made = KEPT.get(job.spec.workload, MeasureSettings().seed, DEVICE)
    time.sleep(MEASURE_S)
    if os.environ.get("EXPLORER_RUN_LOG"):
        with open(os.environ["EXPLORER_RUN_LOG"], "a") as log:
            log.write(f"{os.getpid()} {started} {time.time_ns()} {job.spec.template} {job.spec.workload.label()} "
                      f"| check={MEASURE_S * 1e3:.2f} | data={'made' if made else 'kept'} kernel_us=5.00\n")
    return fake_measurement(job.spec, 5.0)


def warm_up(first, target, warm):
    time.sleep(float(os.environ.get("STAND_IN_WARM_UP_S", "0")))
    return "Fake GPU"


def install() -> None:
    live.warm_up_local_gpu, live._measure_job = warm_up, measure
    # No lesson step is built ahead (a hundred builds on a core the test's class needs;
    # tests/test_live.py tests building ahead): the class here opens one link and moves its knobs.
    live.Live._build_ahead = lambda self, specs, target: None
    # Nothing is compiled for a device that runs nothing (tests/test_live_pipeline.py tests the
    # compile processes): their start (TVM, the tensor-core intrinsics) and each setting's compile
    # would take a core from the class.
    live.Live._compile_job = lambda self, job: None
    CompileService.start = lambda self, warm_specs=(), target="auto": None
    live.Live._measure_ceilings = lambda self, target: None
    live.Live.baseline = lambda self, workload: None

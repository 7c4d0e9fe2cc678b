"""A stand-in GPU for tests of real servers: the warm-up takes ``STAND_IN_WARM_UP_S`` seconds
and every measurement answers 5 µs after 50 ms, each logged as a kernel run (``EXPLORER_RUN_LOG``,
the measuring worker's format) where that is set. :func:`install` patches the library in the
process that measures: the app's own (tests/stand_in_gpu_app.py) or a class server's
measuring service (tests/stand_in_gpu_service.py)."""
import os
import time

from server_fakes import fake_measurement

from explorer.server import in_process, local_gpus
from explorer.server.api import Server
from explorer.server.compiles import CompileService
from explorer.server.in_process import MeasuringInProcess

MEASURE_S = 0.05


def measure(job, gpu=None):
    started = time.time_ns()
    time.sleep(MEASURE_S)
    if os.environ.get("EXPLORER_RUN_LOG"):
        with open(os.environ["EXPLORER_RUN_LOG"], "a") as log:
            log.write(f"{os.getpid()} {started} {time.time_ns()} {job.spec.template} stand-in\n")
    return fake_measurement(job.spec, 5.0)


def warm_up(first, target, warm):
    time.sleep(float(os.environ.get("STAND_IN_WARM_UP_S", "0")))
    return "Fake GPU"


def install() -> None:
    in_process.warm_up_local_gpu, local_gpus.measure_job = warm_up, measure
    # No lesson step is built ahead (a hundred builds on a core the test's class needs;
    # tests/test_server.py tests building ahead): the class here opens one link and moves its knobs.
    Server._build_ahead = lambda self, specs, target: None
    # Nothing is compiled for a device that runs nothing (tests/test_server_pipeline.py tests the
    # compile processes): their start (TVM, the tensor-core intrinsics) and each setting's compile
    # would take a core from the class.
    CompileService.compile = lambda self, spec, target: None
    CompileService.start = lambda self, warm_specs=(), target="auto": None
    MeasuringInProcess._measure_ceilings = lambda self, target: None
    MeasuringInProcess.baseline = lambda self, workload: None

"""The app with a stand-in GPU, for tests of a real server: the warm-up takes
``STAND_IN_WARM_UP_S`` seconds and every measurement answers 5 µs. A test copies this file
into a copy of app/ (Streamlit finds the pages next to the main script) and runs it with
``streamlit run``; the library and the app come from the installed package, the fake
measurements from tests/live_fakes.py (the test puts tests/ on the server's PYTHONPATH)."""
import os
import runpy
import time
from pathlib import Path

from live_fakes import fake_measurement

import explorer.live as live
from app import panels


def measure(job):
    time.sleep(0.05)
    return fake_measurement(job.spec, 5.0)


def warm_up(first, target, warm):
    time.sleep(float(os.environ.get("STAND_IN_WARM_UP_S", "0")))
    return "Fake GPU"


live._warm_up_local_gpu, live._measure_job = warm_up, measure
# No lesson step is built ahead (a hundred builds on a core the test's class needs; tests/test_live.py
# tests building ahead): the class here opens one link and moves its knobs.
live.Live._build_ahead = lambda self, specs, target: None
# Nothing is compiled for a device that runs nothing (tests/test_live_pipeline.py tests the
# compile processes): their start (TVM, the tensor-core intrinsics) and each setting's compile
# would take a core from the class.
live.Live._compile_job = lambda self, job: None
live.CompileService.start = lambda self, warm_specs=(), target="auto": None
live.Live._measure_ceilings = lambda self, target: None
live.Live.baseline = lambda self, workload: None
panels.can_measure = lambda: True
runpy.run_path(str(Path(__file__).with_name("main.py")))  # the app's own script, unchanged

"""The app with a stand-in GPU, for tests of a real server: the warm-up takes
``STAND_IN_WARM_UP_S`` seconds and every measurement answers 5 µs. A test copies this file
into a copy of app/ (Streamlit finds the pages next to the main script) and runs it with
``streamlit run``; the library and the app come from the installed package."""
import os
import time
from pathlib import Path

import explorer.live as live
from app import panels
from explorer.analysis.roofline import Ceilings


def measure(job):
    from explorer.measure import Check, Measurement, Timing

    time.sleep(0.05)
    w = job.spec.workload
    ceilings = Ceilings(1e12, w.compulsory_bytes / 2e3, None, 0, "measured on Fake GPU")
    return Measurement(w.label(), "cuda", "Fake GPU", Check(True, 0.0, 1e-5, 0, None), Timing((5.0, 5.0, 5.0), 100),
                       ceilings, w.flops, w.compulsory_bytes, 0.0)


def warm_up(first, target, warm):
    time.sleep(float(os.environ.get("STAND_IN_WARM_UP_S", "0")))
    return "Fake GPU"


live._warm_up_local_gpu, live._measure_job = warm_up, measure
live.Live._measure_ceilings = lambda self, target: None
live.Live.baseline = lambda self, workload: None
panels.can_measure = lambda: True
main = Path(__file__).with_name("main.py")
exec(compile(main.read_text(), str(main), "exec"))  # the app's own script, unchanged

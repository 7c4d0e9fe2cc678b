"""The app with a stand-in GPU (tests/stand_in_gpu.py), for tests of a real server. A test
copies this file into a copy of app/ (Streamlit finds the pages next to the main script) and
runs it with ``streamlit run``; the library and the app come from the installed package, the
stand-in from tests/ (the test puts tests/ on the server's PYTHONPATH). In an app process of a
multi-process server the measuring service measures, and tests/stand_in_gpu_service.py stands in there."""
import runpy
from pathlib import Path

import stand_in_gpu

from app import latency

stand_in_gpu.install()
latency.can_measure = lambda: True
runpy.run_path(str(Path(__file__).with_name("main.py")))  # the app's own script, unchanged

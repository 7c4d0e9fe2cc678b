"""A new workload and its template need no edit outside their own code and the registry.

This module plays the newcomer: it defines a toy workload (1-D max pooling) and a two-knob
template as a contributor would in explorer/workloads.py and explorer/schedules/, registers
the template for the test only (the registry's dict, monkeypatched), and shows that the
export, the command line, links and the app pick the workload up.
"""
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import tvm
from exported import load
from streamlit.testing.v1 import AppTest

from explorer import schedules, targets, urlstate
from explorer.build import Spec, build
from explorer.cli import main
from explorer.export import snippet
from explorer.knobs import KnobSet, knob
from explorer.schedules.common import Template, bind, new_schedule, schedule_errors
from explorer.services.builds import BuildService
from explorer.workloads import DTYPE, Workload

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")


# -- what a contributor writes ------------------------------------------------------------


@dataclass(frozen=True)
class MaxPool1d(Workload):
    """1-D max pooling: output i is the largest of ``window`` inputs from i * stride."""

    kind: ClassVar[str] = "max_pool1d"
    title: ClassVar[str] = "1-D max pooling"
    input_names: ClassVar[tuple[str, ...]] = ("A",)
    output_name: ClassVar[str] = "B"

    length: int = knob(4096, "Input length.", low=1, high=1 << 20)
    window: int = knob(4, "Inputs per output.", low=1, high=64)
    stride: int = knob(2, "Step between windows.", low=1, high=64)

    def input_shapes(self):
        return ((self.length,),)

    def output_shape(self):
        return ((self.length - self.window) // self.stride + 1,)

    def _tensors(self, variant):
        from tvm import te

        a = te.placeholder((self.length,), name="A")
        r = te.reduce_axis((0, self.window), name="r")
        b = te.compute(self.output_shape(), lambda i: te.max(a[i * self.stride + r], axis=r), name="B")
        return [a], b

    def reference(self, a):
        windows = np.lib.stride_tricks.sliding_window_view(a, self.window)[:: self.stride]
        return windows.max(axis=1).astype(DTYPE)

    def torch_op(self, tensors):
        import torch.nn.functional as F

        (a,) = tensors
        return lambda: F.max_pool1d(a.reshape(1, 1, -1), self.window, self.stride).reshape(-1)

    @property
    def flops(self):
        return math.prod(self.output_shape()) * self.window  # one comparison per input read

    def label(self):
        return f"max_pool1d L={self.length} window {self.window} stride {self.stride}"


@dataclass(frozen=True)
class MaxPool1dKnobs(KnobSet):
    owner: ClassVar[str] = "max_pool1d_flat"

    threads: int = knob(128, "Threads per CUDA block.", choices=(32, 64, 128, 256))
    outputs_per_thread: int = knob(1, "Consecutive outputs computed by one thread.", choices=(1, 2, 4))


def schedule(workload: MaxPool1d, k: MaxPool1dKnobs):
    with schedule_errors(k):
        sch = new_schedule(workload)
        (i, _) = sch.get_loops(sch.get_sblock("B"))
        bx, tx, _ = sch.split(i, factors=[None, k.threads, k.outputs_per_thread])
        bind(sch, bx, "blockIdx.x")
        bind(sch, tx, "threadIdx.x")
        return sch


TEMPLATE = Template(
    name="max_pool1d_flat",
    title="1-D max pooling — one run of outputs per thread",
    summary="Outputs cut into blocks of threads; each thread computes a few consecutive outputs.",
    workload=MaxPool1d,
    knobs=MaxPool1dKnobs,
    apply=schedule,
    tag_knobs={"threadIdx.x": ("threads",), "blockIdx.x": ("threads", "outputs_per_thread")},
)

# -- the test: registered, and picked up everywhere -----------------------------------------



@pytest.fixture
def defaults(monkeypatch) -> Spec:
    """Registered (the one line a contributor adds to explorer/schedules/__init__.py, for
    this test only); the template's defaults."""
    monkeypatch.setitem(schedules.TEMPLATES, TEMPLATE.name, TEMPLATE)
    return Spec(TEMPLATE.name, MaxPool1d(), MaxPool1dKnobs())


def test_the_library_builds_it_correctly(defaults):
    """The definition agrees with its NumPy reference on the CPU (the scheduled kernel is
    checked the same way on a GPU); hand-computed: windows [0:4], [2:6], [4:8] of 0..8."""
    small = MaxPool1d(length=9, window=4, stride=2)
    assert small.output_shape() == (3,)
    np.testing.assert_array_equal(small.reference(np.arange(9, dtype=DTYPE)), [3, 5, 7])
    func = tvm.compile(tvm.IRModule({"main": small.prim_func()}), target="llvm")
    (a,) = small.random_inputs(seed=2)
    out = tvm.runtime.tensor(np.zeros(3, DTYPE))
    func["main"](tvm.runtime.tensor(a), out)
    np.testing.assert_array_equal(out.numpy(), small.reference(a))
    assert "blockIdx.x" in build(defaults).cuda


def test_registered_by_its_template_alone(defaults):
    assert schedules.workload_class("max_pool1d") is MaxPool1d
    assert schedules.templates_for("max_pool1d") == [TEMPLATE]
    assert schedules.workload_from_mapping("max_pool1d", {"window": 3}) == MaxPool1d(window=3)
    changed = Spec(TEMPLATE.name, MaxPool1d(length=100), MaxPool1dKnobs(threads=32))
    assert urlstate.from_query(urlstate.to_query(changed)) == (changed, None)


def test_export_round_trip(defaults, tmp_path):
    """The exported script, run on its own, schedules the printed workload into the
    library's module and prints the library's CUDA."""
    path = tmp_path / "pool.py"
    path.write_text(snippet(defaults))
    module = load(path, "pool_snippet")
    tvm.ir.assert_structural_equal(module.schedule(module.Workload).mod, build(defaults).schedule_mod)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES")}
    run = subprocess.run([sys.executable, "-I", str(path)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**env, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    kernel = build(defaults, "h100").cuda
    assert kernel[kernel.index("extern \"C\" __global__"):] in run.stdout


def test_cli_takes_the_template(defaults, tmp_path, capsys):
    assert main(["knobs", TEMPLATE.name]) == 0
    assert "outputs_per_thread" in capsys.readouterr().out
    assert main(["show", TEMPLATE.name, "--set", "threads=32", "--view", "cuda"]) == 0
    assert "__launch_bounds__(32)" in capsys.readouterr().out
    path = tmp_path / "out.py"
    assert main(["export", TEMPLATE.name, "-o", str(path)]) == 0
    assert path.read_text() == snippet(defaults, title=TEMPLATE.title)


@pytest.fixture
def app_in_this_process(monkeypatch):
    """The app builds in a pool of processes and measures in a worker process, each importing
    the registry as the repository has it; this test's registration lives in this process
    only, so the builds run here and the app sees no GPU to measure on."""
    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(BuildService, "_executor", lambda self: pool)
    monkeypatch.setattr(targets, "local_gpu_target", lambda: None)
    yield
    pool.shutdown()


def test_app_lists_it_and_shows_its_code(defaults, app_in_this_process):
    at = AppTest.from_file(MAIN, default_timeout=60).switch_page("views/explorer.py")
    at.session_state["ui.view"] = "CUDA"
    at.run()
    assert MaxPool1d.title in at.sidebar.selectbox(key="ui.workload").options
    at.sidebar.selectbox(key="ui.workload").set_value("max_pool1d").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert at.session_state["spec"] == defaults
    assert at.title[0].value == TEMPLATE.title
    assert at.sidebar.select_slider(key="knob:max_pool1d_flat.threads").value == 128
    cuda = [e.value for e in at.html if 'data-view="cuda"' in e.value]
    assert cuda and "main_kernel(float* __restrict__ A_ptr, float* __restrict__ B_ptr)" in cuda[0]

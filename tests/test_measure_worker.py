"""The measuring worker on the CPU (target llvm), as CI runs it: a correct kernel is timed,
a wrong one is caught with its first wrong index, and a kernel that segfaults or hangs ends
only the worker, which is usable again afterwards."""
import dataclasses

import pytest
import tvm
from tvm import te, tirx
from tvm.script import tirx as T

from explorer.measure import KernelCrashed, KernelTimeout, MeasureSettings, measure, measure_module, shutdown
from explorer.measure.errors import NoDevice
from explorer.presets import get_preset
from explorer.workloads import Matmul

pytestmark = pytest.mark.waits  # real servers or processes waited on: handed out between the others (conftest.py)

WORKLOAD = Matmul(m=8, n=8, k=8)
FAST = MeasureSettings(repeats=3, time_limit_s=2)


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    shutdown()


def correct_module():
    return tvm.IRModule({"main": WORKLOAD.prim_func()})


def wrong_at_2_3_module():
    """C = A @ B, plus 1 at C[2, 3] only."""
    a = te.placeholder((8, 8), name="A")
    b = te.placeholder((8, 8), name="B")
    r = te.reduce_axis((0, 8), name="r")
    c = te.compute((8, 8), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    one_at = lambda i, j: tirx.if_then_else(tirx.all(i == 2, j == 3), tirx.const(1.0, "float32"),  # noqa: E731
                                            tirx.const(0.0, "float32"))
    d = te.compute((8, 8), lambda i, j: c[i, j] + one_at(i, j), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def segfault():
    """Parsed when a test asks for it, not when each test process collects this file."""

    @T.prim_func
    def segfault(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
        # A store 2 TB past the output: unmapped memory.
        far = T.decl_buffer((T.int64(1) << T.int64(40),), "float32", data=C.data)
        far[T.int64(1) << T.int64(39)] = T.float32(1)

    return segfault


def hang():
    """Parsed when a test asks for it, not when each test process collects this file."""

    @T.prim_func
    def hang(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
        while A[0, 0] < T.float32(2):  # inputs are in [-1, 1]: never ends
            C[0, 0] = C[0, 0] + T.float32(1)

    return hang


def first_row_then_zero_inputs():
    """Parsed when a test asks for it, not when each test process collects this file."""

    @T.prim_func
    def first_row_then_zero_inputs(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32"),
                                   C: T.Buffer((8, 8), "float32")):
        for j in range(8):  # row 0 of A @ B, right; the other rows never written
            C[0, j] = T.float32(0)
            for r in range(8):
                C[0, j] = C[0, j] + A[0, r] * B[r, j]
        for i, j in T.grid(8, 8):  # then the inputs overwritten
            A[i, j] = T.float32(0)
            B[i, j] = T.float32(0)

    return first_row_then_zero_inputs


def test_each_run_gets_its_own_copy_of_the_inputs_and_an_unwritten_output():
    """The worker keeps each workload's arguments on the device and copies them for every run:
    a kernel that writes its inputs leaves the next kernel's as they were, and an output element
    a kernel never writes is caught even after another kernel wrote it correctly."""
    assert measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST).correct
    m = measure_module(tvm.IRModule({"main": first_row_then_zero_inputs()}), WORKLOAD, target="llvm", settings=FAST)
    assert not m.correct and m.check.first_wrong_index == (1, 0) and m.check.wrong_count == 56
    assert measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST).correct


def zeros_module(workload):
    """A kernel of ``workload``'s arguments that writes zeros: wrong."""
    inputs = [te.placeholder(shape, name=f"x{i}") for i, shape in enumerate(workload.input_shapes())]
    out = te.compute(workload.output_shape(), lambda *index: tirx.const(0.0, "float32"), name="out")
    return tvm.IRModule({"main": te.create_prim_func([*inputs, out])})


def test_inputs_and_the_reference_are_put_on_the_device_once_per_workload():
    """Settings of one workload, a wrong one among them, and another workload in between: the
    worker made each workload's inputs and reference once (on this CPU: one upload each), and
    kept them across a wrong kernel."""
    from explorer.measure.measurement import LOCAL_GPU
    from explorer.measure.worker import data_counts

    first, second = Matmul(m=8, n=8, k=12), Matmul(m=8, n=8, k=13)
    kernels = [(first, tvm.IRModule({"main": first.prim_func()})), (first, zeros_module(first)),
               (second, tvm.IRModule({"main": second.prim_func()})), (first, tvm.IRModule({"main": first.prim_func()}))]
    assert [measure_module(kernel, workload, target="llvm", settings=FAST).correct
            for workload, kernel in kernels] == [True, False, True, True]
    told = LOCAL_GPU.worker.call(data_counts, timeout=60)
    for workload in (first, second):
        label = workload.label()
        assert {what: told.get((what, label)) for what in ("inputs", "uploads", "references", "remade")} == \
            {"inputs": 1, "uploads": 1, "references": 1, "remade": None}


def test_correct_kernel_is_checked_then_timed():
    from explorer.measure import ceilings

    assert ceilings("llvm").source == "measured on CPU"  # measured once, when asked for
    m = measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST)
    assert m.correct and m.check.max_error < m.check.tolerance
    assert m.device == "CPU" and '"llvm"' in m.target
    t = m.timing
    assert len(t.samples_us) == 3 and t.min_us <= t.median_us <= t.max_us
    # Launches per repeat are sized for min_repeat_us = 1000 µs (half of it, on a busy CI machine).
    assert t.launches_per_repeat * t.min_us >= 1000 * 0.5
    # The CPU's ceilings, measured above in the worker (sized for a few cores): a roofline placement.
    assert m.ceilings is not None and m.ceilings.source == "measured on CPU"
    assert m.percent_of_roofline == pytest.approx(100 * m.roofline_us / m.median_us)
    assert m.gflops == pytest.approx(2 * 8**3 / m.median_us / 1e3)


def test_wrong_kernel_gets_no_latency_only_the_first_wrong_index():
    m = measure_module(wrong_at_2_3_module(), WORKLOAD, target="llvm", settings=FAST)
    assert not m.correct
    assert m.check.first_wrong_index == (2, 3) and m.check.wrong_count == 1
    assert m.check.got - m.check.expected == pytest.approx(1.0, abs=1e-5)
    assert m.timing is None and m.median_us is None and m.ceilings is None


def test_worker_survives_a_segfault_and_a_hang():
    with pytest.raises(KernelCrashed, match="crashed the measuring process"):
        measure_module(tvm.IRModule({"main": segfault()}), WORKLOAD, target="llvm", settings=FAST)
    assert measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST).correct
    # A hang keeps a core busy until the time limit: 1 s is enough to tell.
    with pytest.raises(KernelTimeout, match="longer than 1 s"):
        measure_module(tvm.IRModule({"main": hang()}), WORKLOAD, target="llvm",
                       settings=dataclasses.replace(FAST, time_limit_s=1))
    assert measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST).correct


def test_gpu_spec_without_a_gpu_says_so():
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoDevice, match=r"no CUDA device found; use --rpc HOST:PORT --key KEY"):
        measure(get_preset("matmul-tiled-1024").spec, settings=FAST)

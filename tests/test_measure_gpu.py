"""explorer.measure on a local CUDA GPU (skipped without one): presets pass the gate and
get timed, an illegal memory access ends only the worker, the PyTorch baseline computes
the same workloads."""

import pytest
import tvm
from tvm.script import tirx as T

from explorer.measure import (
    QUICK_SETTINGS,
    KernelCrashed,
    MeasureSettings,
    baseline,
    ceilings,
    ceilings_error,
    local_gpu,
    measure,
    measure_module,
    shutdown,
)
from explorer.measure.measurement import LOCAL_GPU
from explorer.measure.worker import data_counts
from explorer.presets import get_preset
from explorer.schedules import workload_classes
from explorer.workloads import Conv1d, Conv2d, DepthwiseConv2d, Matmul

pytestmark = pytest.mark.gpu
QUICK = MeasureSettings(repeats=5)


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    shutdown()


def illegal_address():
    """Parsed when a test asks for it, not when each test process collects this file."""

    @T.prim_func
    def illegal_address(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):  # noqa: B007 (TVMScript names every loop)
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                far = T.decl_buffer((T.int64(1) << T.int64(40),), "float32", data=C.data)  # 1 TB past the output
                far[(T.int64(1) << T.int64(38)) + T.Cast("int64", tx)] = T.float32(1)

    return illegal_address


def test_the_worker_sees_the_gpu():
    assert local_gpu()


@pytest.mark.parametrize("preset", ["dw-blog-final-96", "matmul-tiled-1024", "conv2d-autotvm-resnet-last"])
def test_presets_are_correct_and_timed(preset):
    assert ceilings() is not None, ceilings_error()  # measured once, when asked for
    m = measure(get_preset(preset).spec, settings=QUICK)
    assert m.correct, m.check.describe()
    assert 0 < m.timing.min_us <= m.median_us <= m.timing.max_us
    assert m.timing.launches_per_repeat * m.median_us >= 500  # about 1 ms per repeat
    # The roofline's ceilings are measured on this GPU.
    assert m.ceilings.measured and 0 < m.percent_of_roofline


def test_a_tiny_kernel_is_also_timed_from_a_cuda_graph():
    # 21×21 depthwise: Nsight Compute times the kernel at ~2.8 µs on the H100; back to back
    # each launch adds the host's launch cost, which a graph replay does not pay.
    pytest.importorskip("torch")
    assert ceilings() is not None, ceilings_error()
    m = measure(get_preset("best-dw-21-flat").spec, settings=QUICK)
    assert m.correct and m.graph is not None and m.graph_percent_of_roofline is not None
    assert m.graph.launches >= 100  # ≥ 1 ms per repeat of a few-µs kernel
    assert 0 < m.graph_us < m.median_us
    assert m.versus_pytorch[0] == m.graph_us


def test_an_illegal_memory_access_ends_only_the_worker():
    workload = Matmul(m=8, n=8, k=8)
    with pytest.raises(KernelCrashed):
        measure_module(tvm.IRModule({"main": illegal_address()}), workload, target="auto", settings=QUICK)
    assert measure(get_preset("dw-blog-final-96").spec, settings=QUICK).correct


# Every registered workload at its default shape, then shapes that reach the ops' corners.
@pytest.mark.parametrize("workload", [*(cls() for cls in workload_classes().values()),
    DepthwiseConv2d(channels=32, height=20, width=20),
    DepthwiseConv2d(channels=16, height=12, width=12, kernel=4, multiplier=2, epilogue=True),  # asymmetric SAME pad
    Conv1d(input_length=1000, filter_length=17),
    Conv2d(in_channels=16, out_channels=32, height=9, width=9, stride=2),
    Matmul(m=64, n=48, k=80),
    Matmul(m=64, n=48, k=80, dtype="float16"),
    Matmul(m=64, n=48, k=80, dtype="bfloat16"),
])
def test_pytorch_baseline_computes_the_same_workload(workload):
    pytest.importorskip("torch")
    result = baseline(workload, settings=QUICK)
    assert result.check.correct, result.check.describe()
    assert result.median_us > 0 and result.timing.launches >= 5


def test_a_knob_change_is_measured_as_a_new_kernel():
    spec = get_preset("dw-blog-final-96").spec
    changed = spec.with_knobs(num_thread_x=8, num_vthread_x=4)
    first, second = measure(spec, settings=QUICK), measure(changed, settings=QUICK)
    assert first.correct and second.correct
    assert first.timing.samples_us != second.timing.samples_us


def test_a_cold_l2_times_single_launches_that_read_from_device_memory():
    spec = get_preset("dw-blog-final-96").spec  # 18 MiB of compulsory traffic: L2-resident when warm
    warm = measure(spec, settings=QUICK)
    cold = measure(spec, settings=MeasureSettings(repeats=5, cold_l2=True))
    assert cold.correct and cold.timing.launches_per_repeat == 1 and cold.graph.launches_per_repeat == 1
    # From a graph, neither pays a host launch: the cold one reads its 18 MiB from HBM instead of L2.
    assert cold.graph_us > warm.graph_us
    torch_cold = baseline(spec.workload, settings=MeasureSettings(repeats=5, cold_l2=True))
    assert torch_cold.check.correct and torch_cold.timing.launches_per_repeat == 1


def test_a_workloads_inputs_are_drawn_on_the_gpu_once_for_all_its_settings():
    pytest.importorskip("torch")
    spec = get_preset("dw-blog-final-96").spec
    for changed in (spec, spec.with_knobs(num_thread_x=8, num_vthread_x=4), spec):
        assert measure(changed, settings=QUICK_SETTINGS).correct
    told = LOCAL_GPU.worker.call(data_counts, timeout=60)
    label = spec.workload.label()
    assert told[("inputs", label)] == 1 and told[("references", label)] == 1
    assert ("uploads", label) not in told and ("remade", label) not in told  # nothing came from the host


def test_a_slow_kernel_gets_few_single_launches_after_its_check():
    """Attention three kernels at a time (~16 ms on the H100): two launches with the short budget,
    as few as the full budget holds, each alone, and the two medians agree."""
    pytest.importorskip("torch")
    spec = get_preset("attention-unfused").spec
    quick, full = measure(spec, settings=QUICK_SETTINGS), measure(spec, settings=MeasureSettings())
    assert quick.correct and quick.timing.launches_per_repeat == 1 and len(quick.timing.samples_us) == 2
    assert full.timing.launches_per_repeat == 1 and 2 <= len(full.timing.samples_us) < 20
    assert abs(quick.median_us - full.median_us) < 0.05 * full.median_us

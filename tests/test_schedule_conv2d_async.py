"""The conv2d_async template: split-K kernels, cp.async pipelines and vector copies, read from the
lowered TIR and the CUDA source; the verifier's errors for it; the CUDA compiles with nvcc;
kernels match NumPy on a GPU.

ResNet's last layer ([1,512,7,7] × [512,512,3,3], padding 1) unless said otherwise; sizes
below are worked out by hand: the padded input window of one channel is 9 × 9 = 81 floats,
one output channel's taps of a step of block_k channels are block_k × 9 floats.
"""
import os
import re
import subprocess
import sys

import pytest

from explorer.analysis.sass import compile_binary
from explorer.build import Spec, build, pass_config
from explorer.cuda_compile import nvcc_path
from explorer.errors import InvalidKnobs
from explorer.export import snippet
from explorer.measure.gate import compare
from explorer.presets import get_preset
from explorer.schedules.conv2d_async import Conv2dAsyncKnobs, shared_tile_bytes
from explorer.schedules.matmul_async import MatmulAsyncKnobs
from explorer.workloads import Conv2d, Matmul

RESNET = Conv2d()
SMALL = Conv2d(in_channels=32, out_channels=16, height=7, width=7)


def conv(workload=RESNET, **knobs):
    return build(Spec("conv2d_async", workload, Conv2dAsyncKnobs(**knobs)), "h100")


def wait_groups(cuda: str) -> set[int]:
    return {int(n) for n in re.findall(r"cp\.async\.wait_group (\d+);", cuda)}


def shared_floats(stages, block_k, filter_floats):
    """Bytes of `stages` buffers: the input window (block_k × 81) and the filter tile."""
    return 4 * stages * (block_k * 81 + filter_floats)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_cp_async_and_the_stage_count_appear_when_the_knobs_ask(stages):
    b = conv(stages=stages, transpose_filter=False, shared_pad=0)
    assert "cp.async.cg.shared.global" in b.cuda  # the filter's 16-byte copies
    assert "ptx_cp_async_legacy_pred_ca_4" in b.cuda  # the input's 4-byte copies, zero where padded
    assert max(wait_groups(b.cuda)) == stages - 1 and 0 in wait_groups(b.cuda)
    # The lowered TIR: copies as cp_async_raw, waits for at most stages - 1 groups in flight.
    assert "T.s_tir.cp_async_raw(" in b.lowered
    assert max(int(n) for n in re.findall(r'"async_wait_inflight_count": (\d+)', b.lowered)) == stages - 1
    # 64 channels × 8 × 9 taps per stage; TVM aligns the filter tile after the input window.
    assert abs(b.kernels[0].shared_bytes - shared_floats(stages, 8, 64 * 72)) < 64
    assert shared_tile_bytes(RESNET, Conv2dAsyncKnobs(stages=stages, transpose_filter=False, shared_pad=0)) == \
        shared_floats(stages, 8, 64 * 72)


def test_without_async_copy_there_is_no_cp_async_and_still_the_stage_buffers():
    two = conv(stages=2, async_copy=False)
    assert "cp.async" not in two.cuda and "cp_async" not in two.lowered and "async_wait" not in two.lowered
    one = conv(stages=1, async_copy=False)
    assert "cp.async" not in one.cuda
    # Transposed and padded: 8 × 9 = 72 rows of 64 + 4 floats per stage.
    assert abs(two.kernels[0].shared_bytes - shared_floats(2, 8, 72 * 68)) < 64
    assert abs(one.kernels[0].shared_bytes - shared_floats(1, 8, 72 * 68)) < 64


def test_pass_options_follow_the_knobs():
    assert pass_config(conv(stages=2, async_copy=False).schedule_mod) == {}
    assert pass_config(conv().schedule_mod) == {"tirx.use_async_copy": True, "tirx.disable_storage_rewrite": True}


def test_split_k_launches_a_second_kernel_that_adds_the_partials():
    partial, total = conv().kernels  # split_k 16, 64 channels per block, 4 × 7 outputs per thread
    assert partial.grid == (8, 16, 1) and partial.block == (16 * 7, 1, 1)
    assert total.grid == (512 * 49 // 128, 1, 1) and total.block == (128, 1, 1) and total.shared_bytes == 0
    # The second kernel sums 16 partials per output, 25,088 outputs apart.
    cuda = conv().cuda
    second = cuda[cuda.index("main_kernel_1(float* __restrict__ conv_ptr, float* __restrict__ conv_rf_ptr) {"):]
    assert re.search(r"for \(int \w+ = 0; \w+ < 16; \+\+\w+\)", second) and "* 25088)" in second
    (single,) = conv(split_k=1).kernels
    assert single.grid == (8, 1, 1)


def test_thread_tiles_set_the_threads_and_the_accumulators():
    (kernel, _) = conv(block_f=32, thread_f=2, thread_y=7, thread_x=1, transpose_filter=False).kernels
    assert kernel.block == (16 * 7, 1, 1) and kernel.grid == (16, 16, 1)
    assert "float conv_rf_local_ptr[14];" in conv(block_f=32, thread_f=2, transpose_filter=False).cuda


def test_transposed_filter_is_copied_one_float_at_a_time_and_read_as_float4():
    transposed = conv()
    assert "cp.async.cg" not in transposed.cuda  # no 16-byte copies left
    assert "*(float4*)(kernel_shared_dyn_local_ptr" in transposed.cuda
    plain = conv(transpose_filter=False, shared_pad=0)
    assert "*(float4*)(kernel_shared_dyn_local_ptr" not in plain.cuda


def test_dynamic_shared_memory_is_extern_and_the_static_is_not():
    assert "extern __shared__" in conv(stages=2).cuda
    static = conv(stages=1, async_copy=False, dynamic_shared=False, block_f=32, thread_f=2, read_vector=2)
    assert "extern __shared__" not in static.cuda and "__shared__" in static.cuda


# -- the verifier ---------------------------------------------------------------------


@pytest.mark.parametrize("knobs, match, named", [
    (dict(block_f=4, thread_f=8), "not a multiple of thread_f", ("block_f", "thread_f")),
    (dict(thread_x=2), "thread_x = 2 does not divide out_width = 7", ("thread_x",)),
    (dict(split_k=64, block_k=16), "split_k × block_k = 64 × 16 does not divide", ("split_k", "block_k")),
    (dict(block_f=128, thread_f=1, thread_x=1, transpose_filter=False, shared_pad=0), "6272 threads, more than",
     ("block_f", "thread_f", "thread_y", "thread_x")),
    (dict(stages=1), "needs a pipeline", ("async_copy", "stages")),
    (dict(transpose_filter=False, shared_pad=2), "shared_pad = 2 is not a multiple of 4",
     ("fetch_vector", "shared_pad")),
    (dict(transpose_filter=False, shared_pad=0, block_k=2), "block_k × kh × kw = 18",
     ("fetch_vector", "block_k")),
    (dict(thread_f=2), "thread_f = 2 is not a multiple of 4", ("read_vector", "thread_f")),
    (dict(shared_pad=1), "shared_pad = 1", ("read_vector", "shared_pad")),
])
def test_knobs_that_cannot_work_are_refused_before_compiling(knobs, match, named):
    with pytest.raises(InvalidKnobs, match=match) as error:
        conv(**knobs)
    assert error.value.knobs == named


@pytest.mark.parametrize("spec", [Spec("conv2d_async", SMALL, Conv2dAsyncKnobs(block_f=16, split_k=4, block_k=4)),
                                  Spec("matmul_async", Matmul(m=128, n=128, k=128), MatmulAsyncKnobs(stages=2))],
                         ids=["conv2d_async", "matmul_async"])
def test_cp_async_is_refused_for_gpus_older_than_sm_80(spec):
    with pytest.raises(InvalidKnobs, match="compute capability 8.0 or newer, and the target is sm_75") as error:
        build(spec, "sm_75")
    assert error.value.knobs == ("async_copy",)
    assert "cp.async" in build(spec, "sm_80").cuda
    assert "cp.async" not in build(spec.with_knobs(async_copy=False), "sm_75").cuda


def test_misaligned_global_rows_refuse_vector_copies():
    # 3 input channels × 9 taps = 27 floats per output channel: 16-byte copies would straddle rows.
    odd = Conv2d(in_channels=3, out_channels=16, height=7, width=7)
    with pytest.raises(InvalidKnobs, match=r"in_channels × kh × kw = 27") as error:
        conv(odd, split_k=1, block_k=1, block_f=16, transpose_filter=False, shared_pad=0)
    assert error.value.knobs == ("fetch_vector", "block_k")
    assert conv(odd, split_k=1, block_k=1, block_f=16, transpose_filter=False, shared_pad=0, fetch_vector=1).kernels


def test_static_shared_memory_over_48_kb_points_to_dynamic_allocation():
    # 3 stages × (8 × 81 + 72 × 68) floats = 66,528 bytes > 49,152 (dynamic, TVM aligns it to 66,560).
    with pytest.raises(InvalidKnobs, match=r"66,528 bytes .* statically .* dynamic_shared: up to 232,448") as error:
        conv(dynamic_shared=False)
    assert "dynamic_shared" in error.value.knobs and "stages" in error.value.knobs


def test_dynamic_shared_memory_over_the_opt_in_limit_is_refused():
    # 5 stages × (32 × 81 + 128 × (288 + 4)) floats = 799,360 bytes > 227 KB.
    with pytest.raises(InvalidKnobs, match=r"a block may opt in to dynamically"):
        conv(block_f=128, thread_f=8, block_k=32, split_k=1, stages=5, transpose_filter=False)
    assert shared_tile_bytes(RESNET, Conv2dAsyncKnobs(block_f=128, thread_f=8, block_k=32, split_k=1, stages=5,
                                                      transpose_filter=False)) == 4 * 5 * (32 * 81 + 128 * 292)


# -- compiled code, presets -------------------------------------------------------------


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed")
def test_the_generated_cuda_compiles_for_sm_90a_without_spills():
    binary = compile_binary(conv())
    assert set(binary.registers) == {"main_kernel", "main_kernel_1"}
    assert all(0 < r <= 255 for r in binary.registers.values()) and set(binary.spill_bytes.values()) <= {0}


def test_the_exported_script_prints_both_kernels_and_the_async_copies(tmp_path):
    spec = Spec("conv2d_async", SMALL, Conv2dAsyncKnobs(block_f=16, split_k=4, block_k=4, stages=2))
    path = tmp_path / "conv2d_async.py"
    path.write_text(snippet(spec))
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "void __launch_bounds__(28) main_kernel(" in run.stdout  # 16 / 4 channels × 7 rows
    assert "void __launch_bounds__(128) main_kernel_1(" in run.stdout
    assert "cp.async.wait_group 1;" in run.stdout


def test_the_lesson_ends_on_the_template_defaults():
    assert get_preset("conv2d-modern-transposed").spec == Spec("conv2d_async", RESNET, Conv2dAsyncKnobs())


# -- on a GPU -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    Spec("conv2d_async", RESNET, Conv2dAsyncKnobs()),
    Spec("conv2d_async", RESNET, Conv2dAsyncKnobs(transpose_filter=False, shared_pad=4, stages=4, block_k=4)),
    Spec("conv2d_async", RESNET, Conv2dAsyncKnobs(split_k=1, block_f=32, thread_f=2, read_vector=2, stages=2,
                                                  async_copy=False)),
    Spec("conv2d_async", SMALL, Conv2dAsyncKnobs(block_f=16, thread_f=4, thread_y=7, thread_x=1, split_k=4,
                                                 block_k=4, stages=2)),
    get_preset("conv2d-modern-one-kernel").spec,
    get_preset("conv2d-modern-async").spec,
], ids=["defaults", "untransposed-4-stages", "one-kernel-sync", "small-columns", "preset-one-kernel",
        "preset-async"])
def test_the_kernel_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    check = compare(got, expected, spec.workload.reduction_length())  # the measurement's own gate
    assert check.correct, check.describe()


# -- in the app ------------------------------------------------------------------------
# Every analysis tab of this template's two kernels (split-k) renders: tests/test_app.py's
# test_analysis_tabs_render opens each of them on conv2d-modern-transposed (COMPILED_ELSEWHERE).


def test_the_lesson_opens_on_a_step_link():
    from test_app import app, assert_clean

    at = app({"lesson": "conv2d_modern", "step": "2"})
    at.switch_page("views/lessons.py").run()
    assert_clean(at)
    assert at.selectbox(key="lesson").value == "conv2d_modern"
    assert at.header[0].value == "Step 2 of 4: " + get_preset("conv2d-modern-split-k").title


@pytest.mark.gpu
def test_split_k_is_measured_from_a_cuda_graph_too():
    """The partial sums live in a workspace TVM allocates per call: replayed from a captured CUDA
    graph, both kernels must still run and give the right output (the graph check compares it)."""
    pytest.importorskip("torch")
    from explorer.measure import MeasureSettings, measure, shutdown

    try:
        m = measure(get_preset("conv2d-modern-transposed").spec, settings=MeasureSettings(repeats=3))
    finally:
        shutdown()
    assert m.correct, m.check.describe()
    assert m.graph is not None and m.graph_us > 0

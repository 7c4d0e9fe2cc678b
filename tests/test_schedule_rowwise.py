"""The row-wise workloads (softmax, LayerNorm, RMSNorm) and their one schedule: references
against hand-computed rows, the definitions run on the CPU, what each knob does to the CUDA,
and the knob values refused. The lesson's structural claims are checked by
tests/test_preset_claims.py, the golden TensorIR by tests/test_golden.py."""
import math

import numpy as np
import pytest
from refusals import refusal
from test_workloads import run_on_cpu  # the unscheduled PrimFunc on llvm

from explorer.build import Spec, build
from explorer.cuda_compile import compile_cubin
from explorer.cuda_env import nvrtc_version
from explorer.measure.gate import compare
from explorer.schedules.rowwise import RowWiseKnobs
from explorer.workloads import LayerNorm, RMSNorm, Softmax


def test_softmax_reference_by_hand():
    # exp(0) : exp(ln 3) = 1 : 3
    np.testing.assert_allclose(Softmax(rows=1, cols=2).reference(np.array([[0.0, math.log(3)]], "float32")),
                               [[0.25, 0.75]], rtol=1e-7)
    # Shifting a row changes nothing (the max is subtracted first: no overflow at 1000).
    np.testing.assert_allclose(Softmax(rows=1, cols=3).reference(np.array([[1000.0, 1000.0, 1000.0]], "float32")),
                               [[1 / 3] * 3], rtol=1e-7)


def test_rms_norm_reference_by_hand():
    # mean(3², 4²) = 12.5
    out = RMSNorm(rows=1, cols=2, dtype="float32").reference(np.array([[3.0, 4.0]], "float32"), np.ones(2, "float32"))
    np.testing.assert_allclose(out, [[3 / math.sqrt(12.5 + 1e-5), 4 / math.sqrt(12.5 + 1e-5)]], rtol=1e-7)


def test_layer_norm_reference_by_hand():
    # [1, 3]: mean 2, variance 1, so (x - 2) / sqrt(1 + ε) = ∓1/sqrt(1 + ε); then × γ + β
    out = LayerNorm(rows=1, cols=2, dtype="float32").reference(
        np.array([[1.0, 3.0]], "float32"), np.array([2.0, 2.0], "float32"), np.array([0.5, 0.0], "float32"))
    d = 1 / math.sqrt(1 + 1e-5)
    np.testing.assert_allclose(out, [[-2 * d + 0.5, 2 * d]], rtol=1e-7)


SMALL = [Softmax(rows=3, cols=40), Softmax(rows=2, cols=16, dtype="float16"), LayerNorm(rows=3, cols=40),
         LayerNorm(rows=2, cols=16, dtype="float32"), RMSNorm(rows=3, cols=40),
         RMSNorm(rows=2, cols=8, dtype="float32")]


@pytest.mark.parametrize("workload", SMALL, ids=lambda w: w.label())
def test_definition_runs_on_the_cpu_like_the_reference(workload):
    """The unscheduled PrimFunc, compiled for the CPU, agrees with the NumPy reference within
    the GPU's correctness gate."""
    got, expected = run_on_cpu(workload)
    check = compare(got, expected, workload.reduction_length(), workload.tolerance_floor)
    assert check.correct, check.describe()


def test_the_gate_refuses_a_softmax_of_zeros():
    """Probabilities of a 4096-long row are ~1/4096, below an error floor of 1: softmax's
    tolerance scales with its outputs instead."""
    workload = Softmax(rows=4, cols=4096)
    reference = workload.reference(*workload.random_inputs(seed=0))
    assert not compare(np.zeros_like(reference), reference, workload.reduction_length(),
                       workload.tolerance_floor).correct
    assert compare(np.zeros_like(reference), reference, workload.reduction_length()).correct  # the floor of 1 would


def test_flops_bytes_and_reduction_length():
    softmax = Softmax(rows=2, cols=8)
    assert softmax.flops == 7 * 16 and softmax.compulsory_bytes == 2 * 16 * 4
    norm = LayerNorm(rows=2, cols=8)  # float16: X and Y 16 halves each, γ and β 8 each
    assert norm.flops == 8 * 16 and norm.compulsory_bytes == (16 + 8 + 8 + 16) * 2
    assert RMSNorm(rows=2, cols=8).compulsory_bytes == (16 + 8 + 16) * 2
    assert softmax.reduction_length() == 8 and norm.reduction_length() == 8 + 2**13  # one fp16 rounding


def test_an_llm_vocabulary_fits():
    assert Softmax(rows=2048, cols=32000, dtype="float16").output_shape() == (2048, 32000)


def cuda(kind, workload, **knobs):
    return build(Spec(kind, workload, RowWiseKnobs(**knobs)))


@pytest.mark.parametrize("fusion,kernels", [("separate", 3), ("fused", 1), ("on_chip", 1)])
def test_fusion_sets_the_kernels_and_where_the_row_is_read(fusion, kernels):
    built = cuda("softmax", Softmax(rows=64, cols=1024), fusion=fusion)
    assert len(built.kernels) == kernels
    # on_chip reads X from global memory once (the copy); fused and separate once per pass.
    reads_of_x = built.cuda.count("X_ptr[")
    assert reads_of_x == (1 if fusion == "on_chip" else 3)
    assert ("X_shared_dyn" in built.cuda) == (fusion == "on_chip")
    assert "__shfl_down_sync" in built.cuda  # the cross-thread reductions


def test_vector_makes_wide_loads_and_stores():
    built = cuda("layer_norm", LayerNorm(rows=64, cols=1024), fusion="on_chip", vector=8)
    assert "uint4" in built.cuda  # 8 halves = 16 bytes
    plain = cuda("softmax", Softmax(rows=64, cols=1024), fusion="fused", vector=4)
    assert "*(float4*)(Y_ptr" in plain.cuda


@pytest.mark.skipif(nvrtc_version() is None, reason="compiling the CUDA needs NVRTC")
@pytest.mark.parametrize("kind,workload", [("softmax", Softmax(rows=64, cols=2048, dtype="float16")),
                                           ("layer_norm", LayerNorm(rows=64, cols=1024)),
                                           ("rms_norm", RMSNorm(rows=64, cols=1024))])
@pytest.mark.parametrize("fusion", ["fused", "on_chip"])
def test_16_byte_half_vectors_compile(kind, workload, fusion):
    """vector = 8 on float16: 16-byte copies, and an output pass of at most 4 float32 lanes (TVM's
    CUDA for an 8-lane float32 broadcast, make_ulonglong4 of 8 floats, does not compile). Compiled as the
    app compiles it (NVRTC, ptxas included: a cubin), not by nvcc: only whether it compiles is asked."""
    built = cuda(kind, workload, fusion=fusion, vector=8)
    assert "make_ulonglong4" not in built.cuda
    assert compile_cubin(built.cuda, "sm_90")  # raises ExplorerError with NVRTC's first error


def test_rows_per_block_and_threads_shape_the_block():
    (kernel,) = cuda("rms_norm", RMSNorm(rows=64, cols=1024), threads=128, rows_per_block=4).kernels
    assert (kernel.blocks, kernel.threads_per_block) == (16, 512)


@pytest.mark.parametrize("kind,workload,knobs,named", [
    ("softmax", Softmax(), dict(threads=512, rows_per_block=4), ("threads", "rows_per_block")),
    ("softmax", Softmax(), dict(vector=8), ("vector",)),
    ("softmax", Softmax(cols=4098), dict(vector=4), ("vector",)),
    ("softmax", Softmax(rows=64, cols=65536), dict(fusion="on_chip"), ("fusion", "rows_per_block")),
    ("rms_norm", RMSNorm(rows=5, cols=768), dict(threads=64, rows_per_block=8, fusion="separate"),
     ("fusion", "rows_per_block")),
])
def test_bad_knobs_are_refused_in_one_sentence(kind, workload, knobs, named):
    assert refusal(kind, workload, RowWiseKnobs(**knobs)).knobs == named

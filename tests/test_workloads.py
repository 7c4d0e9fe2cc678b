"""Each workload's te.compute definition agrees with its NumPy reference.

The unscheduled TensorIR runs sequentially on the CPU (llvm), so this checks both the
definition the schedules start from and the reference measurements are checked against.
"""
import numpy as np
import pytest
import tvm

from explorer.errors import InvalidWorkload
from explorer.measure.gate import compare
from explorer.schedules import workload_from_mapping
from explorer.workloads import Conv1d, Conv2d, DepthwiseConv2d, Matmul, numpy_dtype

SMALL = [
    DepthwiseConv2d(channels=3, height=7, width=6),
    DepthwiseConv2d(channels=2, height=9, width=9, kernel=5, stride=2, multiplier=2, padding="VALID"),
    DepthwiseConv2d(batch=2, channels=3, height=8, width=7, stride=2, epilogue=True),
    Conv1d(input_length=37, filter_length=5),
    Conv2d(in_channels=3, out_channels=4, height=6, width=5, kernel_h=3, kernel_w=2, stride=2, padding=1),
    Matmul(m=5, n=7, k=9),
]


def run_on_cpu(workload, variant="default"):
    func = workload.prim_func(variant)
    rt = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    inputs = workload.random_inputs(seed=1)
    out = np.zeros(workload.output_shape(), numpy_dtype(workload.output_dtype()))
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.tensor(out)]
    rt["main"](*args)
    return args[-1].numpy(), workload.reference(*inputs)


@pytest.mark.parametrize("workload", SMALL, ids=lambda w: w.label())
def test_definition_matches_numpy_reference(workload):
    got, expected = run_on_cpu(workload)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_conv1d_naive_formulation_computes_the_same_convolution():
    got, expected = run_on_cpu(Conv1d(input_length=20, filter_length=4), "full_reduction")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_same_padding_keeps_the_spatial_size_and_stride_halves_it():
    assert DepthwiseConv2d(height=21, width=21).output_shape() == (1, 256, 21, 21)
    assert DepthwiseConv2d(height=21, width=21, stride=2).output_shape() == (1, 256, 11, 11)
    assert DepthwiseConv2d(height=21, width=21, padding="VALID", kernel=5).output_shape() == (1, 256, 17, 17)
    assert DepthwiseConv2d(multiplier=2).output_shape()[1] == 512


def test_flops_and_compulsory_bytes():
    w = DepthwiseConv2d(channels=256, height=96, width=96)
    assert w.flops == 2 * 256 * 96 * 96 * 9
    # input + output 256*96*96 floats each, filter 256*9: the notes' "9.4 MB" per tensor.
    assert w.compulsory_bytes == 4 * (2 * 256 * 96 * 96 + 256 * 9)
    assert Matmul(m=2, n=3, k=4).flops == 48
    assert Conv1d(input_length=16384, filter_length=32).output_shape() == (16415,)
    assert Conv2d().flops == 2 * 512 * 49 * 512 * 9


def test_half_precision_inputs_are_typed_and_counted_at_their_size():
    w = Matmul(m=2, n=3, k=4, dtype="bfloat16")
    assert w.input_dtypes() == ("bfloat16", "bfloat16")
    assert [x.dtype.name for x in w.random_inputs()] == ["bfloat16", "bfloat16"]
    # A 2x4 and B 4x3 at 2 bytes, C 2x3 float32 at 4.
    assert w.compulsory_bytes == 2 * (8 + 12) + 4 * 6
    assert Matmul(m=2, n=3, k=4).compulsory_bytes == 4 * (8 + 12 + 6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_c_in_the_inputs_type_is_the_float32_sum_rounded_once(dtype):
    workload = Matmul(m=5, n=7, k=64, dtype=dtype, out_dtype=dtype)
    assert f'C: T.Buffer((5, 7), "{dtype}")' in workload.prim_func().script()
    got, expected = run_on_cpu(workload)
    assert got.dtype == numpy_dtype(dtype) and expected.dtype == np.float32  # the reference keeps float32
    # The gate's tolerance (from the workload's reduction length) allows the rounding ...
    assert compare(got, expected, workload.reduction_length()).correct
    # ... and still catches an element that is off by one product of two inputs.
    wrong = got.astype(np.float32)
    wrong[2, 3] += 0.5
    assert not compare(wrong, expected, workload.reduction_length()).correct


def test_c_is_float32_or_the_inputs_type():
    w = Matmul(m=2, n=3, k=4, dtype="bfloat16", out_dtype="bfloat16")
    assert w.output_dtype() == "bfloat16" and w.compulsory_bytes == 2 * (8 + 12 + 6)
    assert w.label() == "matmul 2x3x4 bfloat16, C bfloat16"
    assert Matmul(m=2, n=3, k=4, dtype="bfloat16").output_dtype() == "float32"
    with pytest.raises(InvalidWorkload, match="float32 or in the inputs' type"):
        Matmul(dtype="bfloat16", out_dtype="float16")


def test_an_unknown_workload_is_named_with_the_choices():
    with pytest.raises(InvalidWorkload, match="Unknown workload 'pooling'; choose one of: .*matmul"):
        workload_from_mapping("pooling", {})
    assert workload_from_mapping("matmul", {"m": 8}) == Matmul(m=8)

"""The sum workload and its two templates: the written tree (reduce_tree) and the scheduled one
(reduce_rfactor)."""
import re

import numpy as np
import pytest
import tvm
from exported import load

from explorer.build import Spec, build
from explorer.errors import InvalidKnobs
from explorer.export import snippet
from explorer.measure.gate import compare
from explorer.schedules.reduce_rfactor import ReduceRfactorKnobs
from explorer.schedules.reduce_tree import ReduceTreeKnobs, tree_steps
from explorer.workloads import DTYPE, Sum, Workload

SMALL = Sum(n=1 << 16)


def tree(**knobs) -> Spec:
    base = dict(addressing="sequential", threads=128, elements_per_thread=2, last_warp="tree", unroll=False)
    return Spec("reduce_tree", SMALL, ReduceTreeKnobs(**{**base, **knobs}))


def first_kernel(spec: Spec) -> str:
    """The body of the first kernel's definition in the CUDA source."""
    cuda = build(spec, "h100").cuda
    start = cuda.index("{", re.search(r"main_kernel\([^;{]*\{", cuda).start())
    return cuda[start:cuda.index('extern "C"', start)]


def test_reference_sums_in_float64():
    assert Sum(n=4).reference(np.array([1, 2, 3, 4], DTYPE)).tolist() == [10.0]
    # float32 stops counting at 2^24 (2^24 + 1 rounds back to 2^24); the reference does not. Ones
    # alone (2^25 of them) would not show it: NumPy sums them pairwise, exactly even in float32.
    past = np.array([2**24, 1, 1, 1, 1], DTYPE)
    assert past.sum() == 2**24 and Sum(n=5).reference(past).tolist() == [2.0**24 + 4]
    assert Sum().flops == 1 << 26 and Sum().compulsory_bytes == 4 * (1 << 26) + 4


def test_gate_accepts_a_float32_tree_sum_and_rejects_a_missing_block():
    """2^22 uniform terms (the sum that fits in L2; 2^26 draws and sums a 256 MB input for the same
    formula): a float32 tree (512 per block, then the blocks' sums) is well inside the tolerance; the
    same sum without the block whose partial is largest is off by that partial. The base class's
    tolerance (ε·n·|sum|, half the sum itself here, 32 times it at 2^26) would accept both."""
    workload = Sum(n=1 << 22)
    (a,) = workload.random_inputs()
    reference = workload.reference(a)
    level = a.reshape(-1, 512)
    while level.shape[1] > 1:
        half = level.shape[1] // 2
        level = level[:, :half] + level[:, half:]
    partials = level[:, 0]
    total = partials
    while total.size > 1:
        total = total[: total.size // 2] + total[total.size // 2 :]
    assert compare(total, reference, workload.reduction_length()).correct
    missing = np.abs(partials).argmax()
    wrong = np.array([total[0] - partials[missing]], DTYPE)
    assert not compare(wrong, reference, workload.reduction_length()).correct
    assert compare(wrong, reference, Workload.reduction_length(workload)).correct  # the loose bound


def test_each_addressing_writes_its_own_tree():
    divergent, strided, sequential = (first_kernel(tree(addressing=a)) for a in
                                      ("interleaved_divergent", "interleaved_strided", "sequential"))
    assert "% (2 << i)) == 0" in divergent
    assert "(1 << i) * ((int)threadIdx.x) * 2" in strided.replace("((1 << i) * ((int)threadIdx.x)) * 2",
                                                                  "(1 << i) * ((int)threadIdx.x) * 2")
    assert "< (128 >> (i + 1))" in sequential
    assert len({divergent, strided, sequential}) == 3


def test_each_last_warp_and_the_unrolled_tree():
    plain, unrolled, shuffle = (first_kernel(tree(threads=256, last_warp=w)) for w in ("tree", "unrolled", "shuffle"))
    assert plain.count("__syncthreads()") == 2 and "__syncwarp" not in plain and "__shfl" not in plain
    assert unrolled.count("__syncwarp()") == 12 and "__shfl" not in unrolled  # 6 steps, read | write
    assert shuffle.count("__shfl_down_sync") == 5 and "__syncwarp" not in shuffle
    assert tree_steps(256, "sequential", "shuffle") == (128, 64)
    looped = first_kernel(tree(threads=256, last_warp="shuffle"))
    written_out = first_kernel(tree(threads=256, last_warp="shuffle", unroll=True))
    assert "for (int i" in looped and "for (int i" not in written_out and "+ 128)]" in written_out


def test_elements_per_thread_one_two_and_a_grid_stride_loop():
    one, two, many = (first_kernel(tree(elements_per_thread=e)) for e in (1, 2, 8))
    assert "A_ptr[" in one and "for (int j" not in one
    assert one.count("A_ptr[") == 1 and two.count("A_ptr[") == 2 and "for (int j" not in two
    assert "for (int j = 0; j < 4; ++j)" in many and "j * 16384" in many  # 4 pairs, 64 blocks × 256 apart
    assert build(tree(elements_per_thread=8), "h100").kernels[0].grid == (64, 1, 1)


@pytest.mark.parametrize("knobs, names", [
    ({"addressing": "interleaved_strided", "last_warp": "shuffle"}, ("last_warp", "addressing")),
    ({"threads": 1024, "elements_per_thread": 128}, ("threads", "elements_per_thread")),
])
def test_tree_refuses_what_it_cannot_write(knobs, names):
    with pytest.raises(InvalidKnobs) as error:
        build(tree(**knobs), "h100")
    assert error.value.knobs == names and str(error.value).count(". ") == 0


def test_a_long_serial_run_is_refused():
    with pytest.raises(InvalidKnobs, match="more than 1024 in a row"):
        build(Spec("reduce_tree", Sum(), ReduceTreeKnobs(threads=64, elements_per_thread=1)), "h100")


def test_rfactor_lowers_the_thread_reduction_to_shuffles_and_loads_float4():
    built = build(Spec("reduce_rfactor", SMALL, ReduceRfactorKnobs(threads=128, elements_per_thread=16)), "h100")
    assert [k.grid for k in built.kernels] == [(32, 1, 1), (1, 1, 1)]
    assert "*(float4*)(A_local_ptr + 0) = *(float4*)(A_ptr" in built.cuda
    # Within each warp 5 steps (32 lanes), then the 4 warps' sums: 2 steps.
    assert first_kernel(built.spec).count("__shfl_down_sync") == 5 + 2
    scalar = build(Spec("reduce_rfactor", SMALL, ReduceRfactorKnobs(threads=128, elements_per_thread=16,
                                                                     vector=1)), "h100")
    assert "float4" not in scalar.cuda


def test_rfactor_refuses_a_vector_that_does_not_divide_the_run():
    with pytest.raises(InvalidKnobs) as error:
        build(Spec("reduce_rfactor", SMALL, ReduceRfactorKnobs(elements_per_thread=2, vector=4)), "h100")
    assert error.value.knobs == ("vector", "elements_per_thread")


@pytest.mark.parametrize("spec", [tree(last_warp="unrolled"), Spec("reduce_rfactor", SMALL, ReduceRfactorKnobs())],
                         ids=["reduce_tree", "reduce_rfactor"])
def test_export_parses_back_to_the_same_module(spec, tmp_path):
    path = tmp_path / "sum.py"
    path.write_text(snippet(spec))
    text = path.read_text()
    assert re.search(r"\bKernel\b|def schedule", text)
    module = load(path, "sum_snippet")
    if hasattr(module, "Kernel"):
        tvm.ir.assert_structural_equal(module.Kernel, build(spec).schedule_mod)
    else:
        tvm.ir.assert_structural_equal(module.schedule(module.Workload).mod, build(spec).schedule_mod)


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [
    {"addressing": "interleaved_divergent", "elements_per_thread": 1},
    {"addressing": "interleaved_strided", "elements_per_thread": 1, "unroll": True},
    {"threads": 64, "elements_per_thread": 2},
    {"threads": 256, "elements_per_thread": 8, "last_warp": "unrolled"},
    {"threads": 1024, "elements_per_thread": 4, "last_warp": "unrolled", "unroll": True},
    {"threads": 512, "elements_per_thread": 16, "last_warp": "shuffle", "unroll": True},
], ids=["divergent", "strided-unrolled", "64-threads", "unrolled-warp", "1024-unrolled", "shuffle"])
def test_the_tree_matches_numpy_on_the_gpu(knobs, run_on_gpu):
    spec = tree(**knobs)
    got, expected = run_on_gpu(build(spec))
    assert compare(got, expected, spec.workload.reduction_length()).correct


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{}, {"vector": 1, "elements_per_thread": 1, "threads": 32}, {"vector": 2}])
def test_rfactor_matches_numpy_on_the_gpu(knobs, run_on_gpu):
    spec = Spec("reduce_rfactor", SMALL, ReduceRfactorKnobs(**knobs))
    got, expected = run_on_gpu(build(spec))
    assert compare(got, expected, spec.workload.reduction_length()).correct

"""Golden structure of d2l's depthwise schedules (bind-only default and tiled), read from
the scheduled TensorIR and the lowered device TIR."""
import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.s_tir import SBlockRealize
from tvm.tirx.analysis import undefined_vars

from explorer.build import Spec, build
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.depthwise_d2l import TEMPLATE, DepthwiseD2lKnobs
from explorer.tir_walk import allocations, thread_tag, walk
from explorer.workloads import DepthwiseConv2d

D2L = DepthwiseConv2d(channels=32, height=64, width=64, kernel=3)  # the presets' shape
SMALL = DepthwiseConv2d(channels=8, height=32, width=64, kernel=3)
FLOAT = 4


def built(workload=SMALL, **knobs):
    return build(Spec("depthwise_d2l", workload, DepthwiseD2lKnobs(**knobs)))


def kernel_func(b):
    (func,) = b.device_mod.functions.values()
    return func


def allocs(b):
    return {a.name: a for a in allocations(kernel_func(b))}


def stores(b, buffer):
    return [s for s, _ in walk(kernel_func(b).body) if isinstance(s, tirx.BufferStore) and s.buffer.name == buffer]


def evaluate(expr, **values) -> int:
    """``expr`` with the named variables set (the others 0), as an int."""
    analyzer = tvm.sym.Analyzer()
    for var in undefined_vars(expr):
        analyzer.bind(var, tirx.const(values.get(var.name, 0), str(var.ty)))
    return int(analyzer.simplify(expr))


# -- the default schedule --------------------------------------------------------------


def test_default_binds_rows_to_blocks_columns_to_threads_and_leaves_channels_on_the_host():
    b = build(get_preset("d2l-default-c32").spec)
    (kernel,) = b.kernels
    assert kernel.grid == (64, 1, 1) and kernel.block == (64, 1, 1)
    assert kernel.shared_bytes == 0 and not allocs(b)  # no caches at all
    (conv_loops,) = [loops for s, loops in walk(b.schedule_mod["main"].body)
                     if isinstance(s, SBlockRealize) and s.block.name_hint == "DepthwiseConv2d"]
    # batch and channel stay serial loops outside the kernel, then H, W, and the 3x3 filter.
    assert [(thread_tag(loop), int(loop.extent)) for loop in conv_loops] == [
        (None, 1), (None, 32), ("blockIdx.x", 64), ("threadIdx.x", 64), (None, 3), (None, 3)]
    # So the host launches the kernel once per channel, passing the channel index.
    assert [p.name for p in kernel_func(b).params if str(p.ty) == "int32"] == ["c"]


def test_default_with_an_epilogue_binds_each_stage_as_its_own_kernel():
    b = built(DepthwiseConv2d(channels=4, height=16, width=16, epilogue=True), schedule="default")
    assert [(k.grid, k.block) for k in b.kernels] == [((16, 1, 1), (16, 1, 1))] * 3


# -- the tiled schedule ----------------------------------------------------------------


def test_tiled_preset_is_d2ls_tiling():
    b = build(get_preset("d2l-tiled-c32").spec)
    (kernel,) = b.kernels
    # tile_c = [1, 1]: 32 channel blocks; tile_h = [2, 8]: 64 / 16 = 4 row blocks of 2
    # threads; tile_w = [64, 1]: one column block of 64 threads.
    assert kernel.grid == (1, 4, 32) and kernel.block == (64, 2, 1)
    shapes = {name: (a.scope, a.elements) for name, a in allocs(b).items()}
    assert shapes == {
        "PaddedInput_shared": ("shared", 18 * 66),  # 16 rows + 2 halo, 64 columns + 2 halo
        "Filter_shared": ("shared", 9),
        "PaddedInput_shared_local": ("local", 10 * 3),  # a thread's 8 rows + 2, 1 column + 2
        "Filter_shared_local": ("local", 9),
        "DepthwiseConv2d_local": ("local", 8),  # 8 outputs per thread
    }
    assert kernel.shared_bytes == (18 * 66 + 9) * FLOAT == 4788


@pytest.mark.parametrize("tc, pc, th, ph, tw, pw", [
    (1, 1, 2, 8, 64, 1),
    (1, 1, 4, 4, 32, 1),
    (2, 1, 8, 1, 16, 2),
    (4, 2, 1, 32, 8, 4),
    (1, 1, 1, 1, 32, 1),
])
def test_thread_and_block_extents_equal_the_knobs(tc, pc, th, ph, tw, pw):
    b = built(tile_c_threads=tc, tile_c_per_thread=pc, tile_h_threads=th, tile_h_per_thread=ph,
              tile_w_threads=tw, tile_w_per_thread=pw)
    (kernel,) = b.kernels
    assert kernel.block == (tw, th, tc)
    assert kernel.grid == (-(-64 // (tw * pw)), -(-32 // (th * ph)), -(-8 // (tc * pc)))
    assert allocs(b)["DepthwiseConv2d_local"].elements == pc * ph * pw
    # Each thread's register window: its outputs plus the 3x3 filter's halo.
    assert allocs(b)["PaddedInput_shared_local"].elements == pc * (ph + 2) * (pw + 2)


@pytest.mark.parametrize("input_cache", ["shared+local", "shared", "local", "none"])
@pytest.mark.parametrize("filter_cache", ["shared+local", "none"])
def test_buffers_exist_exactly_when_the_cache_knobs_say_so(input_cache, filter_cache):
    b = built(input_cache=input_cache, filter_cache=filter_cache)
    scopes = {(name.split("_")[0], a.scope) for name, a in allocs(b).items()}
    for tensor, cache in (("PaddedInput", input_cache), ("Filter", filter_cache)):
        assert ((tensor, "shared") in scopes) == ("shared" in cache)
        assert ((tensor, "local") in scopes) == ("local" in cache)
    assert b.kernels[0].shared_bytes == FLOAT * (("shared" in input_cache) * 18 * 66 + ("shared" in filter_cache) * 9)


def test_without_a_local_accumulator_the_reduction_adds_into_global_memory():
    b = built(local_accumulator=False)
    assert "DepthwiseConv2d_local" not in allocs(b)
    assert len(stores(b, "DepthwiseConv2d")) == 2  # the zero initialisation and the accumulation


@pytest.mark.parametrize("fetch, stride", [("contiguous", 10), ("interleaved", 1)])
def test_cooperative_fetch_splits_the_shared_load_over_the_threads(fetch, stride):
    b = build(get_preset("d2l-tiled-c32").spec.with_knobs(fetch=fetch))
    (store,) = stores(b, "PaddedInput_shared")
    loops = [s for s, _ in walk(kernel_func(b).body) if isinstance(s, tirx.For)]
    # 18 x 66 = 1,188 elements over 2 x 64 threads: ceil(1188 / 128) = 10 copies per thread,
    # the first loop of the kernel.
    assert int(loops[0].extent) == 10 and loops[0].body.then_case.same_as(store)
    index = store.indices[0]
    assert {"threadIdx.x", "threadIdx.y"} <= {v.name for v in undefined_vars(index)}
    # Contiguous (d2l's split(nparts=...)): thread x copies elements 10x .. 10x+9, so
    # neighbouring threads are 10 floats apart; interleaved: they are neighbours.
    assert evaluate(index, **{"threadIdx.x": 1}) - evaluate(index) == stride


def test_an_epilogue_is_fused_into_the_tiled_kernel():
    b = built(DepthwiseConv2d(channels=8, height=32, width=64, epilogue=True))
    (kernel,) = b.kernels
    assert {s.buffer.name for s, _ in walk(kernel_func(b).body)
            if isinstance(s, tirx.BufferStore) and s.buffer.scope() == "global"} == {"Relu"}


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("knobs, at_fault", [
    (dict(tile_w_threads=128), {"tile_w_threads", "tile_w_per_thread"}),  # 64 columns: 64 threads idle
    (dict(tile_h_threads=2, tile_h_per_thread=32), {"tile_h_threads", "tile_h_per_thread"}),
    (dict(tile_c_threads=16), {"tile_c_threads", "tile_c_per_thread"}),  # 8 channels
])
def test_threads_without_outputs_name_their_tile(knobs, at_fault):
    with pytest.raises(InvalidKnobs, match="no output at all") as error:
        built(**knobs)
    assert set(error.value.knobs) == at_fault


def test_more_than_1024_threads_names_the_thread_knobs():
    with pytest.raises(InvalidKnobs, match="2048 threads") as error:
        built(D2L, tile_h_threads=32, tile_h_per_thread=2, tile_w_threads=64)
    assert set(error.value.knobs) == {"tile_c_threads", "tile_h_threads", "tile_w_threads"}


def test_too_much_shared_memory_names_the_tile_and_cache_knobs():
    # 32 channels x 66 x 66 padded floats = 557,568 bytes in one block.
    with pytest.raises(InvalidKnobs, match="shared memory") as error:
        built(D2L, tile_c_per_thread=32, tile_h_threads=2, tile_h_per_thread=32)
    assert error.value.knobs == TEMPLATE.shared_knobs


def test_an_epilogue_needs_the_local_accumulator():
    with pytest.raises(InvalidKnobs) as error:
        built(DepthwiseConv2d(channels=8, height=32, width=64, epilogue=True), local_accumulator=False)
    assert error.value.knobs == ("local_accumulator",)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    get_preset("d2l-default-c32").spec,
    get_preset("d2l-tiled-c32").spec,
    get_preset("d2l-tiled-c32").spec.with_knobs(fetch="interleaved", input_cache="shared", filter_cache="local"),
    Spec("depthwise_d2l", DepthwiseConv2d(batch=2, channels=6, height=21, width=19, multiplier=2, kernel=5, stride=2,
                                          epilogue=True),
         DepthwiseD2lKnobs(tile_c_threads=2, tile_c_per_thread=2, tile_h_threads=4, tile_h_per_thread=2,
                           tile_w_threads=4, tile_w_per_thread=2)),
], ids=["default", "tiled", "tiled-interleaved", "odd-shape-epilogue"])
def test_the_kernel_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * spec.workload.reduction_length())

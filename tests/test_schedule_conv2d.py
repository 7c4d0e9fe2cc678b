"""Golden structure of the AutoTVM tutorial's conv2d template, read from the lowered TIR.

Most tests use a small conv2d (16 → 16 channels, 8×8, 3×3, padding 1) and no unrolling,
so that each build takes a fraction of a second and the expected sizes can be worked out
by hand; the preset test builds ResNet's last layer.
"""
import re

import numpy as np
import pytest

from explorer.analysis.sass import compile_binary
from explorer.build import Spec, build
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.conv2d import Conv2dAutoTVMKnobs
from explorer.tir_walk import allocations
from explorer.workloads import Conv2d

SMALL = Conv2d(in_channels=16, out_channels=16, height=8, width=8)  # output 16 × 8 × 8
NO_UNROLL = dict(auto_unroll_max_step=0, unroll_explicit=False)
# Blocks: 2 (f) × 2 (x); threads 2 (z) × 4 (y) × 2 (x); vthreads 2 (f) × 2 (y); each
# thread computes 2 channels × 1 row × 2 columns per vthread: 16 outputs.
TILED = dict(tile_f=(2, 2, 2, 2), tile_y=(1, 2, 4, 1), tile_x=(2, 1, 2, 2),
             tile_rc=(4, 2, 2), tile_ry=(1, 3, 1), tile_rx=(1, 1, 3))


def built(workload=SMALL, **knobs):
    return build(Spec("conv2d_autotvm", workload, Conv2dAutoTVMKnobs(**{**TILED, **NO_UNROLL, **knobs})), "h100")


def allocs(b):
    (func,) = b.device_mod.functions.values()
    return {a.name: a for a in allocations(func)}


@pytest.mark.parametrize("tile_f, tile_y, tile_x", [
    ((2, 2, 2, 2), (1, 2, 4, 1), (2, 1, 2, 2)),
    ((1, 1, 16, 1), (8, 1, 1, 1), (1, 1, 8, 1)),
    ((4, 1, 4, 1), (2, 1, 4, 1), (1, 2, 2, 2)),
])
def test_block_and_thread_extents_equal_the_split_knobs(tile_f, tile_y, tile_x):
    b = built(tile_f=tile_f, tile_y=tile_y, tile_x=tile_x)
    (kernel,) = b.kernels
    assert kernel.grid == (tile_x[0], tile_y[0], tile_f[0])
    assert kernel.block == (tile_x[2], tile_y[2], tile_f[2])
    assert f"__launch_bounds__({tile_x[2] * tile_y[2] * tile_f[2]})" in b.cuda


@pytest.mark.parametrize("vf, vy, vx", [(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 2, 2), (4, 1, 2)])
def test_vthreads_multiply_each_threads_outputs(vf, vy, vx):
    # Threads fixed at 2 × 4 × 2 and one output per thread per vthread: each thread
    # accumulates vf·vy·vx outputs in registers, and the expanded vthreads show as that
    # many store statements.
    b = built(tile_f=(16 // (2 * vf), vf, 2, 1), tile_y=(2 // vy, vy, 4, 1), tile_x=(4 // vx, vx, 2, 1))
    assert b.kernels[0].block == (2, 4, 2)
    assert allocs(b)["conv_local"].shape == (vf * vy * vx,)
    assert len(re.findall(r"conv\[[^\]]*\] = conv_local", b.lowered)) == vf * vy * vx


def test_input_and_filter_go_through_shared_then_local_memory():
    scopes = {name: a.scope for name, a in allocs(built()).items()}
    assert scopes == {
        "conv_local": "local",
        "pad_temp_shared": "shared",
        "kernel_shared": "shared",
        "pad_temp_shared_local": "local",
        "kernel_shared_local": "local",
    }


def test_cache_sizes_follow_the_tiles():
    a = {name: alloc.shape for name, alloc in allocs(built()).items()}
    # Per outer reduction step the block stages tile_rc[1]·tile_rc[2] = 4 input channels
    # of its 8 output rows and 4 columns plus the 3×3 filter's halo, and the filter of
    # its 8 output channels.
    assert a["pad_temp_shared"] == (4 * (8 + 2) * (4 + 2),)
    assert a["kernel_shared"] == (8 * 4 * 3 * 3,)
    # Per middle step a thread copies tile_rc[2] = 2 channels × its 2 rows (vthreads) × one
    # filter row (tile_ry[2] = 1) × 2 columns + 2 halo, and its 4 channels' filter taps.
    assert a["pad_temp_shared_local"] == (2 * 2 * 1 * (2 + 2),)
    assert a["kernel_shared_local"] == (4 * 2 * 1 * 3,)
    assert a["conv_local"] == (4 * 2 * 2,)
    assert built().kernels[0].shared_bytes == (240 + 288) * 4


def test_the_shared_tiles_are_loaded_cooperatively_by_all_threads():
    # Consecutive threads (x fastest, then y, then z) store consecutive elements: each
    # pass of the 16 threads copies 16 elements, ceil(240 / 16) = 15 passes.
    lowered = built().lowered
    store = r"pad_temp_shared\[(\w+) \* 16 \+ threadIdx_z \* 8 \+ threadIdx_y \* 2 \+ threadIdx_x\] ="
    found = re.search(store, lowered)
    assert found
    assert f"for {found.group(1)} in range(15):" in lowered


def test_each_reduction_knob_splits_its_own_axis():
    # A 3×1 filter: tile_ry = (3, 1, 1) stages one filter row per shared-memory load.
    # (The tutorial applies tile_ry to rx, which has one element, and would fail here.)
    workload = Conv2d(in_channels=16, out_channels=16, height=8, width=8, kernel_h=3, kernel_w=1, padding=0)
    b = built(workload, tile_f=(1, 1, 4, 4), tile_y=(1, 1, 6, 1), tile_x=(1, 1, 8, 1),
              tile_rc=(4, 2, 2), tile_ry=(3, 1, 1), tile_rx=(1, 1, 1))
    a = {name: alloc.shape for name, alloc in allocs(b).items()}
    assert a["pad_temp_shared"] == (4 * 6 * 8,)  # 4 channels × 6 rows (no halo) × 8 columns
    assert a["kernel_shared"] == (16 * 4 * 1 * 1,)
    assert re.search(r"for \w+, \w+ in T.grid\(4, 3\):\n\s+T.tvm_storage_sync", b.lowered)  # rc × ry steps


@pytest.mark.parametrize("name, value, size", [
    ("tile_f", (2, 2, 2, 4), "out_channels = 16"),
    ("tile_y", (1, 2, 4, 2), "out_height = 8"),
    ("tile_x", (2, 1, 2, 1), "out_width = 8"),
    ("tile_rc", (4, 2, 1), "in_channels = 16"),
    ("tile_ry", (1, 1, 1), "kernel_h = 3"),
    ("tile_rx", (3, 1, 3), "kernel_w = 3"),
])
def test_a_split_whose_product_is_wrong_names_that_knob(name, value, size):
    with pytest.raises(InvalidKnobs, match=f"{name} = .* {size} exactly") as error:
        built(**{name: value})
    assert error.value.knobs == (name,)


def test_too_many_threads_along_z_names_tile_f():
    with pytest.raises(InvalidKnobs, match="threadIdx.z has extent 128") as error:
        built(Conv2d(), tile_f=(4, 1, 128, 1), tile_y=(7, 1, 1, 1), tile_x=(7, 1, 1, 1),
              tile_rc=(512, 1, 1), tile_ry=(3, 1, 1), tile_rx=(3, 1, 1))
    assert error.value.knobs == ("tile_f",)


def test_unroll_knobs_become_pragmas_or_unrolled_code():
    rolled = built(auto_unroll_max_step=0, unroll_explicit=False).cuda
    pragma = built(auto_unroll_max_step=512, unroll_explicit=False).cuda
    explicit = built(auto_unroll_max_step=512, unroll_explicit=True).cuda
    assert "#pragma unroll" not in rolled
    assert "#pragma unroll" in pragma and pragma.count("for (") == rolled.count("for (")
    assert "#pragma unroll" not in explicit and explicit.count("for (") < rolled.count("for (")


def test_resnet_last_layer_preset_is_the_default_config():
    preset = get_preset("conv2d-autotvm-resnet-last")
    assert preset.spec.workload == Conv2d()
    assert preset.spec.knobs == Conv2dAutoTVMKnobs()
    b = build(preset.spec, "h100")
    (kernel,) = b.kernels
    # 512 channels in 64 blocks of 8; 4 × 7 × 7 threads; 2 outputs per thread (vthreads).
    assert kernel.grid == (1, 1, 64) and kernel.block == (7, 7, 4)
    assert allocs(b)["conv_local"].shape == (2,)
    # 16 input channels × 9 × 9 padded rows/columns + 8 channels × 16 × 3 × 3 filter taps.
    assert kernel.shared_bytes == (16 * 9 * 9 + 8 * 16 * 9) * 4


def test_resnet_last_layer_preset_compiles_without_register_spills():
    binary = compile_binary(build(get_preset("conv2d-autotvm-resnet-last").spec, "h100"))
    if binary is None:
        pytest.skip("nvcc is not installed")
    assert binary.spill_bytes["main_kernel"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    Spec("conv2d_autotvm", SMALL, Conv2dAutoTVMKnobs(**TILED)),
    Spec("conv2d_autotvm", Conv2d(in_channels=8, out_channels=8, height=9, width=7, kernel_h=3, kernel_w=2,
                                  stride=2, padding=1),
         Conv2dAutoTVMKnobs(tile_f=(2, 2, 2, 1), tile_y=(1, 1, 5, 1), tile_x=(1, 2, 1, 2), tile_rc=(2, 2, 2),
                            tile_ry=(3, 1, 1), tile_rx=(1, 1, 2))),
    get_preset("conv2d-autotvm-resnet-last").spec,
], ids=["small", "strided-3x2", "resnet-last"])
def test_the_kernel_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    tolerance = 1e-5 * spec.workload.reduction_length()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=tolerance)

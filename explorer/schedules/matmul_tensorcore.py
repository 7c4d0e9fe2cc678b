"""fp16/bf16 matmul on tensor cores: ldmatrix + mma.sync, fed by a cp.async pipeline.

The multiply is cut into 16 × 16 × 16 tiles, each computed by one warp with tensor-core
instructions (``mma.sync.m16n8k16``, two per tile) on operands loaded from shared memory
with ``ldmatrix`` into the per-thread fragment layout the instruction expects; C is summed
in float32 registers. A CUDA block computes ``block_m × block_n`` with ``(block_m / warp_m)
· (block_n / warp_n)`` warps, each warp ``warp_m × warp_n`` (a grid of 16 × 16 tiles). The
reduction walks K in ``block_k`` slices staged in shared memory by 16-byte ``cp.async``
copies, ``stages`` slices in flight. Rows of the shared tiles are padded by ``shared_pad``
elements so that the eight 16-byte rows an ``ldmatrix`` reads fall in different banks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..targets import WARP_SIZE
from ..workloads import Matmul
from .common import (
    Template,
    async_copy_knob,
    bind,
    check_float32_output,
    check_pipeline,
    dynamic_shared_knob,
    new_schedule,
    pipeline,
    schedule_errors,
    stages_knob,
)
from .tensor_intrinsics import MMA_SHAPE, SUPPORTED_DTYPES, import_tensor_intrinsics, mma_intrinsics

VECTOR_BYTES = 16  # cp.async's widest copy: 8 half-precision elements
TILES = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class MatmulTensorCoreKnobs(KnobSet):
    owner: ClassVar[str] = "matmul_tensorcore"

    block_m: int = knob(128, "Rows of C computed by one CUDA block.", choices=TILES)
    block_n: int = knob(128, "Columns of C computed by one CUDA block.", choices=TILES)
    block_k: int = knob(32, "Reduction step staged in shared memory (a multiple of the 16 of an mma tile).",
                        choices=(16, 32, 64))
    warp_m: int = knob(64, "Rows of C computed by one warp: warp_m / 16 tensor-core tiles.", choices=TILES)
    warp_n: int = knob(64, "Columns of C computed by one warp: warp_n / 16 tensor-core tiles.", choices=TILES)
    stages: int = stages_knob()
    async_copy: bool = async_copy_knob()
    shared_pad: int = knob(8, "Elements added to each shared row, so that ldmatrix's eight 16-byte row reads "
                           "hit different banks; 0 = none (conflicts).", choices=(0, 8, 16))
    swizzle: bool = knob(False, "Permute each shared row's 16-byte chunks by the row number (XOR swizzle, TVM's "
                         "permuted layout) instead of padding: conflict-free ldmatrix without extra memory; "
                         "needs shared_pad = 0 and block_k ≥ 32.")
    dynamic_shared: bool = dynamic_shared_knob()


def warps_per_block(k: MatmulTensorCoreKnobs) -> tuple[int, int]:
    return k.block_m // k.warp_m, k.block_n // k.warp_n


def check_knobs(workload: Matmul, k: MatmulTensorCoreKnobs) -> None:
    if workload.dtype not in SUPPORTED_DTYPES:
        raise InvalidKnobs(f"Tensor cores here take {' or '.join(SUPPORTED_DTYPES)} inputs, not "
                           f"{workload.dtype}: choose the workload's dtype accordingly (float32 matrices go "
                           f"to the matmul_async template).", ())
    tile = MMA_SHAPE[0]
    for block, warp in (("block_m", "warp_m"), ("block_n", "warp_n")):
        b, w = getattr(k, block), getattr(k, warp)
        if b % w:
            raise InvalidKnobs(f"The warp tile does not divide the block tile: {block} = {b} is not a multiple "
                               f"of {warp} = {w}.", (block, warp))
    for dim, block in (("m", "block_m"), ("n", "block_n"), ("k", "block_k")):
        size = getattr(workload, dim)
        if size % getattr(k, block):
            raise InvalidKnobs(
                f"The tensor-core intrinsic computes whole {tile} × {tile} × {tile} tiles and this template "
                f"has no partial blocks: {dim} = {size} must be a multiple of {block} = {getattr(k, block)}.",
                (block,))
    warps = warps_per_block(k)[0] * warps_per_block(k)[1]
    for name, rows, cols in (("A", k.block_m, k.block_k), ("B", k.block_k, k.block_n)):
        vectors = rows * cols * 2 // VECTOR_BYTES
        if vectors % (warps * WARP_SIZE):
            raise InvalidKnobs(
                f"{name}'s shared tile ({rows} × {cols}) is {vectors} copies of 16 bytes, not a multiple of the "
                f"{warps * WARP_SIZE} threads of a block: make the tiles larger or use fewer warps.",
                ("block_m", "block_n", "block_k", "warp_m", "warp_n"))
    if k.swizzle and (k.shared_pad or k.block_k < 32):
        raise InvalidKnobs("swizzle permutes 16-byte chunks within rows of at least 32 elements, unpadded: it needs "
                           "shared_pad = 0 and block_k ≥ 32.", ("swizzle", "shared_pad", "block_k"))
    check_pipeline(k)


def schedule(workload: Matmul, k: MatmulTensorCoreKnobs):
    check_float32_output(workload, "matmul_tensorcore")
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Matmul, k: MatmulTensorCoreKnobs):
    scope = "shared.dyn" if k.dynamic_shared else "shared"
    intrin = mma_intrinsics(workload.dtype, scope)
    tile = MMA_SHAPE[0]
    sch = new_schedule(workload)
    c = sch.get_sblock("C")
    i, j, r = sch.get_loops(c)
    i, i_tc = sch.split(i, factors=[None, tile])
    j, j_tc = sch.split(j, factors=[None, tile])
    r, r_tc = sch.split(r, factors=[None, tile])
    sch.reorder(i, j, r, i_tc, j_tc, r_tc)
    outer = sch.blockize(i_tc)  # one 16 × 16 × 16 mma tile per iteration of (i, j, r)

    warps_y, warps_x = warps_per_block(k)
    by, wy, wi = sch.split(i, factors=[None, warps_y, k.warp_m // tile])
    bx, wx, wj = sch.split(j, factors=[None, warps_x, k.warp_n // tile])
    ko, ki = sch.split(r, factors=[None, k.block_k // tile])
    sch.reorder(by, bx, wy, wx, ko, ki, wi, wj)
    warp = sch.fuse(wy, wx)
    bind(sch, by, "blockIdx.y")
    bind(sch, bx, "blockIdx.x")
    bind(sch, warp, "threadIdx.y")

    vector = VECTOR_BYTES // 2
    for operand in (0, 1):
        stage = sch.cache_read(outer, operand, scope)
        sch.compute_at(stage, ko)
        fused = sch.fuse(*sch.get_loops(stage)[-2:])
        _, ty, tx, vec = sch.split(fused, factors=[None, warps_y * warps_x, WARP_SIZE, vector])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
        if k.shared_pad:
            row = k.block_k if operand == 0 else k.block_n
            sch.storage_align(stage, 0, axis=-2, factor=row + k.shared_pad, offset=0)
        if k.swizzle:  # InjectPermutedLayout rewrites the copy's stores and ldmatrix's reads alike
            sch.annotate(stage, "permuted_layout", f"g2s_{'AB'[operand]}")

    a_warp = sch.cache_read(outer, 0, "warp")
    b_warp = sch.cache_read(outer, 1, "warp")
    sch.compute_at(a_warp, ki)
    sch.compute_at(b_warp, ki)
    c_warp = sch.cache_write(outer, 0, "warp")
    sch.reverse_compute_at(c_warp, warp)
    ii, jj = sch.get_loops(c_warp)[-2:]
    io, ii = sch.split(ii, factors=[None, tile])
    jo, jj = sch.split(jj, factors=[None, tile])
    sch.reorder(io, jo, ii, jj)

    sch.decompose_reduction(outer, ko)
    init = sch.get_sblock("C_init")
    fragments = []
    for stage in (a_warp, b_warp):
        x, y = sch.get_loops(stage)[-2:]
        xo, xi = sch.split(x, factors=[None, tile])
        yo, yi = sch.split(y, factors=[None, tile])
        sch.reorder(xo, yo, xi, yi)
        fragments.append(xi)
    sch.transform_layout(a_warp, ("write", 0), intrin.index_map)
    sch.transform_layout(b_warp, ("write", 0), intrin.index_map)
    sch.transform_layout(c_warp, ("read", 0), intrin.index_map)
    for operand, (loop, load) in enumerate(zip(fragments, (intrin.load_a, intrin.load_b), strict=True)):
        fragment = sch.blockize(loop)
        if k.swizzle:
            sch.annotate(fragment, "permuted_layout", f"s2l_{'AB'[operand]}")
        sch.tensorize(fragment, load)
    sch.tensorize(sch.get_loops(c)[-3], intrin.compute)
    sch.tensorize(sch.get_loops(init)[-2], intrin.fill)
    sch.tensorize(sch.get_loops(c_warp)[-2], intrin.store)
    pipeline(sch, ko, k.stages, k.async_copy)  # ko's body: [copy A, copy B, the warp's loop over ki]
    return sch


TEMPLATE = Template(
    name="matmul_tensorcore",
    title="Matmul — tensor cores (ldmatrix + mma.sync) with a cp.async pipeline (fp16/bf16)",
    summary="Block and warp tiles of 16 × 16 × 16 mma tiles; shared tiles filled by 16-byte cp.async copies "
            "stages − 1 steps ahead, padded rows for conflict-free ldmatrix, float32 accumulators.",
    workload=Matmul,
    knobs=MatmulTensorCoreKnobs,
    apply=schedule,
    tag_knobs={
        "blockIdx.y": ("block_m",),
        "blockIdx.x": ("block_n",),
        "threadIdx.y": ("block_m", "block_n", "warp_m", "warp_n"),
    },
    shared_knobs=("block_m", "block_n", "block_k", "stages", "shared_pad", "dynamic_shared"),
    workload_defaults={"dtype": "float16"},
    codegen_needs=import_tensor_intrinsics,
    tensor_cores=True,
)

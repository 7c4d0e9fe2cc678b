"""What the Hopper kernels written in TIRx (matmul_hopper, attention_hopper) share: the sizes of
wgmma and of a warpgroup, the TMA copy and its tensor map, the 128-byte swizzle, the register
split of warp specialization, and where a 16-element step of a swizzled tile starts.

A tile that wgmma reads from shared memory is copied by TMA in columns one swizzled row wide
(``atom`` elements: 64 halves for the 128-byte swizzle), each column a block of ``rows`` rows
of ``row_bytes`` bytes: the tile is laid out ``[columns][rows][atom]``. The swizzle XORs the
16-byte chunk index of a row with its row index modulo 8, on the address bits, so every column
starts on a 1024-byte boundary (8 rows) and a wgmma descriptor may start anywhere in it.
"""
from __future__ import annotations

SUPPORTED_DTYPES = {"float16": "f16", "bfloat16": "bf16"}
ELEMENT_BYTES = 2
WARPGROUP = 128  # threads that issue one wgmma together: 4 warps
WGMMA_M, WGMMA_K = 64, 16  # rows and reduction of one wgmma instruction (16-bit inputs)
# Swizzle knob value -> (CUtensorMapSwizzle / wgmma descriptor code, bytes of a swizzled row).
SWIZZLES = {"128B": (3, 128), "64B": (2, 64), "32B": (1, 32)}
PRODUCER_REGISTERS = 40  # setmaxnreg: what the copying warpgroup keeps
# ... and what the multiplying ones get: at least what the compiler gave every thread (up to 255 for
# 256 threads, 168 for 384), and all together within the SM's 64 K registers.
CONSUMER_REGISTERS = {1: 256, 2: 232}
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
# Rounds two float32 values to the 16-bit type and packs them into one 32-bit word; the first
# value goes to the upper half (the higher address).
PACK_TWO = {"float16": "cvt.rn.f16x2.f32", "bfloat16": "cvt.rn.bf16x2.f32"}


def tensor_map_2d(inner: int, outer: int, box_inner: int, box_outer: int, swizzle_code: int) -> list[int]:
    """cuTensorMapEncodeTiled's arguments after the base address, for a row-major ``outer × inner``
    tensor of 16-bit elements copied in ``box_outer × box_inner`` boxes: sizes (inner first), the
    row stride in bytes, the box, element strides, interleave, swizzle, L2 promotion, out-of-bounds fill."""
    return [inner, outer, inner * ELEMENT_BYTES, box_inner, box_outer, 1, 1, 0, swizzle_code, 0, 0]


def k_major_offset(k, rows: int, first_row, row_bytes: int):
    """Descriptor offset (16-byte units) of reduction element ``k`` (a multiple of 16) of the
    64-row wgmma tile that starts at row ``first_row`` of a K-major tile laid out
    ``[k / atom][rows][atom]``: the column of k, the tile's row, then k's bytes within the row
    (the hardware swizzles the address it computes, so a start inside a row is allowed)."""
    atom = row_bytes // ELEMENT_BYTES
    return (k // atom * rows * row_bytes + first_row * row_bytes + k % atom * ELEMENT_BYTES) // 16


def mn_major_offset(k, row_bytes: int):
    """... of reduction row ``k`` of an MN-major tile laid out ``[n / atom][k rows][atom]``: k rows down."""
    return k * row_bytes // 16

"""Shared memory that a kernel's threads do not load or store themselves: the tiles the TMA unit
writes (``cp.async.bulk.tensor``) and wgmma reads through matrix descriptors, and the mbarriers
that guard them (the Hopper kernels written in TIRx: matmul_hopper, attention_hopper).

The bank model (:mod:`.banks`) counts the loads and stores of the lowered TIR, one per lane; these
tiles have none. What the lowered TIR does say of each: its size, the TMA copies and the wgmma
descriptors written into the code for it (static counts, as the SASS tab counts instructions), and
the swizzle its descriptors give (the same one the copies write). The bank model puts the swizzle
to use (:func:`.banks.core_matrix_ways`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx

from ..schedules.hopper import SWIZZLES
from ..tir_walk import walk
from .texpr import BufferLoad, expr_children

TMA_COPY = "tirx.ptx.cp_async_bulk_tensor_g2s_cluster"
DESCRIPTOR = "tirx.cuda.wgmma_encode_matrix_descriptor"
MBARRIER = ("tirx.ptx.mbarrier", "tirx.cuda.mbarrier")  # name prefixes: init, arrive, expect_tx, wait
SHARED_SCOPES = ("shared", "shared.dyn")
ROW_BYTES_OF = {code: row_bytes for code, row_bytes in SWIZZLES.values()}  # a descriptor's swizzle code → row
CHUNK_BYTES = 16  # the 16-byte chunks a swizzle moves


@dataclass(frozen=True)
class SharedTile:
    """One shared buffer of a kernel that the TMA unit, wgmma or the mbarrier instructions use."""

    kernel: str
    buffer: str
    dtype: str
    bytes: int
    tma_copies: int  # TMA copy instructions into it in the code
    descriptors: int  # wgmma descriptors of it in the code
    barrier_uses: int  # mbarrier instructions on it in the code
    swizzle_bytes: int | None  # the row width of its descriptors' swizzle (None: no descriptor, or none)
    # The bank model's n-way of one core matrix read under that swizzle, and without it (banks.core_matrix_ways;
    # None: not read by wgmma).
    core_matrix_ways: int | None = None
    unswizzled_ways: int | None = None

    @property
    def role(self) -> str:
        """"tile" (what TMA writes and wgmma reads) or "mbarrier" (8 bytes each)."""
        if self.barrier_uses and not (self.tma_copies or self.descriptors):
            return "mbarrier"
        return "tile"


def swizzled(address: np.ndarray, row_bytes: int) -> np.ndarray:
    """A byte address inside a 1024-byte-aligned tile under the swizzle of rows ``row_bytes`` wide
    (CUTLASS's Swizzle<log2(row_bytes / 16), 4, 3>, what TMA writes and wgmma reads): the 16-byte
    chunk bits of the address XOR the bits of its row among 8 rows of 128 bytes."""
    mask = row_bytes // CHUNK_BYTES - 1
    return address ^ (((address >> 7) & mask) << 4)


def _addressed_buffer(e):
    """The shared buffer an address argument points into (``cvta(address_of(buf[i]))``), or None."""
    while isinstance(e, tvm.ir.Call) and str(e.op.name) in ("tirx.address_of", "tirx.cuda.cvta_generic_to_shared"):
        e = e.args[0]
    return e.source if isinstance(e, BufferLoad) and e.source.scope() in SHARED_SCOPES else None


def _calls(e):
    """Every call in an expression, outermost first."""
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, tvm.ir.Call):
            yield e
        stack.extend(expr_children(e))


def shared_tiles(device_mod: tvm.IRModule) -> dict[str, tuple[SharedTile, ...]]:
    """Per kernel of a lowered device module, its shared buffers that TMA, wgmma or mbarriers use,
    in the order the code first names them."""
    out = {}
    for gv, func in sorted(device_mod.functions.items(), key=lambda item: item[0].name_hint):
        uses: dict = {}  # buffer name -> [buffer, copies, descriptors, barrier uses, swizzle codes]
        for s, _ in walk(func.body):
            if not isinstance(s, tirx.Evaluate):
                continue
            for call in _calls(s.value):
                name = str(call.op.name)
                kind = ("copy" if name == TMA_COPY else "descriptor" if name == DESCRIPTOR
                        else "barrier" if name.startswith(MBARRIER) else None)
                if kind is None:
                    continue
                # A copy's destination is its first address and its barrier the last; a descriptor's tile its second.
                targets = [call.args[1]] if kind == "descriptor" else call.args
                for arg in targets:
                    buffer = _addressed_buffer(arg)
                    if buffer is None:
                        continue
                    entry = uses.setdefault(str(buffer.name), [buffer, 0, 0, 0, set()])
                    is_barrier = str(buffer.dtype) == "uint64"
                    if kind == "copy" and not is_barrier:
                        entry[1] += 1
                    elif kind == "descriptor":
                        entry[2] += 1
                        entry[4].add(int(call.args[4]))
                    elif is_barrier:
                        entry[3] += 1
        tiles = [_tile(gv.name_hint, *entry) for entry in uses.values()]
        out[gv.name_hint] = tuple(sorted(tiles, key=lambda t: t.role != "tile"))  # the tiles, then their barriers
    return out


def _tile(kernel: str, buffer, copies: int, descriptors: int, barrier_uses: int, codes: set) -> SharedTile:
    elements = int(np.prod([int(d) for d in buffer.shape]))
    row_bytes = max((ROW_BYTES_OF.get(code, 0) for code in codes), default=0) or None
    return SharedTile(kernel, str(buffer.name), str(buffer.dtype), elements * tvm.DataType(str(buffer.dtype)).bits // 8,
                      copies, descriptors, barrier_uses, row_bytes)

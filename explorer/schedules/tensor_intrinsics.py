"""TVM's tensor-core intrinsics (ldmatrix, mma.sync m16n8k16, fill, store) by input type.

TVM registers them for float16 inputs only (``tvm.s_tir.tensor_intrin.cuda``). The PTX
instructions are the same for bfloat16 except for the operand type (``ldmatrix`` moves
16-bit words whatever they hold; ``mma.sync`` names ``bf16`` instead of ``fp16``), so the
bfloat16 set is TVM's float16 set with the element type renamed, registered once.
"""
from __future__ import annotations

import functools
import importlib
import re
import sys
from dataclasses import dataclass

import tvm
from tvm.s_tir import TensorIntrin

from .parsing import tvmscript_frames

MMA_SHAPE = (16, 16, 16)  # one tile = two mma.sync.m16n8k16
SUPPORTED_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class MmaIntrinsics:
    """Names of registered tensor intrinsics, and the fragment layout they use."""

    load_a: str
    load_b: str
    compute: str
    fill: str
    store: str

    @staticmethod
    def index_map(i, j):
        """A 16 × 16 tile's element (i, j) → (thread of the warp, register of the thread)."""
        return (i // 16, j // 16, *_tvm_intrinsics().shared_16x16_to_ldmatrix_32x8_layout(i % 16, j % 16))


def mma_intrinsics(dtype: str, shared_scope: str) -> MmaIntrinsics:
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"no tensor-core intrinsics for {dtype}")
    group = _tvm_intrinsics().get_mma_intrin_group(shared_scope, "global", "float16", "float32", False, False,
                                             not_use_mma_store_intrinic=False)
    names = MmaIntrinsics(group["load_a"], group["load_b"], group["compute"], group["init"], group["store"])
    if dtype == "float16":
        return names
    # The bfloat16 twins are parsed on first use. The stand-ins go around the call, not inside
    # _bfloat16: its source is copied into exported scripts (explorer/export.py), which lack them.
    with tvmscript_frames():
        return MmaIntrinsics(_bfloat16(names.load_a), _bfloat16(names.load_b), _bfloat16(names.compute),
                             names.fill, names.store)


@functools.cache
def _bfloat16(float16_name: str) -> str:
    """Register the bfloat16 twin of a float16 intrinsic; return its name."""
    name = f"explorer_{float16_name}_bf16"
    source = TensorIntrin.get(float16_name)
    desc, impl = (_renamed(func) for func in (source.desc, source.impl))
    TensorIntrin.register(name, desc, impl, override=True)
    return name


def _renamed(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    # Element types appear as "float16" in buffers and casts and as "fp16" in mma's operand types.
    text = func.script().replace('"float16"', '"bfloat16"').replace('"fp16"', '"bf16"')
    # The printer leaves out ldmatrix's element type; without it CUDA codegen falls back to a
    # slow element-by-element copy, so it is written back.
    text = _LDMATRIX_CALL.sub(r'\1, dtype="bfloat16")', text)
    return tvm.script.from_source(text)


_LDMATRIX_CALL = re.compile(r"(T\.ptx_legacy\.ldmatrix\(.*)\)$", re.M)


@functools.cache
def _tvm_intrinsics():
    """``tvm.s_tir.tensor_intrin.cuda``, imported on first use (:func:`import_tensor_intrinsics`):
    it parses every CUDA tensor intrinsic as TVMScript (seconds), which no other template needs."""
    import_tensor_intrinsics()
    return sys.modules["tvm.s_tir.tensor_intrin.cuda"]


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (this module's templates and MetaSchedule's TuneContext
    need it) quickly: it parses every CUDA tensor intrinsic as TVMScript, ~500 functions
    (:func:`tvmscript_frames`: 1.7 s instead of 2.7 s in a bare process on the 2-core machine)."""
    with tvmscript_frames():
        importlib.import_module("tvm.s_tir.tensor_intrin")

"""TVM's tensor-core intrinsics (ldmatrix, mma.sync m16n8k16, fill, store) by input type.

TVM registers them for float16 inputs only (``tvm.s_tir.tensor_intrin.cuda``). The PTX
instructions are the same for bfloat16 except for the operand type (``ldmatrix`` moves
16-bit words whatever they hold; ``mma.sync`` names ``bf16`` instead of ``fp16``), so the
bfloat16 set is TVM's float16 set with the element type renamed, registered once.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import tvm
from tvm.s_tir import TensorIntrin

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
    """``tvm.s_tir.tensor_intrin.cuda``, imported on first use: it parses every CUDA tensor
    intrinsic as TVMScript (seconds), which no other template needs. The import runs in a thread
    of its own: the parser reads every frame of the stack for each function it parses, and a new
    thread's stack is a few frames deep where a page's or a test's is a hundred (a quarter of the
    import's time)."""
    with ThreadPoolExecutor(1, thread_name_prefix="tensor-intrinsics") as thread:
        return thread.submit(_import_tvm_intrinsics).result()


def _import_tvm_intrinsics():
    _files_without_a_module_known(sys._getframe())
    return importlib.import_module("tvm.s_tir.tensor_intrin.cuda")


# The import machinery's own frames, on the stack during any import.
_IMPORT_FRAMES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def _files_without_a_module_known(frame) -> None:
    """TVMScript's parser calls ``inspect.stack()`` for each of the hundreds of functions that
    module parses, and ``inspect`` looks up the module of every frame on the stack by its file.
    For a frame whose file is no module's (the import machinery's, code run from a string, a
    script run by exec) the lookup finds nothing, but only after rescanning ``sys.modules``
    each time: most of the import's time (85 s of 87 s on a busy 2-core machine). Recording
    those files in ``inspect``'s file -> module cache as having no module gives the same answer
    (None) at once. The cache is keyed by absolute path, so this runs just before the import."""
    files = [os.path.normcase(os.path.abspath(name)) for name in _IMPORT_FRAMES]
    while frame is not None:
        files.append(inspect.getabsfile(frame))  # a first lookup maps every loaded module's file
        frame = frame.f_back
    for file in files:
        if inspect.getmodule(None, file) is None:
            inspect.modulesbyfile.setdefault(file, "")  # sys.modules has no "": the lookup gives None

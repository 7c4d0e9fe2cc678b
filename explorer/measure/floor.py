"""The bandwidth floor: the time a plain device copy takes to move a workload's compulsory
bytes (every input read once, the output written once). No kernel for that workload can
beat it by much, so "% of floor" = floor / latency says how close a schedule is to the
memory limit.

The copy moves exactly ``compulsory_bytes``: it reads half of them and writes the other
half. It is a TVM kernel timed the same ways as the kernel under test (``time_evaluator``
back to back, and from a CUDA graph), not a cudaMemcpy timed another way, so that launch
overheads, timer and cache state are alike on both sides of each ratio. One kernel with a
symbolic length serves every workload (compiled once per target).
"""
from __future__ import annotations

import math

import tvm
from tvm import te

from ..workloads import BYTES_PER_ELEMENT, DTYPE

THREADS = 256
ELEMENTS_PER_THREAD = 4  # unrolled: four coalesced loads in flight per thread
CPU_CHUNK = 4096


def copy_elements(compulsory_bytes: int) -> int:
    """float32 elements to copy so that reads + writes = ``compulsory_bytes``."""
    return max(1, math.ceil(compulsory_bytes / 2 / BYTES_PER_ELEMENT))


def copy_module(target: tvm.target.Target) -> tvm.IRModule:
    n = te.var("n")
    src = te.placeholder((n,), DTYPE, name="src")
    dst = te.compute((n,), lambda i: src[i], name="dst")
    sch = tvm.s_tir.Schedule(te.create_prim_func([src, dst]))
    (i,) = sch.get_loops(sch.get_sblock("dst"))
    if target.kind.name == "cuda":
        # Consecutive threads copy consecutive elements (coalesced); each thread does
        # ELEMENTS_PER_THREAD of them, THREADS apart.
        bx, unroll, tx = sch.split(i, factors=[None, ELEMENTS_PER_THREAD, THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        sch.unroll(unroll)
    else:
        chunk, _ = sch.split(i, factors=[None, CPU_CHUNK])
        sch.parallel(chunk)
    return sch.mod

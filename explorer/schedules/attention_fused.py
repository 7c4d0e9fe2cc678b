"""Attention in one kernel with the online softmax (FlashAttention's algorithm, on CUDA cores).

This template is not a schedule of the workload's TensorIR: it is a kernel written in plain TIR
(TVMScript with explicit ``blockIdx``/``threadIdx`` launches, shared buffers and barriers), as
:mod:`reduce_tree` is. TensorIR's schedule primitives move and tile the stages of a computation
but cannot rewrite its arithmetic: the workload's stages compute the row maximum over the whole
row before the first exponential, and the online softmax replaces that by a running maximum and
a rescaling of everything summed so far, a different computation. So the kernel is written out,
and the knobs change how it is written.

A block owns ``block_q`` query rows of one head. It copies them to shared memory once, then walks
the keys and values in tiles of ``block_kv`` rows. For each tile:

1. scores: S = Q·Kᵀ·scale for its ``block_q × block_kv`` tile, in registers. A thread computes
   ``rows_per_thread`` rows × ``block_kv / threads_per_row`` keys of it (a register tile: each
   element of Q and K it loads feeds several multiply-adds);
2. online softmax, per row: the tile's maximum (the ``threads_per_row`` threads of a row share a
   warp and combine theirs with ``__shfl_xor_sync``), the new running maximum m' = max(m, tile
   maximum), P = exp(S − m') into shared memory, the running sum l = exp(m − m')·l + Σ P;
3. output: O = exp(m − m')·O + P·V, each thread ``rows_per_thread`` rows × ``head_dim /
   threads_per_row`` columns, in registers.

At the end each thread writes its part of O / l: the only global store of the kernel. No score
leaves the chip. ``kv_shared`` copies each K and V tile to shared memory first (every thread of
the block then reads them there); without it each thread reads K and V from global memory itself
(the L1 and L2 caches catch the repeats). The shared tiles' rows are padded by one 4-byte word, so
that threads reading the same column of different rows hit different banks.

Causal: a block of query rows stops after the last key tile that holds a key at or before its
last row (the tiles above the diagonal are never loaded), and every score of a later key than its
query gets −∞ before the maximum (the comparison runs on every tile; only the tiles on the
diagonal have such scores). The blocks are launched heaviest first: block x takes query tile
``tiles − 1 − x``, so the long rows do not start last.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import ClassVar

import tvm
from tvm.s_tir import Schedule
from tvm.script import tirx as T

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..targets import FULL_MASK, WARP_SIZE
from ..workloads import ATTENTION_DTYPE, DTYPE, Attention, numpy_dtype
from .common import Template
from .parsing import tvmscript_frames

MAX_THREADS = 1024
# The kernel's shared buffers are static ("shared"), and a block may allocate at most 48 KB statically.
MAX_SHARED_BYTES = 48 * 1024
# Shared rows padded by one 4-byte word: an odd stride in words puts the rows in different banks.
PAD_HALVES = 2
PAD_FLOATS = 1


@dataclass(frozen=True)
class AttentionFusedKnobs(KnobSet):
    owner: ClassVar[str] = "attention_fused"

    block_q: int = knob(64, "Query rows one CUDA block owns (blockIdx.x tiles): read once into shared memory, "
                        "reused for every key tile.", choices=(16, 32, 64, 128))
    block_kv: int = knob(64, "Keys (and values) per step of the loop over the sequence: the score tile is "
                         "block_q × block_kv.", choices=(16, 32, 64, 128))
    rows_per_thread: int = knob(4, "Query rows each thread computes: each key or value element it loads feeds "
                                "this many multiply-adds.", choices=(1, 2, 4, 8))
    threads_per_row: int = knob(16, "Threads that share a query row (consecutive lanes of a warp): each takes "
                                "block_kv / threads_per_row keys and head_dim / threads_per_row output columns, "
                                "and they combine their row maxima and sums with warp shuffles.",
                                choices=(1, 2, 4, 8, 16, 32))
    kv_shared: bool = knob(True, "Copy each K and V tile to shared memory once per block (cooperatively, "
                           "coalesced); off: every thread reads K and V from global memory itself.")


@dataclass(frozen=True)
class Plan:
    """The sizes the kernel is written with."""

    w: Attention
    k: AttentionFusedKnobs

    @property
    def threads(self) -> int:
        return self.k.block_q // self.k.rows_per_thread * self.k.threads_per_row

    @property
    def keys_per_thread(self) -> int:
        return self.k.block_kv // self.k.threads_per_row

    @property
    def columns_per_thread(self) -> int:
        return self.w.head_dim // self.k.threads_per_row

    @property
    def shared_bytes(self) -> int:
        d, k = self.w.head_dim, self.k
        q = k.block_q * (d + PAD_HALVES) * 2
        kv = (k.block_kv * (d + PAD_HALVES) * 2 + k.block_kv * d * 2) if k.kv_shared else 0
        p = k.block_q * (k.block_kv + PAD_FLOATS) * 4
        return q + kv + p


def check_whole_tiles(workload: Attention, k) -> None:
    """The written attention kernels have no partial tiles of queries (block_q) or keys (block_kv)."""
    for name in ("block_q", "block_kv"):
        if workload.seq % getattr(k, name):
            raise InvalidKnobs(f"This kernel has no partial tiles: seq = {workload.seq} must be a multiple of "
                               f"{name} = {getattr(k, name)}.", (name,))


def key_tiles(query_tile, block_q: int, block_kv: int, seq: int, causal: bool):
    """Key tiles the block of query tile ``query_tile`` walks: all of them, or (causal) those up to the one
    that holds its last query row. ``query_tile`` is an int or the kernel's index expression: the written
    kernels of this module and :mod:`attention_mma` take their loop's extent from here."""
    return ((query_tile + 1) * block_q + block_kv - 1) // block_kv if causal else seq // block_kv


def kv_bytes_loaded(workload: Attention, block_q: int, block_kv: int) -> int:
    """Bytes of K and V that the blocks of a written attention kernel load from global memory: each block
    walks its head's key tiles (:func:`key_tiles`) once, loading a K and a V tile per step, so the keys and
    values of a head are read once per block of query rows (threads that read the same tile of one block
    again, as without ``kv_shared``, find it in the L1 cache)."""
    tiles = sum(key_tiles(t, block_q, block_kv, workload.seq, workload.causal) for t in range(workload.seq // block_q))
    element_bytes = numpy_dtype(ATTENTION_DTYPE).itemsize
    return workload.batch * workload.heads * tiles * 2 * block_kv * workload.head_dim * element_bytes


def check_knobs(workload: Attention, k: AttentionFusedKnobs) -> Plan:
    """Refuse, one sentence each, what cannot make a correct kernel; return the plan otherwise."""
    plan = Plan(workload, k)
    check_whole_tiles(workload, k)
    if k.block_q % k.rows_per_thread:
        raise InvalidKnobs(f"block_q = {k.block_q} rows cannot be shared by threads of rows_per_thread = "
                           f"{k.rows_per_thread} rows each.", ("block_q", "rows_per_thread"))
    if k.block_kv % k.threads_per_row or workload.head_dim % k.threads_per_row:
        raise InvalidKnobs(f"threads_per_row = {k.threads_per_row} threads split a row's block_kv = {k.block_kv} "
                           f"keys and its head_dim = {workload.head_dim} columns evenly, so both must be multiples "
                           f"of it.", ("threads_per_row", "block_kv"))
    if plan.threads > MAX_THREADS:
        raise InvalidKnobs(f"block_q / rows_per_thread × threads_per_row = {plan.threads} threads per block, more "
                           f"than the {MAX_THREADS} a CUDA block may have.",
                           ("block_q", "rows_per_thread", "threads_per_row"))
    if plan.shared_bytes > MAX_SHARED_BYTES:
        raise InvalidKnobs(f"The Q, K, V and P tiles take {plan.shared_bytes:,} bytes of shared memory, more than "
                           f"the {MAX_SHARED_BYTES:,} a block may allocate statically: use smaller tiles.",
                           ("block_q", "block_kv"))
    return plan


def schedule(workload: Attention, k: AttentionFusedKnobs) -> Schedule:
    """The kernel as a module (a Schedule with an empty trace: it is written, not scheduled)."""
    plan = check_knobs(workload, k)
    with tvmscript_frames():
        return Schedule(tvm.IRModule({"main": kernel(plan)}))


def kernel(p: Plan):  # noqa: PLR0915 - one kernel, read top to bottom
    w, k = p.w, p.k
    B, H, N, D = w.batch, w.heads, w.seq, w.head_dim
    BQ, BKV, TM, G = k.block_q, k.block_kv, k.rows_per_thread, k.threads_per_row
    TN, TD, THREADS = p.keys_per_thread, p.columns_per_thread, p.threads
    Q_TILES = N // BQ
    CAUSAL, STAGED = w.causal, k.kv_shared
    # Scores are kept in log2 units: exp(x · scale) = exp2(x · scale · log2 e), and exp2 is one
    # hardware instruction where expf is a sequence of them (per score, beside 2 · head_dim multiply-adds).
    SCALE = w.scale * math.log2(math.e)
    DP = D + PAD_HALVES
    Q_COPIES = -(-BQ * D // THREADS)
    KV_COPIES = -(-BKV * D // THREADS)
    SHUFFLES = G.bit_length() - 1  # log2 of the threads that share a row
    half, f32 = ATTENTION_DTYPE, DTYPE
    shape = (B, H, N, D)

    @T.inline
    def across_row(value, op):
        # Combine a value over the G lanes of a row (an xor butterfly: every lane gets the result).
        for step in T.unroll(SHUFFLES):
            value[0] = op(value[0], T.tvm_warp_shuffle_xor(T.uint32(FULL_MASK), value[0], G >> (step + 1),
                                                           WARP_SIZE, WARP_SIZE))

    @T.prim_func
    def main(Q: T.Buffer(shape, half), K: T.Buffer(shape, half), V: T.Buffer(shape, half),
             O: T.Buffer(shape, half)):
        with T.launch_thread("blockIdx.x", Q_TILES) as bx:
            by = T.launch_thread("blockIdx.y", B * H)
            tx = T.launch_thread("threadIdx.x", THREADS)
            q_s = T.alloc_buffer((BQ, DP), half, scope="shared")
            if STAGED:
                k_s = T.alloc_buffer((BKV, DP), half, scope="shared")
                v_s = T.alloc_buffer((BKV, D), half, scope="shared")
            p_s = T.alloc_buffer((BQ, BKV + PAD_FLOATS), f32, scope="shared")
            s = T.alloc_buffer((TM, TN), f32, scope="local")
            acc = T.alloc_buffer((TM, TD), f32, scope="local")
            q_r = T.alloc_buffer((TM,), f32, scope="local")
            k_r = T.alloc_buffer((TN,), f32, scope="local")
            v_r = T.alloc_buffer((TD,), f32, scope="local")
            m = T.alloc_buffer((TM,), f32, scope="local")
            l_ = T.alloc_buffer((TM,), f32, scope="local")
            alpha = T.alloc_buffer((TM,), f32, scope="local")
            red = T.alloc_buffer((1,), f32, scope="local")
            b = by // H
            h = by % H
            qt = (Q_TILES - 1 - bx) if CAUSAL else bx  # causal: the longest rows first
            group = tx // G  # this thread's rows: group * TM + r
            lane = tx % G  # its keys: c * G + lane; its output columns: c * G + lane
            # The block's query rows, once.
            for i in T.serial(Q_COPIES):
                if i * THREADS + tx < BQ * D:
                    q_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = Q[b, h, qt * BQ + (i * THREADS + tx) // D,
                                                                             (i * THREADS + tx) % D]
            for r in T.unroll(TM):
                m[r] = T.min_value(f32)
                l_[r] = T.float32(0)
                for c in T.unroll(TD):
                    acc[r, c] = T.float32(0)
            T.tvm_storage_sync("shared")
            # Causal: the key tiles up to the one that holds the block's last query row.
            for kt in T.serial(key_tiles(qt, BQ, BKV, N, CAUSAL)):
                if STAGED:
                    for i in T.serial(KV_COPIES):
                        if i * THREADS + tx < BKV * D:
                            k_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = K[
                                b, h, kt * BKV + (i * THREADS + tx) // D, (i * THREADS + tx) % D]
                            v_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = V[
                                b, h, kt * BKV + (i * THREADS + tx) // D, (i * THREADS + tx) % D]
                    T.tvm_storage_sync("shared")
                # 1. scores of this thread's TM rows × TN keys
                for r in T.unroll(TM):
                    for c in T.unroll(TN):
                        s[r, c] = T.float32(0)
                for e in T.serial(D):
                    for r in T.unroll(TM):
                        q_r[r] = T.Cast(f32, q_s[group * TM + r, e])
                    for c in T.unroll(TN):
                        if STAGED:
                            k_r[c] = T.Cast(f32, k_s[c * G + lane, e])
                        else:
                            k_r[c] = T.Cast(f32, K[b, h, kt * BKV + c * G + lane, e])
                    for r in T.unroll(TM):
                        for c in T.unroll(TN):
                            s[r, c] = s[r, c] + q_r[r] * k_r[c]
                # 2. online softmax, row by row
                for r in T.unroll(TM):
                    red[0] = T.min_value(f32)
                    for c in T.unroll(TN):
                        if CAUSAL:
                            s[r, c] = T.if_then_else(kt * BKV + c * G + lane <= qt * BQ + group * TM + r,
                                                     s[r, c] * T.float32(SCALE), T.min_value(f32))
                        else:
                            s[r, c] = s[r, c] * T.float32(SCALE)
                        red[0] = T.max(red[0], s[r, c])
                    across_row(red, T.max)
                    red[0] = T.max(m[r], red[0])  # the new running maximum m'
                    alpha[r] = T.exp2(m[r] - red[0])
                    m[r] = red[0]
                    red[0] = T.float32(0)
                    for c in T.unroll(TN):
                        s[r, c] = T.exp2(s[r, c] - m[r])
                        p_s[group * TM + r, c * G + lane] = s[r, c]
                        red[0] = red[0] + s[r, c]
                    across_row(red, operator.add)
                    l_[r] = l_[r] * alpha[r] + red[0]
                T.tvm_storage_sync("shared")
                # 3. O = alpha·O + P·V for this thread's TM rows × TD columns
                for r in T.unroll(TM):
                    for c in T.unroll(TD):
                        acc[r, c] = acc[r, c] * alpha[r]
                for j in T.serial(BKV):
                    for r in T.unroll(TM):
                        q_r[r] = p_s[group * TM + r, j]
                    for c in T.unroll(TD):
                        if STAGED:
                            v_r[c] = T.Cast(f32, v_s[j, c * G + lane])
                        else:
                            v_r[c] = T.Cast(f32, V[b, h, kt * BKV + j, c * G + lane])
                    for r in T.unroll(TM):
                        for c in T.unroll(TD):
                            acc[r, c] = acc[r, c] + q_r[r] * v_r[c]
                T.tvm_storage_sync("shared")  # the next tile overwrites K, V and P
            for r in T.unroll(TM):
                for c in T.unroll(TD):
                    O[b, h, qt * BQ + group * TM + r, c * G + lane] = T.Cast(half, acc[r, c] / l_[r])

    return main


TEMPLATE = Template(
    name="attention_fused",
    title="Attention — one kernel with the online softmax (FlashAttention on CUDA cores)",
    summary="A kernel written in plain TIR: a block owns a tile of query rows, walks the keys and values in "
            "tiles, keeps the running row maximum, the running sum and the output in registers and rescales "
            "them as the maximum grows; the scores never reach global memory.",
    workload=Attention,
    knobs=AttentionFusedKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("block_q",), "threadIdx.x": ("block_q", "rows_per_thread", "threads_per_row")},
    shared_knobs=("block_q", "block_kv", "kv_shared"),
    # The kernel places its own barriers (one after each copy, one before a tile is overwritten); the TIRx
    # pipeline keeps them as written.
    pipeline="tirx",
)

"""Attention on tensor cores: the online softmax of :mod:`attention_fused` with both products on
``mma.sync`` (FlashAttention-2's layout, written for Ampere-style tensor cores).

Like :mod:`attention_fused`, this is a kernel written in plain TIR, not a schedule of the workload's
stages (the online softmax is a different computation; see that module). The knobs change how it is
written.

A block owns ``block_q`` query rows of one head and ``warps`` warps; each warp owns ``block_q / warps``
of those rows (16 or 32: one or two 16-row tiles of ``mma.sync.m16n8k16``) and never exchanges
anything with another warp: the warps share only the K and V tiles in shared memory.

1. The block copies its query rows to shared memory with 16-byte loads; each warp loads its rows
   into registers once (``ldmatrix``, the A operand of every Q·Kᵀ product that follows).
2. For each tile of ``block_kv`` keys: the block copies the K and V tiles to shared memory; each warp
   computes its 16 × block_kv scores per row tile with ``mma.sync`` (B = K read by ``ldmatrix``); the
   scores are float32 registers, 4 per thread per 8 keys, and a thread holds two rows of each tile
   (its lane / 4 and that + 8), so a row's maximum needs only two shuffles (the 4 lanes that share
   it). Then the online softmax of :mod:`attention_fused`, with exp2 and the scale folded into one
   multiply. The probabilities P are rounded to float16 *in registers*: the accumulator layout of
   one product is the A-operand layout of the next, so P·V starts from them with no trip through
   shared memory (B = V read by ``ldmatrix.trans``).
3. After the last tile each thread divides its O registers by the row sums and stores them.

``pad`` appends 8 halves (16 bytes) to every shared row. Without it, the rows of a tile are 128 or
256 bytes apart and the 8 rows that one ``ldmatrix`` reads for an 8 × 8 matrix all start in the same
4 banks: an 8-way conflict. With it, consecutive rows start 4 banks apart and the 8 rows cover all 32.

Causal: as in :mod:`attention_fused`, a block stops at the key tile that holds its last query row,
blocks are launched heaviest first, and each score of a key after its query gets −∞ (compared on
every tile).
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
from ..gpus import GPUS
from ..knobs import KnobSet, knob
from ..targets import FULL_MASK, WARP_SIZE
from ..workloads import ATTENTION_DTYPE, DTYPE, Attention
from .attention_fused import check_whole_tiles, key_tiles
from .common import Template
from .parsing import parsed_once_per_plan

MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync.m16n8k16
VECTOR = 8  # halves per 16-byte copy
PAD_HALVES = 8  # 16 bytes: consecutive rows start 4 banks apart
# Dynamic shared memory a block may use on every GPU with mma.sync's m16n8k16 (sm_80 and later: 163 KB
# on sm_80, 227 KB on sm_90): the smallest, sm_80's.
MAX_SHARED_BYTES = GPUS["sm_80"].max_shared_per_block
LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
LDMATRIX_TRANS = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"  # each lane gets a column pair, not a row pair


@dataclass(frozen=True)
class AttentionMmaKnobs(KnobSet):
    owner: ClassVar[str] = "attention_mma"

    block_q: int = knob(128, "Query rows one CUDA block owns (blockIdx.x tiles), split evenly over its warps.",
                        choices=(64, 128))
    warps: int = knob(8, "Warps per block: each owns block_q / warps query rows (16 or 32, one or two rows of "
                      "mma tiles) and shares only the K and V tiles with the others.", choices=(2, 4, 8))
    block_kv: int = knob(64, "Keys (and values) per step of the loop: each warp's score tile is its rows × "
                         "block_kv, kept in float32 registers.", choices=(16, 32, 64, 128))
    stages: int = knob(2, "K and V tiles in shared memory at once: with 2, the block copies the next tile with "
                       "cp.async (no registers, no waiting) while its warps compute on this one; with 1 it "
                       "copies, waits, computes.", choices=(1, 2))
    pad: bool = knob(True, "Pad each shared row by 16 bytes, so that the 8 rows one ldmatrix reads start in "
                     "different banks (off: an 8-way bank conflict on every ldmatrix).")


@dataclass(frozen=True)
class Plan:
    w: Attention
    k: AttentionMmaKnobs

    @property
    def threads(self) -> int:
        return self.k.warps * WARP_SIZE

    @property
    def rows_per_warp(self) -> int:
        return self.k.block_q // self.k.warps

    @property
    def stride(self) -> int:
        """Halves from one shared row to the next."""
        return self.w.head_dim + (PAD_HALVES if self.k.pad else 0)

    @property
    def shared_bytes(self) -> int:
        return (self.k.block_q + 2 * self.k.stages * self.k.block_kv) * self.stride * 2

    @property
    def registers_per_thread(self) -> int:
        """32-bit registers the fragments need (Q, S, P, O), before the compiler's own."""
        m_tiles, d = self.rows_per_warp // MMA_M, self.w.head_dim
        q = m_tiles * d // MMA_K * 4
        s = m_tiles * self.k.block_kv // MMA_N * 4
        p = m_tiles * self.k.block_kv // MMA_K * 4
        o = m_tiles * d // MMA_N * 4
        return q + s + p + o


def check_knobs(workload: Attention, k: AttentionMmaKnobs) -> Plan:
    plan = Plan(workload, k)
    check_whole_tiles(workload, k)
    if plan.rows_per_warp not in (MMA_M, 2 * MMA_M):
        raise InvalidKnobs(f"block_q / warps = {plan.rows_per_warp} query rows per warp: this kernel gives a warp "
                           f"one or two 16-row mma tiles (16 or 32 rows).", ("block_q", "warps"))
    if plan.shared_bytes > MAX_SHARED_BYTES:
        raise InvalidKnobs(f"The Q, K and V tiles take {plan.shared_bytes:,} bytes of shared memory, more than the "
                           f"{MAX_SHARED_BYTES:,} a block may have: use smaller tiles.", ("block_q", "block_kv"))
    return plan


def schedule(workload: Attention, k: AttentionMmaKnobs) -> Schedule:
    plan = check_knobs(workload, k)
    return Schedule(tvm.IRModule({"main": parsed_kernel(plan)}))


def kernel(p: Plan):  # noqa: PLR0915 - one kernel, read top to bottom
    w, k = p.w, p.k
    B, H, N, D = w.batch, w.heads, w.seq, w.head_dim
    BQ, BKV, THREADS, RW, DS = k.block_q, k.block_kv, p.threads, p.rows_per_warp, p.stride
    MT = RW // MMA_M  # 16-row tiles per warp
    KQ = D // MMA_K  # k steps of Q·Kᵀ
    NS = BKV // MMA_N  # 8-key tiles of S
    KP = BKV // MMA_K  # k steps of P·V
    NO = D // MMA_N  # 8-column tiles of O
    Q_TILES = N // BQ
    Q_COPIES = -(-BQ * D // (THREADS * VECTOR))
    KV_COPIES = -(-BKV * D // (THREADS * VECTOR))
    CAUSAL, STAGES = w.causal, k.stages
    K_AT, V_AT = BQ * DS, (BQ + STAGES * BKV) * DS  # where the K and V tiles start in the shared allocation
    SCALE_LOG2 = w.scale * math.log2(math.e)  # exp(x·scale) = exp2(x·scale·log2 e)
    half, f32 = ATTENTION_DTYPE, DTYPE
    shape = (B, H, N, D)

    @T.inline
    def across_quad(value, op):
        # The 4 lanes of a row (lane % 4 = 0 … 3) combine their values: every lane gets the result.
        for step in T.unroll(2):
            value[0] = op(value[0], T.tvm_warp_shuffle_xor(T.uint32(FULL_MASK), value[0], 1 << step,
                                                           WARP_SIZE, WARP_SIZE))

    @T.inline
    def copy_tile(tiles, at, src, b, h, first_row, rows, copies, tx):
        # rows × D halves from src to the shared tile that starts at element `at`, 16 bytes per thread and copy
        for i in T.serial(copies):
            if (i * THREADS + tx) * VECTOR < rows * D:
                for v in T.vectorized(VECTOR):
                    tiles[at + (i * THREADS + tx) * VECTOR // D * DS + (i * THREADS + tx) * VECTOR % D + v] = src[
                        b, h, first_row + (i * THREADS + tx) * VECTOR // D, (i * THREADS + tx) * VECTOR % D + v]

    @T.inline
    def copy_tile_async(tiles, at, src, b, h, first_row, tx):
        # 16 bytes per thread and copy, global → shared without passing through registers
        for i in T.serial(KV_COPIES):
            if (i * THREADS + tx) * VECTOR < BKV * D:
                T.ptx["cp.async.cg.shared.global"](
                    tiles.ptr_to([at + (i * THREADS + tx) * VECTOR // D * DS + (i * THREADS + tx) * VECTOR % D]),
                    src.ptr_to([b, h, first_row + (i * THREADS + tx) * VECTOR // D, (i * THREADS + tx) * VECTOR % D]),
                    16)

    @T.inline
    def load_matrices(instruction, words, first, address):
        # four 8 × 8 matrices of 16-bit values, one 32-bit register of each per lane
        T.ptx[instruction](words[first], words[first + 1], words[first + 2], words[first + 3], address)

    @T.inline
    def mma(a, a_at, b, b_at, c, c_at):
        # one mma.sync.m16n8k16: c (16 × 8, float32) += a (16 × 16) · b (16 × 8), each a lane's registers at *_at
        T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", "fp16", "fp16", "fp32", a.data, a_at, b.data, b_at,
                                    c.data, c_at, False, dtype=f32))

    @T.prim_func
    def main(Q: T.Buffer(shape, half), K: T.Buffer(shape, half), V: T.Buffer(shape, half),
             O: T.Buffer(shape, half)):
        with T.launch_thread("blockIdx.x", Q_TILES) as bx:
            by = T.launch_thread("blockIdx.y", B * H)
            tx = T.launch_thread("threadIdx.x", THREADS)
            # One dynamic allocation (a kernel may have only one): the Q tile, then the K tiles of each stage,
            # then the V tiles, each row DS halves.
            tiles = T.alloc_buffer(((BQ + 2 * STAGES * BKV) * DS,), half, scope="shared.dyn")
            q_f = T.alloc_buffer((MT * KQ * 8,), half, scope="local")  # A fragments of Q
            k_f = T.alloc_buffer((8,), half, scope="local")  # B fragments of two 8-key tiles
            v_f = T.alloc_buffer((8,), half, scope="local")  # B fragments of two 8-column tiles
            s_f = T.alloc_buffer((MT * NS * 4,), f32, scope="local")  # scores, then probabilities
            p_f = T.alloc_buffer((MT * KP * 8,), half, scope="local")  # P as A fragments
            o_f = T.alloc_buffer((MT * NO * 4,), f32, scope="local")
            m = T.alloc_buffer((MT * 2,), f32, scope="local")  # running maximum of rows lane/4 and +8
            l_ = T.alloc_buffer((MT * 2,), f32, scope="local")  # this lane's part of the running sum
            alpha = T.alloc_buffer((MT * 2,), f32, scope="local")
            red = T.alloc_buffer((1,), f32, scope="local")
            q_words = q_f.view("uint32")  # ldmatrix writes 32-bit registers: two halves each
            k_words = k_f.view("uint32")
            v_words = v_f.view("uint32")
            # Expressions, not variables, so that the analyses see the thread index in every address.
            b = T.meta_var(by // H)
            h = T.meta_var(by % H)
            qt = T.meta_var((Q_TILES - 1 - bx) if CAUSAL else bx)
            warp = T.meta_var(tx // WARP_SIZE)
            lane = T.meta_var(tx % WARP_SIZE)
            copy_tile(tiles, 0, Q, b, h, qt * BQ, BQ, Q_COPIES, tx)
            T.tvm_storage_sync("shared")
            for mt in T.unroll(MT):
                for kk in T.unroll(KQ):
                    load_matrices(LDMATRIX, q_words, (mt * KQ + kk) * 4, tiles.ptr_to([
                        (warp * RW + mt * MMA_M + lane % 16) * DS + kk * MMA_K + lane // 16 * 8]))
            for i in T.unroll(MT * 2):
                m[i] = T.min_value(f32)
                l_[i] = T.float32(0)
            for i in T.unroll(MT * NO * 4):
                o_f[i] = T.float32(0)
            tiles_kv = T.meta_var(key_tiles(qt, BQ, BKV, N, CAUSAL))
            if STAGES == 2:
                copy_tile_async(tiles, K_AT, K, b, h, 0, tx)
                copy_tile_async(tiles, V_AT, V, b, h, 0, tx)
                T.ptx["cp.async.commit_group"]()
            for kt in T.serial(tiles_kv):
                if STAGES == 2:
                    if kt + 1 < tiles_kv:  # the next tile, into the other stage, while this one is computed
                        copy_tile_async(tiles, K_AT + (kt + 1) % 2 * BKV * DS, K, b, h, (kt + 1) * BKV, tx)
                        copy_tile_async(tiles, V_AT + (kt + 1) % 2 * BKV * DS, V, b, h, (kt + 1) * BKV, tx)
                    T.ptx["cp.async.commit_group"]()  # (empty after the last tile)
                    T.ptx["cp.async.wait_group"](1)  # all but the newest group: this tile has landed
                else:
                    copy_tile(tiles, K_AT, K, b, h, kt * BKV, BKV, KV_COPIES, tx)
                    copy_tile(tiles, V_AT, V, b, h, kt * BKV, BKV, KV_COPIES, tx)
                T.tvm_storage_sync("shared")
                # 1. S = Q·Kᵀ: per pair of 8-key tiles and per 16 columns of d, one ldmatrix of K, two mma per row tile
                for i in T.unroll(MT * NS * 4):
                    s_f[i] = T.float32(0)
                for np in T.unroll(NS // 2):
                    for kk in T.unroll(KQ):
                        load_matrices(LDMATRIX, k_words, 0, tiles.ptr_to([
                            K_AT + kt % STAGES * BKV * DS + (np * 16 + lane % 8 + lane // 16 * 8) * DS + kk * MMA_K
                            + lane // 8 % 2 * 8]))
                        for mt in T.unroll(MT):
                            for j in T.unroll(2):  # the pair's two 8-key tiles
                                mma(q_f, (mt * KQ + kk) * 8, k_f, j * 4, s_f, (mt * NS + np * 2 + j) * 4)
                # 2. online softmax: a lane holds columns 2·(lane % 4) and +1 of rows lane / 4 and lane / 4 + 8
                for mt in T.unroll(MT):
                    for r in T.unroll(2):
                        red[0] = T.min_value(f32)
                        for nt in T.unroll(NS):
                            for c in T.unroll(2):
                                if CAUSAL:
                                    s_f[(mt * NS + nt) * 4 + r * 2 + c] = T.if_then_else(
                                        kt * BKV + nt * MMA_N + lane % 4 * 2 + c
                                        <= qt * BQ + warp * RW + mt * MMA_M + lane // 4 + r * 8,
                                        s_f[(mt * NS + nt) * 4 + r * 2 + c], T.min_value(f32))
                                red[0] = T.max(red[0], s_f[(mt * NS + nt) * 4 + r * 2 + c])
                        across_quad(red, T.max)
                        red[0] = T.max(m[mt * 2 + r], red[0])
                        alpha[mt * 2 + r] = T.exp2((m[mt * 2 + r] - red[0]) * T.float32(SCALE_LOG2))
                        m[mt * 2 + r] = red[0]
                        red[0] = T.float32(0)
                        for nt in T.unroll(NS):
                            for c in T.unroll(2):
                                s_f[(mt * NS + nt) * 4 + r * 2 + c] = T.exp2(
                                    (s_f[(mt * NS + nt) * 4 + r * 2 + c] - m[mt * 2 + r]) * T.float32(SCALE_LOG2))
                                red[0] = red[0] + s_f[(mt * NS + nt) * 4 + r * 2 + c]
                        l_[mt * 2 + r] = l_[mt * 2 + r] * alpha[mt * 2 + r] + red[0]
                    # P in float16, in the A layout: registers 0-3 from 8-key tile 2·kk, 4-7 from tile 2·kk + 1
                    for kk in T.unroll(KP):
                        for i in T.unroll(8):
                            p_f[(mt * KP + kk) * 8 + i] = T.Cast(half, s_f[(mt * NS + kk * 2 + i // 4) * 4 + i % 4])
                    for i in T.unroll(NO * 4):
                        o_f[mt * NO * 4 + i] = o_f[mt * NO * 4 + i] * alpha[mt * 2 + i % 4 // 2]
                # 3. O += P·V: per 16 keys and per pair of 8-column tiles, one ldmatrix.trans of V
                for kk in T.unroll(KP):
                    for dp in T.unroll(NO // 2):
                        load_matrices(LDMATRIX_TRANS, v_words, 0, tiles.ptr_to([
                            V_AT + kt % STAGES * BKV * DS + (kk * MMA_K + lane % 16) * DS + dp * 16 + lane // 16 * 8]))
                        for mt in T.unroll(MT):
                            for j in T.unroll(2):  # the pair's two 8-column tiles
                                mma(p_f, (mt * KP + kk) * 8, v_f, j * 4, o_f, (mt * NO + dp * 2 + j) * 4)
                T.tvm_storage_sync("shared")  # every warp is done with this stage before it is refilled
            for i in T.unroll(MT * 2):
                red[0] = l_[i]
                across_quad(red, operator.add)
                l_[i] = red[0]
            for mt in T.unroll(MT):
                for nt in T.unroll(NO):
                    for c in T.unroll(4):
                        O[b, h, qt * BQ + warp * RW + mt * MMA_M + lane // 4 + c // 2 * 8,
                          nt * MMA_N + lane % 4 * 2 + c % 2] = T.Cast(
                            half, o_f[(mt * NO + nt) * 4 + c] / l_[mt * 2 + c // 2])

    return main


TEMPLATE = Template(
    name="attention_mma",
    title="Attention — tensor cores (mma.sync) with the online softmax (FlashAttention-2's layout)",
    summary="A kernel written in plain TIR: each warp owns 16 or 32 query rows, computes its scores with "
            "mma.sync from K tiles in shared memory, keeps them in registers for the online softmax, and feeds "
            "the probabilities, still in registers, to a second mma.sync with V.",
    workload=Attention,
    knobs=AttentionMmaKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("block_q",), "threadIdx.x": ("warps",)},
    shared_knobs=("block_q", "block_kv", "pad"),
    pipeline="tirx",
    tensor_cores=True,
)


parsed_kernel = parsed_once_per_plan(kernel)  # its T.inline calls ask inspect for the stack each

"""Attention the Hopper way: TMA copies, an mbarrier pipeline of K and V tiles, both products on
``wgmma`` (FlashAttention-3's core), the online softmax of :mod:`attention_mma` in between.

Like :mod:`matmul_hopper`, this is a kernel written in TVM's TIRx dialect, whose statements are
the PTX instructions themselves; the knobs change how it is written.

A CUDA block owns ``block_q`` = 64 × ``consumers`` query rows of one (batch, head). Each consumer
warpgroup (4 warps, 128 threads) owns 64 of them: the M of every wgmma it issues.

1. The TMA unit copies the block's Q tile once, and K and V tiles of ``block_kv`` keys into a ring
   of ``stages`` buffers, each in the 128-byte-swizzled layout that wgmma reads (columns of 64
   elements, one swizzled row wide: a head of 128 is two such columns). Each buffer has a *full*
   mbarrier (the copies complete their bytes on it) and an *empty* one (every consumer thread
   arrives when its products no longer read the buffer). With ``warp_specialize`` one more
   warpgroup does nothing but copy (one thread issues them; it hands its registers to the
   consumers with ``setmaxnreg``); without it, the first consumer's thread 0 copies ``stages − 1``
   tiles ahead of the multiplies.
2. S = Q·Kᵀ: head_dim / 16 instructions ``wgmma m64n{block_kv}k16``, both operands straight from
   shared memory (Q[q, d] and K[kv, d] both have d contiguous: K-major, no transpose). The 64 ×
   block_kv scores land in float32 registers, ``block_kv / 2`` per thread, in wgmma's accumulator
   layout: warp w of the warpgroup holds rows 16w … 16w + 15; lane l rows l / 4 and l / 4 + 8,
   columns 2 (l % 4) and the next, every 8 columns (``mma.sync``'s m16n8 layout, repeated).
3. The online softmax, in those registers: a row lives in the 4 lanes of a quad, so its maximum
   needs two shuffles; exp2 with the scale folded into one multiply-add.
4. O += P·V: ``block_kv / 16`` instructions ``wgmma m64n{head_dim}k16`` in the *RS* form: A (P)
   from registers. The accumulator layout of two neighbouring 8-column groups of S is exactly the
   A-fragment layout of one 16-step, so P is S rounded to float16 in place, two values per
   register. B = V[kv, d] has d contiguous, which for this product (B is k × n = kv × d) is
   N-major: the instruction's transpose flag, and the descriptor of an MN-major operand.
5. After the last tile each thread divides its O registers by the row sums and stores them,
   rounded, two neighbours per 4-byte store.

Each product is issued, committed and waited for (``wgmma.commit_group`` / ``wait_group``). Without
``overlap`` a warpgroup waits for S before its softmax and for P·V before the next tile, so its
tensor-core work and its softmax alternate (with two consumers, one's softmax may run while the
other's products do). With ``overlap`` (FlashAttention-3's pipelining within a warpgroup) it issues
S of tile j and P·V of tile j − 1 together and waits for the scores only: the softmax of tile j
runs while P·V of tile j − 1 is still on the tensor cores; O is rescaled and the new P packed
once that product is done.

Causal: a block stops at the key tile that holds its last query row; scores of a key after its
query are masked, on the tiles that cross the diagonal only. The blocks of one (batch, head) are
launched together, its longest rows first: the blocks running at once then read the K and V of a
few heads, which stay in L2. (Launched longest rows first across all heads, 132 blocks read 128
heads' K and V, 256 MB at 8 × 16 × 4096 × 128, and every tile came from device memory: on the
H100 that took 94% of the unmasked kernel's time for half its work.)

wgmma, setmaxnreg and TMA exist on sm_90a only (the H100's arch-specific feature set).
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
from ..workloads import ATTENTION_DTYPE, DTYPE, Attention
from .attention_fused import key_tiles
from .common import Template
from .hopper import (
    CONSUMER_REGISTERS,
    ELEMENT_BYTES,
    PACK_TWO,
    PRODUCER_REGISTERS,
    SHARED_LIMIT,
    SUPPORTED_DTYPES,
    SWIZZLES,
    TMA_LOAD,
    WARPGROUP,
    WGMMA_K,
    WGMMA_M,
    k_major_offset,
    mn_major_offset,
    tensor_map_2d,
)
from .parsing import parsed_once_per_plan

SWIZZLE_CODE, ROW_BYTES = SWIZZLES["128B"]  # a head of 64 halves is one 128-byte swizzled row
ATOM = ROW_BYTES // ELEMENT_BYTES  # elements per swizzled row: TMA copies tiles in columns this wide
# 32-bit registers per consumer thread that the S and O accumulators and P may take: the rest of
# the consumers' share of the register file (CONSUMER_REGISTERS) goes to addresses, row
# statistics and the compiler's temporaries.
MAX_FRAGMENT_REGISTERS = 176
BARRIER_BYTES = 8
# An empty asm statement that reads and writes a register (CUTLASS's warpgroup_fence_operand): the
# compiler may not move the register's uses across it. By reference, so that it is the register
# itself (TVM's own T.cuda.wgmma.noop_barrier takes a copy, and its codegen fails on a buffer load).
# (name, source) per register type: TVM prints a function's source once per name.
KEEP = {dtype: (f"keep_register_{suffix}", f"__device__ __forceinline__ void keep_register_{suffix}({ctype}& r) "
                f'{{ asm volatile("" : "+{constraint}"(r) :: "memory"); }}\n')
        for dtype, suffix, ctype, constraint in (("float32", "f32", "float", "f"), ("uint32", "u32", "unsigned", "r"))}


@dataclass(frozen=True)
class AttentionHopperKnobs(KnobSet):
    owner: ClassVar[str] = "attention_hopper"

    block_kv: int = knob(128, "Keys (and values) per step of the loop: the N of the Q·Kᵀ wgmma, and block_kv / 2 "
                         "float32 scores per consumer thread.", choices=(64, 128))
    consumers: int = knob(2, "Consumer warpgroups (128 threads each) per block, each owning 64 query rows: the "
                          "block owns 64 × consumers rows and shares its K and V tiles between them.",
                          choices=(1, 2))
    stages: int = knob(2, "K and V tiles in shared memory at once (the mbarrier ring): copies in flight ahead of "
                       "the multiplies.", choices=(2, 3, 4))
    warp_specialize: bool = knob(True, "Add a producer warpgroup that only issues TMA copies (and hands its "
                                 "registers to the consumers); off: a consumer thread issues them between its "
                                 "multiplies.")
    overlap: bool = knob(False, "Overlap each key tile's softmax with the previous tile's P·V on the tensor cores "
                         "(FlashAttention-3's pipelining within a warpgroup): issue S = Q·Kᵀ of tile j and P·V of tile "
                         "j − 1 together, wait for the scores only; off: each product waits for the other.")


@dataclass(frozen=True)
class Plan:
    """The sizes a kernel is written with, derived from the workload and the knobs."""

    w: Attention
    k: AttentionHopperKnobs

    @property
    def block_q(self) -> int:
        return self.k.consumers * WGMMA_M

    @property
    def columns(self) -> int:
        """Swizzled columns of ATOM elements in a row of Q, K or V (head_dim / 64)."""
        return self.w.head_dim // ATOM

    @property
    def threads(self) -> int:
        return (self.k.consumers + self.k.warp_specialize) * WARPGROUP

    @property
    def q_tiles(self) -> int:
        return self.w.seq // self.block_q

    @property
    def blocks(self) -> int:
        return self.q_tiles * self.w.batch * self.w.heads

    @property
    def fragment_registers(self) -> int:
        """32-bit registers per consumer thread for S (block_kv / 2 floats), P (block_kv / 4 pairs of
        halves) and O (head_dim / 2 floats): a 64 × N accumulator spreads over 128 threads."""
        return self.k.block_kv // 2 + self.k.block_kv // 4 + self.w.head_dim // 2

    @property
    def q_bytes(self) -> int:
        return self.block_q * self.w.head_dim * ELEMENT_BYTES

    @property
    def stage_bytes(self) -> int:
        """One buffer of the ring: a K tile and a V tile."""
        return 2 * self.k.block_kv * self.w.head_dim * ELEMENT_BYTES

    @property
    def shared_bytes(self) -> int:
        """Q, the ring of K and V buffers, Q's mbarrier and two per stage."""
        return self.q_bytes + self.k.stages * (self.stage_bytes + 2 * BARRIER_BYTES) + BARRIER_BYTES


def check_knobs(workload: Attention, k: AttentionHopperKnobs) -> Plan:
    """Refuse, one sentence each, what cannot make a correct kernel; return the plan otherwise."""
    plan = Plan(workload, k)
    if ATTENTION_DTYPE not in SUPPORTED_DTYPES:  # pragma: no cover - the workload's inputs are float16
        raise InvalidKnobs(f"wgmma here multiplies float16 or bfloat16 inputs, not {ATTENTION_DTYPE}.")
    if workload.head_dim % ATOM:
        raise InvalidKnobs(f"This kernel copies rows of Q, K and V in {ATOM}-element swizzled columns: head_dim = "
                           f"{workload.head_dim} must be a multiple of {ATOM}.", ())
    if workload.seq % plan.block_q:
        raise InvalidKnobs(f"This kernel has no partial tiles: seq = {workload.seq} must be a multiple of the "
                           f"block's {plan.block_q} query rows (64 × consumers).", ("consumers",))
    if workload.seq % k.block_kv:
        raise InvalidKnobs(f"This kernel has no partial tiles: seq = {workload.seq} must be a multiple of "
                           f"block_kv = {k.block_kv}.", ("block_kv",))
    if plan.fragment_registers > MAX_FRAGMENT_REGISTERS:
        raise InvalidKnobs(f"Each consumer thread would hold {plan.fragment_registers} registers of scores, "
                           f"probabilities and outputs (block_kv / 2 + block_kv / 4 + head_dim / 2), more than the "
                           f"{MAX_FRAGMENT_REGISTERS} that leave room for the rest: use a smaller block_kv.",
                           ("block_kv",))
    if plan.shared_bytes > SHARED_LIMIT:
        raise InvalidKnobs(f"The Q tile and {k.stages} stages of K and V tiles need {plan.shared_bytes:,} bytes of "
                           f"shared memory, more than the {SHARED_LIMIT:,} a block may use on the H100: use fewer "
                           f"stages or a smaller block_kv.", ("stages", "block_kv", "consumers"))
    return plan


def schedule(workload: Attention, k: AttentionHopperKnobs) -> Schedule:
    """The kernel as a module (a Schedule with an empty trace: it is written, not scheduled)."""
    plan = check_knobs(workload, k)
    return Schedule(tvm.IRModule({"main": parsed_kernel(plan)}))


def kernel(p: Plan):  # noqa: PLR0915 - one kernel, read top to bottom
    w, k_ = p.w, p.k
    B, H, N, D = w.batch, w.heads, w.seq, w.head_dim
    BQ, BKV, STAGES, CONSUMERS, WS = p.block_q, k_.block_kv, k_.stages, k_.consumers, k_.warp_specialize
    COLUMNS, Q_TILES, GRID, THREADS = p.columns, p.q_tiles, p.blocks, p.threads
    PRODUCERS = int(WS)  # warpgroups before the first consumer
    OVERLAP = k_.overlap
    CAUSAL = w.causal
    NS, NO = BKV // 2, D // 2  # float32 accumulators per thread of S (64 × block_kv) and O (64 × head_dim)
    KS, KP = D // WGMMA_K, BKV // WGMMA_K  # 16-steps of the two products
    SCALE_LOG2 = w.scale * math.log2(math.e)  # exp(x·scale) = exp2(x·scale·log2 e)
    half, f32 = ATTENTION_DTYPE, DTYPE
    AB = SUPPORTED_DTYPES[half]
    WGMMA_S = f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{BKV}k{WGMMA_K}.f32.{AB}.{AB}"
    WGMMA_O = f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{D}k{WGMMA_K}.f32.{AB}.{AB}"
    shape = (B, H, N, D)
    # Q, K and V as one (B·H·N) × D matrix each; boxes one swizzled column wide, as tall as a tile.
    Q_MAP = tensor_map_2d(D, B * H * N, ATOM, BQ, SWIZZLE_CODE)
    KV_MAP = tensor_map_2d(D, B * H * N, ATOM, BKV, SWIZZLE_CODE)
    # Descriptor strides (16-byte units; PTX ISA, "Matrix Descriptor Format", and the canonical
    # layouts of CUTLASS's make_gmma_desc). Q and K are K-major (d contiguous): within a 128-byte
    # swizzled row a 16-step reads 32 contiguous bytes, and the 8-row swizzle atoms follow one another
    # 8 · 128 bytes apart along M or N: SBO = 64; LBO is unused by swizzled K-major operands (1).
    # V is MN-major for P·V (d, the N of the product, contiguous): a swizzled row holds 64 values of
    # N, 8 rows of k make an atom, and a 16-step reads two atoms 8 · 128 bytes apart: SBO = 64; the
    # next 64 columns of N are the next swizzled column of the tile, block_kv rows further: LBO.
    SBO, K_LBO, V_LBO = 8 * ROW_BYTES // 16, 1, BKV * ROW_BYTES // 16
    CONSUMER_REGS = CONSUMER_REGISTERS[CONSUMERS]

    @T.inline
    def load_q(Q_map, Q_smem, q_full, bh, qt):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(q_full.ptr_to([0]), T.uint32(p.q_bytes))
        for c in T.unroll(COLUMNS):
            T.ptx[TMA_LOAD](Q_smem.ptr_to([c, 0, 0]), T.address_of(Q_map), c * ATOM, bh * N + qt * BQ,
                            q_full.ptr_to([0]))

    @T.inline
    def load_kv(j, K_map, V_map, K_smem, V_smem, full, empty, bh):
        # Key tile j into buffer j % STAGES, once the consumers have released that buffer's previous
        # tile (a fresh barrier passes parity 1).
        s = T.meta_var(j % STAGES)
        T.cuda.mbarrier_wait(empty.ptr_to([s]), j // STAGES % 2 ^ 1)
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(full.ptr_to([s]), T.uint32(p.stage_bytes))
        for c in T.unroll(COLUMNS):
            T.ptx[TMA_LOAD](K_smem.ptr_to([s, c, 0, 0]), T.address_of(K_map), c * ATOM, bh * N + j * BKV,
                            full.ptr_to([s]))
        for c in T.unroll(COLUMNS):
            T.ptx[TMA_LOAD](V_smem.ptr_to([s, c, 0, 0]), T.address_of(V_map), c * ATOM, bh * N + j * BKV,
                            full.ptr_to([s]))

    @T.inline
    def across_quad(value, op):
        # The 4 lanes of a row (lane % 4 = 0 … 3) combine their values: every lane gets the result.
        for step in T.unroll(2):
            value[0] = op(value[0], T.tvm_warp_shuffle_xor(T.uint32(FULL_MASK), value[0], 1 << step,
                                                           WARP_SIZE, WARP_SIZE))

    @T.inline
    def fence_registers(regs, count):
        # wgmma reads and writes these registers asynchronously: keep the compiler from moving
        # their other uses across the instructions that start and finish it.
        for i in T.unroll(count):
            T.cuda.func_call(KEEP[regs.dtype][0], regs[i], source_code=KEEP[regs.dtype][1])

    @T.inline
    def scores(j, K_smem, full, s_acc, desc):
        # 1. S = Q·Kᵀ for key tile j, issued and committed (the first 16-step overwrites S, the others add)
        s = T.meta_var(j % STAGES)
        T.cuda.mbarrier_wait(full.ptr_to([s]), j // STAGES % 2)
        T.cuda.warp_sync()  # .aligned: the warp's threads (one of them may have copied) together
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[1]), K_smem.ptr_to([s, 0, 0, 0]), K_LBO, SBO,
                                              SWIZZLE_CODE)
        fence_registers(s_acc, NS)
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(KS):
            T.ptx[WGMMA_S](*[s_acc[i] for i in range(NS)],
                           desc[0] + T.uint64(k_major_offset(kk * WGMMA_K, BQ, 0, ROW_BYTES)),
                           desc[1] + T.uint64(k_major_offset(kk * WGMMA_K, BKV, 0, ROW_BYTES)),
                           kk > 0, 1, 1, 0, 0)
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.inline
    def softmax(j, s_acc, m, l_, alpha, red, qt, wg, t, row):
        # 2. the online softmax of the thread's two rows: a lane holds columns 2·(lane % 4) and + 1 of
        # every 8; masked scores (causal, on tiles that cross the diagonal) get the lowest float. Leaves
        # the probabilities in S, the rescale factor of the rows' earlier sums in alpha.
        if CAUSAL:
            if (j + 1) * BKV > qt * BQ + wg * WGMMA_M:
                for i in T.unroll(NS):
                    s_acc[i] = T.if_then_else(j * BKV + i // 4 * 8 + t % 4 * 2 + i % 2
                                              <= row + i % 4 // 2 * 8, s_acc[i], T.min_value(f32))
        for r in T.unroll(2):
            red[0] = m[r]
            for i in T.unroll(NS // 4):
                for c in T.unroll(2):
                    red[0] = T.max(red[0], s_acc[i * 4 + r * 2 + c])
            across_quad(red, T.max)
            alpha[r] = T.exp2((m[r] - red[0]) * T.float32(SCALE_LOG2))
            m[r] = red[0]
            red[0] = T.float32(0)
            for i in T.unroll(NS // 4):
                for c in T.unroll(2):
                    s_acc[i * 4 + r * 2 + c] = T.exp2(s_acc[i * 4 + r * 2 + c] * T.float32(SCALE_LOG2)
                                                      - m[r] * T.float32(SCALE_LOG2))
                    red[0] = red[0] + s_acc[i * 4 + r * 2 + c]
            l_[r] = l_[r] * alpha[r] + red[0]

    @T.inline
    def to_probabilities(s_acc, p_words, o_acc, alpha):
        # O's earlier sums rescaled; P in float16 pairs: registers 4kk … 4kk + 3 are the A fragment of
        # 16-step kk (the accumulator layout of two 8-column groups is the A layout of one 16-step)
        for i in T.unroll(NO):
            o_acc[i] = o_acc[i] * alpha[i % 4 // 2]
        for i in T.unroll(NS // 2):
            T.ptx[PACK_TWO[half]](p_words[i], s_acc[i * 2 + 1], s_acc[i * 2])

    @T.inline
    def values(j, V_smem, o_acc, p_words, desc):
        # 3. O += P·V for key tile j, issued and committed (V is MN-major: the transpose flag of B)
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[2]), V_smem.ptr_to([j % STAGES, 0, 0, 0]), V_LBO,
                                              SBO, SWIZZLE_CODE)
        fence_registers(p_words, NS // 2)
        fence_registers(o_acc, NO)
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(KP):
            T.ptx[WGMMA_O](*[o_acc[i] for i in range(NO)], *[p_words[kk * 4 + i] for i in range(4)],
                           desc[2] + T.uint64(mn_major_offset(kk * WGMMA_K, ROW_BYTES)), T.bool(True), 1, 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.inline
    def release(j, tiles_kv, tx, K_map, V_map, K_smem, V_smem, full, empty, bh):
        # This thread no longer reads key tile j's buffer; without a producer, thread 0 refills it.
        T.ptx.mbarrier.arrive.shared.b64(empty.ptr_to([j % STAGES]), T.uint32(1))
        if not WS:
            if tx == 0:
                if j + STAGES < tiles_kv:
                    load_kv(j + STAGES, K_map, V_map, K_smem, V_smem, full, empty, bh)

    @T.prim_func
    def main(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, shape, half, align=16)
        K = T.match_buffer(K_ptr, shape, half, align=16)
        V = T.match_buffer(V_ptr, shape, half, align=16)
        O = T.match_buffer(O_ptr, shape, half, align=16)
        # The host encodes one TMA descriptor per operand; the kernel receives them by value.
        Q_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", Q_map, half, 2, Q.data, *Q_MAP)
        K_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", K_map, half, 2, K.data, *KV_MAP)
        V_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", V_map, half, 2, V.data, *KV_MAP)
        T.device_entry()
        bx = T.cta_id([GRID])
        tx = T.thread_id([THREADS])
        pool = T.SMEMPool()
        Q_smem = pool.alloc((COLUMNS, BQ, ATOM), half, align=1024)  # swizzle atoms: 1024-byte aligned
        K_smem = pool.alloc((STAGES, COLUMNS, BKV, ATOM), half, align=1024)
        V_smem = pool.alloc((STAGES, COLUMNS, BKV, ATOM), half, align=1024)
        q_full = pool.alloc((1,), "uint64", align=8)
        full = pool.alloc((STAGES,), "uint64", align=8)
        empty = pool.alloc((STAGES,), "uint64", align=8)
        pool.commit()
        s_acc = T.alloc_buffer((NS,), f32, scope="local")  # scores, then probabilities
        p_words = T.alloc_buffer((NS // 2,), "uint32", scope="local")  # P as float16 pairs: wgmma's A
        o_acc = T.alloc_buffer((NO,), f32, scope="local")
        m = T.alloc_buffer((2,), f32, scope="local")  # running maximum of rows lane / 4 and + 8
        l_ = T.alloc_buffer((2,), f32, scope="local")  # this lane's part of the running sums
        alpha = T.alloc_buffer((2,), f32, scope="local")
        red = T.alloc_buffer((1,), f32, scope="local")
        desc = T.alloc_buffer((3,), "uint64", scope="local")  # wgmma's shared-memory descriptors of Q, K, V
        # The block's (batch · head, query tile): a head's blocks together, causal ones longest rows first.
        bh = T.meta_var(bx // Q_TILES)
        qt = T.meta_var((Q_TILES - 1 - bx % Q_TILES) if CAUSAL else bx % Q_TILES)
        tiles_kv = T.meta_var(key_tiles(qt, BQ, BKV, N, CAUSAL))
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(q_full.ptr_to([0]), T.uint32(1))
            for s in T.unroll(STAGES):
                T.ptx.mbarrier.init.shared.b64(full.ptr_to([s]), T.uint32(1))  # the producer's expect_tx
                T.ptx.mbarrier.init.shared.b64(empty.ptr_to([s]), T.uint32(CONSUMERS * WARPGROUP))
        T.ptx.fence.proxy.async_.shared__cta()  # the barriers are visible to the TMA unit
        T.cuda.cta_sync()

        if WS and tx < WARPGROUP:
            # The producer warpgroup: one thread copies Q, then every K and V tile of the block.
            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGISTERS)
            if tx == 0:
                load_q(Q_map, Q_smem, q_full, bh, qt)
                for j in T.serial(tiles_kv):
                    load_kv(j, K_map, V_map, K_smem, V_smem, full, empty, bh)
        else:
            if WS:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
            wg = T.meta_var(tx // WARPGROUP - PRODUCERS)  # this consumer's rows: wg · 64 … of the block's
            t = T.meta_var(tx % WARPGROUP)  # the thread within its warpgroup
            row = T.meta_var(qt * BQ + wg * WGMMA_M + t // WARP_SIZE * 16 + t % WARP_SIZE // 4)  # and row + 8
            if not WS:
                if tx == 0:  # Q and a tile into every buffer; each further tile as its buffer is released
                    load_q(Q_map, Q_smem, q_full, bh, qt)
                    for j in T.serial(STAGES):
                        if j < tiles_kv:
                            load_kv(j, K_map, V_map, K_smem, V_smem, full, empty, bh)
            for r in T.unroll(2):
                m[r] = T.min_value(f32)
                l_[r] = T.float32(0)
            for i in T.unroll(NO):
                o_acc[i] = T.float32(0)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[0]), Q_smem.ptr_to([0, wg * WGMMA_M, 0]),
                                                  K_LBO, SBO, SWIZZLE_CODE)
            T.cuda.mbarrier_wait(q_full.ptr_to([0]), 0)
            if OVERLAP:
                # Tile j's scores are computed while tile j − 1's P·V is still running on the tensor cores.
                scores(0, K_smem, full, s_acc, desc)
                T.ptx.wgmma.wait_group.sync.aligned(0)
                fence_registers(s_acc, NS)
                softmax(0, s_acc, m, l_, alpha, red, qt, wg, t, row)
                to_probabilities(s_acc, p_words, o_acc, alpha)
                for i in T.serial(tiles_kv - 1):
                    scores(i + 1, K_smem, full, s_acc, desc)
                    values(i, V_smem, o_acc, p_words, desc)
                    T.ptx.wgmma.wait_group.sync.aligned(1)  # the scores (committed first) are done
                    fence_registers(s_acc, NS)
                    softmax(i + 1, s_acc, m, l_, alpha, red, qt, wg, t, row)
                    T.ptx.wgmma.wait_group.sync.aligned(0)  # ... and tile i's P·V
                    fence_registers(o_acc, NO)
                    fence_registers(p_words, NS // 2)
                    release(i, tiles_kv, tx, K_map, V_map, K_smem, V_smem, full, empty, bh)
                    to_probabilities(s_acc, p_words, o_acc, alpha)
                values(tiles_kv - 1, V_smem, o_acc, p_words, desc)
                T.ptx.wgmma.wait_group.sync.aligned(0)
                fence_registers(o_acc, NO)
                fence_registers(p_words, NS // 2)
                release(tiles_kv - 1, tiles_kv, tx, K_map, V_map, K_smem, V_smem, full, empty, bh)
            else:
                for j in T.serial(tiles_kv):
                    scores(j, K_smem, full, s_acc, desc)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    fence_registers(s_acc, NS)
                    softmax(j, s_acc, m, l_, alpha, red, qt, wg, t, row)
                    to_probabilities(s_acc, p_words, o_acc, alpha)
                    values(j, V_smem, o_acc, p_words, desc)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    fence_registers(o_acc, NO)
                    fence_registers(p_words, NS // 2)
                    release(j, tiles_kv, tx, K_map, V_map, K_smem, V_smem, full, empty, bh)
            # 4. O / l, rounded, two neighbours per store (cvt puts its first value in the upper half)
            for r in T.unroll(2):
                red[0] = l_[r]
                across_quad(red, operator.add)
                l_[r] = T.float32(1) / red[0]
            for i in T.unroll(NO // 4):
                for r in T.unroll(2):
                    T.ptx[PACK_TWO[half]](p_words[0], o_acc[i * 4 + r * 2 + 1] * l_[r], o_acc[i * 4 + r * 2] * l_[r])
                    T.ptx["st.global.b32"](O.ptr_to([bh // H, bh % H, row + r * 8, i * 8 + t % 4 * 2]), p_words[0])

    return main


TEMPLATE = Template(
    name="attention_hopper",
    title="Attention — Hopper tensor cores (TMA + mbarrier pipeline + wgmma, warp-specialized)",
    summary="A kernel written in TVM's TIRx dialect: TMA copies Q once and K and V tiles into swizzled shared "
            "buffers guarded by full/empty mbarriers; consumer warpgroups compute S = Q·Kᵀ with wgmma from shared "
            "memory, the online softmax in registers, and O += P·V with wgmma taking P from registers.",
    workload=Attention,
    knobs=AttentionHopperKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("consumers",), "threadIdx.x": ("consumers", "warp_specialize")},
    shared_knobs=("block_kv", "stages", "consumers"),
    workload_defaults={"head_dim": 128},
    pipeline="tirx",
    archs=("sm_90a",),
    tensor_cores=True,
)


parsed_kernel = parsed_once_per_plan(kernel)  # its T.inline calls ask inspect for the stack each

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
   element of Q and K it loads feeds several multiply-adds). Its rows are ``block_q /
   rows_per_thread`` rows apart, so that the threads of a warp read neighbouring rows at once;
2. online softmax, per row: the tile's maximum (the ``threads_per_row`` threads of a row share a
   warp and combine theirs with ``__shfl_xor_sync``), the new running maximum m' = max(m, tile
   maximum), P = exp(S − m') into shared memory, the running sum l = exp(m − m')·l + Σ P;
3. output: O = exp(m − m')·O + P·V, each thread ``rows_per_thread`` rows × ``head_dim /
   threads_per_row`` columns, in registers.

At the end each thread writes its part of O / l: the only global store of the kernel. No score
leaves the chip. ``kv_shared`` copies each K and V tile to shared memory first (every thread of
the block then reads them there); without it each thread reads K and V from global memory itself
(the L1 and L2 caches catch the repeats).

Two knobs cut the instructions of the inner loops (steps 1 and 3) that are not multiply-adds: the
kernel is limited by how many instructions it issues. With float16 tiles, every element a thread
uses is a 16-bit load from shared memory and a conversion to float32, each time it is used. Per
column of head_dim in step 1, a thread of 8 rows × 4 keys loads and converts 8 elements of Q and 4
of K for 32 multiply-adds: 24 other instructions beside them.

- ``float_tiles`` converts Q, K and V to float32 as they are copied into shared memory: once per
  element and block, where the loops convert once per use in every thread. The inner loops then
  multiply what they load. The tiles take twice the bytes: they become one dynamic allocation (a
  block may allocate only 48 KB statically, and opt in to more dynamically), as do float16 tiles
  beyond 48 KB.
- ``vector`` loads that many neighbouring elements with one instruction: along head_dim for Q and K
  in step 1, along the keys for P in step 3. Four float32 elements are one 16-byte load (float4),
  so the 8 + 4 loads of a column become 8 + 4 loads per four columns, for 128 multiply-adds. (From
  float16 tiles, a vector of halves is still converted element by element.)

The shared rows are padded so that the lanes that read the same column of different rows (the keys
of step 1; the neighbouring rows of Q and P that the row groups of a warp read) hit different banks
and every vector load stays aligned: :func:`padded_row`.

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

from tvm.script import tirx as T

from ..errors import InvalidKnobs
from ..gpus import DEFAULT, STATIC_SHARED_PER_BLOCK
from ..knobs import KnobSet, knob
from ..targets import BANK_BYTES, FULL_MASK, WARP_SIZE
from ..workloads import ATTENTION_DTYPE, DTYPE, Attention, numpy_dtype
from .common import Template
from .written import WrittenKernel, check_shared

MAX_THREADS = 1024


@dataclass(frozen=True)
class AttentionFusedKnobs(KnobSet):

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
    float_tiles: bool = knob(False, "Convert Q (and K and V with kv_shared) to float32 as they are copied into "
                             "shared memory: once per element per block, instead of once per use in every "
                             "thread's inner loop. The tiles take twice the bytes (allocated dynamically).")
    vector: int = knob(1, "Elements per shared-memory load in the inner loops: along head_dim for Q and K, along "
                       "the keys for P. One 8- or 16-byte load replaces 2 or 4 scalar ones; the rows are padded "
                       "to keep the loads aligned and free of bank conflicts.", choices=(1, 2, 4))


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
    def tile_dtype(self) -> str:
        """The element type of the Q, K and V tiles in shared memory."""
        return DTYPE if self.k.float_tiles else ATTENTION_DTYPE

    @property
    def tile_element_bytes(self) -> int:
        return numpy_dtype(self.tile_dtype).itemsize

    @property
    def qk_stride(self) -> int:
        """Elements from one row of the Q or K tile to the next."""
        return padded_row(self.w.head_dim, self.tile_element_bytes, self.k.vector)

    @property
    def p_stride(self) -> int:
        """Elements (float32) from one row of the P tile to the next. Step 3 reads P along the keys as
        step 1 reads K along head_dim, and step 2 writes it one element per lane: the row groups of a
        warp write neighbouring rows, which the padding puts in different banks."""
        return padded_row(self.k.block_kv, numpy_dtype(DTYPE).itemsize, self.k.vector)

    @property
    def tile_bytes(self) -> dict[str, int]:
        """Bytes of each shared tile, in the order of the dynamic allocation."""
        k, d, element = self.k, self.w.head_dim, self.tile_element_bytes
        tiles = {"q": k.block_q * self.qk_stride * element}
        if k.kv_shared:
            tiles |= {"k": k.block_kv * self.qk_stride * element, "v": k.block_kv * d * element}
        return tiles | {"p": k.block_q * self.p_stride * numpy_dtype(DTYPE).itemsize}

    @property
    def tile_offsets(self) -> dict[str, int]:
        """Where each tile starts in the dynamic allocation, bytes. Every tile has a multiple of 16 rows
        (block_q and block_kv are), so each is a multiple of 16 bytes long and every tile starts aligned
        for 16-byte loads (the allocation itself is aligned to 64)."""
        offsets, at = {}, 0
        for name, size in self.tile_bytes.items():
            offsets[name] = at
            at += size
        return offsets

    @property
    def shared_bytes(self) -> int:
        return sum(self.tile_bytes.values())

    @property
    def dynamic_shared(self) -> bool:
        return self.k.float_tiles or self.shared_bytes > STATIC_SHARED_PER_BLOCK


def padded_row(elements: int, element_bytes: int, vector: int) -> int:
    """Elements from one row of a shared tile to the next, for rows of ``elements`` read ``vector``
    elements at a time.

    One load of a lane covers a chunk of ``vector`` elements (at least a 4-byte bank word), and
    shared memory serves a warp's request 128 bytes (all 32 banks) at a time: 32 lanes of 4-byte
    loads, 16 of 8-byte or 8 of 16-byte loads together. When the row stride is an odd number of
    chunks, consecutive rows start in different chunks of banks until all 32 banks are used (an odd
    number and the power of two of chunks in 32 banks have no common factor), so the lanes that read
    the same column of neighbouring rows, as the lanes of a row's keys do, never share a bank. A
    stride of whole chunks also keeps every vector load aligned. head_dim and block_kv are even
    numbers of chunks, so the padding is one chunk: 1 float32 element for scalar loads, 4 for float4
    loads (a stride of 68 words ≡ 4 mod 32 for head_dim 64), max(2, vector) float16 elements.
    """
    chunk = max(vector, BANK_BYTES // element_bytes)
    return elements if elements // chunk % 2 else elements + chunk


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
    if workload.head_dim % k.vector or k.block_kv % k.vector:
        raise InvalidKnobs(f"vector = {k.vector} elements per load must divide head_dim = {workload.head_dim} (Q "
                           f"and K rows) and block_kv = {k.block_kv} (P rows).", ("vector", "block_kv"))
    if plan.threads < WARP_SIZE:
        raise InvalidKnobs(f"block_q / rows_per_thread × threads_per_row = {plan.threads} threads per block, fewer "
                           f"than the {WARP_SIZE} lanes of one warp: the others would idle and a block of so few "
                           f"threads runs for seconds at a lesson's shape, so use more threads_per_row or fewer "
                           f"rows_per_thread.",
                           ("block_q", "rows_per_thread", "threads_per_row"))
    if plan.threads > MAX_THREADS:
        raise InvalidKnobs(f"block_q / rows_per_thread × threads_per_row = {plan.threads} threads per block, more "
                           f"than the {MAX_THREADS} a CUDA block may have.",
                           ("block_q", "rows_per_thread", "threads_per_row"))
    # Beyond what a block may allocate statically ("shared"), and for float tiles, the tiles are one dynamic
    # allocation ("shared.dyn"), up to what a block may opt in to.
    check_shared(plan.shared_bytes, "The Q, K, V and P tiles", "use smaller tiles or float16 tiles (float_tiles = "
                 "false)", ("block_q", "block_kv", "float_tiles"), DEFAULT.arch)
    return plan


def kernel(p: Plan):  # noqa: PLR0915 - one kernel, read top to bottom
    w, k = p.w, p.k
    B, H, N, D = w.batch, w.heads, w.seq, w.head_dim
    BQ, BKV, TM, G, VEC = k.block_q, k.block_kv, k.rows_per_thread, k.threads_per_row, k.vector
    TN, TD, THREADS = p.keys_per_thread, p.columns_per_thread, p.threads
    GROUPS = BQ // TM  # threads_per_row threads each: a row group owns rows r * GROUPS + group
    Q_TILES = N // BQ
    CAUSAL, STAGED, DYNAMIC = w.causal, k.kv_shared, p.dynamic_shared
    # Scores are kept in log2 units: exp(x · scale) = exp2(x · scale · log2 e), and exp2 is one
    # hardware instruction where expf is a sequence of them (per score, beside 2 · head_dim multiply-adds).
    SCALE = w.scale * math.log2(math.e)
    DS, PS = p.qk_stride, p.p_stride
    Q_COPIES = -(-BQ * D // THREADS)
    KV_COPIES = -(-BKV * D // THREADS)
    SHUFFLES = G.bit_length() - 1  # log2 of the threads that share a row
    half, f32, tile = ATTENTION_DTYPE, DTYPE, p.tile_dtype
    # Where each tile starts in the dynamic allocation, in its own elements (a float16 tile counts halves).
    AT = {name: at // (4 if name == "p" else p.tile_element_bytes) for name, at in p.tile_offsets.items()}
    WORDS = p.shared_bytes // 4  # the allocation, in float32 elements
    shape = (B, H, N, D)

    def lanes(first):
        """Elements first … first + VEC − 1 of a row as one index (a ramp: one vector load or store),
        or ``first`` alone without vector loads."""
        return first if VEC == 1 else T.ramp(first, 1, VEC)

    def as_float(value):
        """A loaded element, or vector of them, in float32: float16 is converted lane by lane."""
        dtype = str(value.ty)
        return value if dtype.startswith(f32) else T.Cast(dtype.replace(half, f32), value)

    def as_tile(value):
        """A float16 element as the tiles hold it (float_tiles: converted here, once)."""
        return T.Cast(tile, value) if tile != half else value

    @T.inline
    def across_row(value, op):
        # Combine a value over the G lanes of a row (an xor butterfly: every lane gets the result).
        for step in T.unroll(SHUFFLES):
            value[0] = op(value[0], T.tvm_warp_shuffle_xor(T.uint32(FULL_MASK), value[0], G >> (step + 1),
                                                           WARP_SIZE, WARP_SIZE))

    @T.inline
    def each_lane(step, *args):
        # step(*args, v) for each element v of the vector loads just made (one element: no loop to unroll)
        if VEC == 1:
            step(*args, 0)
        else:
            for v in T.unroll(VEC):
                step(*args, v)

    @T.prim_func
    def main(Q: T.Buffer(shape, half), K: T.Buffer(shape, half), V: T.Buffer(shape, half),
             O: T.Buffer(shape, half)):
        with T.launch_thread("blockIdx.x", Q_TILES) as bx:
            by = T.launch_thread("blockIdx.y", B * H)
            tx = T.launch_thread("threadIdx.x", THREADS)
            if DYNAMIC:
                # One dynamic allocation (a kernel may have only one), the tiles one after the other. (The
                # strides are those of any 2-D tile; stated, the view at offset 0 prints as TVMScript that
                # parses back to the same view, not to the whole allocation.)
                tiles = T.alloc_buffer((WORDS,), f32, scope="shared.dyn")
                q_s = T.decl_buffer((BQ, DS), tile, data=tiles.data, elem_offset=AT["q"], strides=(DS, 1))
                if STAGED:
                    k_s = T.decl_buffer((BKV, DS), tile, data=tiles.data, elem_offset=AT["k"], strides=(DS, 1))
                    v_s = T.decl_buffer((BKV, D), tile, data=tiles.data, elem_offset=AT["v"], strides=(D, 1))
                p_s = T.decl_buffer((BQ, PS), f32, data=tiles.data, elem_offset=AT["p"], strides=(PS, 1))
            else:  # float16 tiles within 48 KB: static arrays
                q_s = T.alloc_buffer((BQ, DS), half, scope="shared")
                if STAGED:
                    k_s = T.alloc_buffer((BKV, DS), half, scope="shared")
                    v_s = T.alloc_buffer((BKV, D), half, scope="shared")
                p_s = T.alloc_buffer((BQ, PS), f32, scope="shared")
            s = T.alloc_buffer((TM, TN), f32, scope="local")
            acc = T.alloc_buffer((TM, TD), f32, scope="local")
            q_r = T.alloc_buffer((TM * VEC,), f32, scope="local")  # VEC elements of Q (step 1) or P (step 3) per row
            k_r = T.alloc_buffer((TN * VEC,), f32, scope="local")
            v_r = T.alloc_buffer((TD,), f32, scope="local")
            m = T.alloc_buffer((TM,), f32, scope="local")
            l_ = T.alloc_buffer((TM,), f32, scope="local")
            alpha = T.alloc_buffer((TM,), f32, scope="local")
            red = T.alloc_buffer((1,), f32, scope="local")
            b = by // H
            h = by % H
            qt = (Q_TILES - 1 - bx) if CAUSAL else bx  # causal: the longest rows first
            # This thread's rows: r * GROUPS + group, GROUPS rows apart. The groups of a warp then read
            # neighbouring rows of Q and P at once (one row each, its lanes the same address), which the
            # rows' padding puts in different banks; rows_per_thread consecutive rows per group would put
            # them rows_per_thread padded rows apart, in the same banks once the stride is a multiple of 4 words.
            group = tx // G
            lane = tx % G  # its keys: c * G + lane; its output columns: c * G + lane

            @T.inline
            def scores_step(v):
                # column e · VEC + v of head_dim (element v of the vector loads): TM × TN multiply-adds
                for r in T.unroll(TM):
                    for c in T.unroll(TN):
                        s[r, c] = s[r, c] + q_r[r * VEC + v] * k_r[c * VEC + v]

            @T.inline
            def output_step(kt, j, v):
                # key j · VEC + v of key tile kt: its TD values times the TM rows' probabilities
                for c in T.unroll(TD):
                    if STAGED:
                        v_r[c] = as_float(v_s[j * VEC + v, c * G + lane])
                    else:
                        v_r[c] = as_float(V[b, h, kt * BKV + j * VEC + v, c * G + lane])
                for r in T.unroll(TM):
                    for c in T.unroll(TD):
                        acc[r, c] = acc[r, c] + q_r[r * VEC + v] * v_r[c]

            # The block's query rows, once.
            for i in T.serial(Q_COPIES):
                if i * THREADS + tx < BQ * D:
                    q_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = as_tile(Q[
                        b, h, qt * BQ + (i * THREADS + tx) // D, (i * THREADS + tx) % D])
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
                            k_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = as_tile(K[
                                b, h, kt * BKV + (i * THREADS + tx) // D, (i * THREADS + tx) % D])
                            v_s[(i * THREADS + tx) // D, (i * THREADS + tx) % D] = as_tile(V[
                                b, h, kt * BKV + (i * THREADS + tx) // D, (i * THREADS + tx) % D])
                    T.tvm_storage_sync("shared")
                # 1. scores of this thread's TM rows × TN keys, VEC columns of head_dim per load
                for r in T.unroll(TM):
                    for c in T.unroll(TN):
                        s[r, c] = T.float32(0)
                for e in T.serial(D // VEC):
                    for r in T.unroll(TM):
                        q_r[lanes(r * VEC)] = as_float(q_s[r * GROUPS + group, lanes(e * VEC)])
                    for c in T.unroll(TN):
                        if STAGED:
                            k_r[lanes(c * VEC)] = as_float(k_s[c * G + lane, lanes(e * VEC)])
                        else:
                            k_r[lanes(c * VEC)] = as_float(K[b, h, kt * BKV + c * G + lane, lanes(e * VEC)])
                    each_lane(scores_step)
                # 2. online softmax, row by row
                for r in T.unroll(TM):
                    red[0] = T.min_value(f32)
                    for c in T.unroll(TN):
                        if CAUSAL:
                            s[r, c] = T.if_then_else(kt * BKV + c * G + lane <= qt * BQ + r * GROUPS + group,
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
                        p_s[r * GROUPS + group, c * G + lane] = s[r, c]
                        red[0] = red[0] + s[r, c]
                    across_row(red, operator.add)
                    l_[r] = l_[r] * alpha[r] + red[0]
                T.tvm_storage_sync("shared")
                # 3. O = alpha·O + P·V for this thread's TM rows × TD columns, VEC keys per load of P
                for r in T.unroll(TM):
                    for c in T.unroll(TD):
                        acc[r, c] = acc[r, c] * alpha[r]
                for j in T.serial(BKV // VEC):
                    for r in T.unroll(TM):
                        q_r[lanes(r * VEC)] = p_s[r * GROUPS + group, lanes(j * VEC)]
                    each_lane(output_step, kt, j)
                T.tvm_storage_sync("shared")  # the next tile overwrites K, V and P
            for r in T.unroll(TM):
                for c in T.unroll(TD):
                    O[b, h, qt * BQ + r * GROUPS + group, c * G + lane] = T.Cast(half, acc[r, c] / l_[r])

    return main


# Written, not scheduled: the plan's kernel, parsed once per plan (explorer/schedules/written.py).
schedule = WrittenKernel(check_knobs, kernel)

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
    shared_knobs=("block_q", "block_kv", "kv_shared", "float_tiles"),
    # The kernel places its own barriers (one after each copy, one before a tile is overwritten); the TIRx
    # pipeline keeps them as written.
    pipeline="tirx",
)

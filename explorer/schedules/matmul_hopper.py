"""fp16/bf16 matmul the Hopper way: TMA, an mbarrier pipeline, wgmma and warp specialization.

This template is not a schedule of the workload's TensorIR: it is a kernel written in TVM's
TIRx dialect (``tvm.script.tirx``), whose statements are the PTX instructions themselves,
and the knobs change how it is written. A CUDA block computes a ``block_m × block_n`` tile
of C. Its operand tiles (``block_m × block_k`` of A, ``block_k × block_n`` of B) are copied
from global to shared memory by the TMA unit (``cp.async.bulk.tensor``, one thread issues a
whole tile), in the swizzled layout that wgmma reads, into ``stages`` buffers. Each buffer
has two mbarriers: *full* (the TMA unit completes it when the bytes have landed) and *empty*
(the consumers arrive on it when their multiplies no longer read the buffer).

``consumers`` warpgroups (4 warps each) multiply with ``wgmma.mma_async``: a warpgroup
computes a 64 × block_n slab per instruction straight from shared memory (descriptors, no
ldmatrix), summing in float32 registers, and keeps one step of multiplies in flight while
it waits for the next buffer. With ``warp_specialize`` one more warpgroup is the producer:
one of its threads does nothing but wait for empty buffers and issue copies, and the
warpgroups trade registers (``setmaxnreg``: the producer gives its registers to the
consumers). Without it, thread 0 of the first consumer also issues the copies, ``stages − 1``
steps ahead. With ``persistent`` the grid is one block per SM and each block walks over
tiles, so the producer fills the next tile's buffers during the previous tile's epilogue.
Tiles are visited in groups of 8 rows of tiles, so blocks running together share operand
tiles in L2. With ``cluster`` = 2 the blocks are launched in thread-block clusters of two, on
neighbouring tile rows of one tile column: both multiply the same ``block_k × block_n`` tile
of B (at the default 128 × 256 block the larger operand tile: 32 KB against A's 16 KB). Each
block's copying thread copies half of that tile's rows once, with ``.multicast::cluster``,
into both blocks' shared memory, so B's tile crosses from L2 to the SMs once per pair
instead of twice. Each block's *full* barrier still expects the whole stage (its own A tile
and both halves of B: a multicast completes the bytes on the barrier at the same place in
every block it writes to), and a buffer is free only when the consumers of *both* blocks are
done with it, since the other block's copies write into it too: each consumer warp also
arrives on the other block's *empty* barrier (``mapa`` gives its address there), whose
count is twice one block's consumer threads. The two blocks synchronise (``barrier.cluster``)
after the barriers are initialised, before any copy or arrive reaches the other block, and
before they exit, so that neither leaves while the other may still arrive on its barriers.
Each thread stores its accumulators directly, two neighbours at a time: as an
8-byte pair of floats when C is float32, or, when the workload's ``out_dtype`` is the
inputs' type, rounded and packed into one 4-byte word (``cvt.rn.f16x2.f32``), which halves
the bytes the epilogue writes.

wgmma, setmaxnreg and TMA exist on sm_90a only (the H100's arch-specific feature set);
clusters and multicast on sm_90 and later.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import tvm
from tvm.s_tir import Schedule
from tvm.script import tirx as T

from ..errors import InvalidKnobs
from ..gpus import GPUS
from ..knobs import KnobSet, knob
from ..targets import WARP_SIZE
from ..workloads import Matmul
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

MAX_ACCUMULATORS = 128  # float32 accumulators per thread that leave registers for the rest (255 at most)
PERSISTENT_BLOCKS = GPUS["sm_90"].sms  # the H100 SXM's SMs: one block each when tiles are persistent
RASTER_GROUP = 8  # rows of tiles visited together, so that concurrent blocks share tiles in L2
TMA_MULTICAST = TMA_LOAD + ".multicast::cluster"  # the same copy, written into every CTA of ctaMask
CLUSTER_MASK = 0b11  # ctaMask of a multicast: both CTAs of a cluster of two
SWIZZLE_ATOM_ROWS = 8  # the swizzle pattern repeats every 8 rows: a copy must start on such a row


@dataclass(frozen=True)
class MatmulHopperKnobs(KnobSet):
    owner: ClassVar[str] = "matmul_hopper"

    block_m: int = knob(128, "Rows of C computed by one CUDA block (consumers × 64 × wgmma tiles).",
                        choices=(64, 128, 256))
    block_n: int = knob(256, "Columns of C computed by one CUDA block: the N of every wgmma instruction.",
                        choices=(64, 128, 256))
    block_k: int = knob(64, "Reduction step copied by TMA into one shared buffer (4 wgmma steps of 16 at 64).",
                        choices=(32, 64, 128))
    stages: int = knob(4, "Shared buffers of A and B tiles in the mbarrier ring: copies in flight ahead of the "
                       "multiplies.", choices=(2, 3, 4, 5, 6))
    consumers: int = knob(2, "Warpgroups (128 threads each) that multiply with wgmma; each owns block_m / "
                          "consumers rows of the tile.", choices=(1, 2))
    warp_specialize: bool = knob(True, "Add a producer warpgroup that only issues TMA copies (and hands its "
                                 "registers to the consumers); off: a consumer thread issues them between its "
                                 "multiplies.")
    swizzle: str = knob("128B", "Width of the XOR-swizzled rows TMA writes and wgmma reads: wider spreads a "
                        "row's 16-byte chunks over more banks.", choices=tuple(SWIZZLES))
    persistent: bool = knob(False, "One block per SM, each looping over tiles (the next tile's copies overlap "
                            "this tile's epilogue); off: one block per tile.")
    cluster: int = knob(1, "Blocks per thread-block cluster. 2: two blocks on neighbouring tile rows share B's tile; "
                        "each copies half of it with TMA multicast into both blocks' shared memory, so it crosses "
                        "from L2 once per pair.", choices=(1, 2))


@dataclass(frozen=True)
class Plan:
    """The sizes a kernel is written with, derived from the workload and the knobs."""

    dtype: str
    m: int
    n: int
    k: int
    k_: MatmulHopperKnobs
    out_dtype: str = "float32"  # C's type: float32 or the inputs' type

    @property
    def swizzle_code(self) -> int:
        return SWIZZLES[self.k_.swizzle][0]

    @property
    def row_bytes(self) -> int:
        return SWIZZLES[self.k_.swizzle][1]

    @property
    def atom(self) -> int:
        """Elements per swizzled row: TMA copies (and wgmma reads) tiles in columns this wide."""
        return self.row_bytes // ELEMENT_BYTES

    @property
    def m_tiles(self) -> int:
        """wgmma instructions (64 rows each) per consumer per 16-step of the reduction."""
        return self.k_.block_m // (self.k_.consumers * WGMMA_M)

    @property
    def accumulators(self) -> int:
        """float32 accumulators per consumer thread: a 64 × N wgmma leaves N / 2 in each of 128 threads."""
        return self.m_tiles * self.k_.block_n // 2

    @property
    def threads(self) -> int:
        return (self.k_.consumers + self.k_.warp_specialize) * WARPGROUP

    @property
    def tiles(self) -> tuple[int, int]:
        return self.m // self.k_.block_m, self.n // self.k_.block_n

    @property
    def blocks(self) -> int:
        count = self.tiles[0] * self.tiles[1]
        return min(count, PERSISTENT_BLOCKS) if self.k_.persistent else count

    @property
    def b_rows(self) -> int:
        """Rows of B's block_k × block_n tile that one CTA copies per stage: all of them, or in a
        cluster its share (the other CTA copies the rest into both)."""
        return self.k_.block_k // self.k_.cluster

    @property
    def stage_bytes(self) -> int:
        k = self.k_
        return (k.block_m + k.block_n) * k.block_k * ELEMENT_BYTES

    @property
    def shared_bytes(self) -> int:
        """The ring of A and B buffers plus two 8-byte mbarriers per stage."""
        return self.k_.stages * (self.stage_bytes + 16)


def check_knobs(workload: Matmul, k: MatmulHopperKnobs) -> Plan:
    """Refuse, one sentence each, what cannot make a correct kernel; return the plan otherwise."""
    if workload.dtype not in SUPPORTED_DTYPES:
        raise InvalidKnobs(f"wgmma here multiplies float16 or bfloat16 inputs, not {workload.dtype}: choose "
                           f"the workload's dtype accordingly (float32 matrices go to the matmul_async template).")
    plan = Plan(workload.dtype, workload.m, workload.n, workload.k, k, workload.out_dtype)
    if k.block_m % (k.consumers * WGMMA_M):
        raise InvalidKnobs(f"Each consumer warpgroup multiplies whole 64-row wgmma tiles: block_m = {k.block_m} "
                           f"cannot be shared by {k.consumers} consumers.", ("block_m", "consumers"))
    for dim, block in (("m", "block_m"), ("n", "block_n"), ("k", "block_k")):
        size, step = getattr(workload, dim), getattr(k, block)
        if size % step:
            raise InvalidKnobs(f"This kernel has no partial tiles: {dim} = {size} must be a multiple of "
                               f"{block} = {step}.", (block,))
    if k.block_k % plan.atom:
        raise InvalidKnobs(f"A {k.swizzle} swizzle copies A in {plan.atom}-element rows: block_k = {k.block_k} "
                           f"must be a multiple of {plan.atom} (choose a narrower swizzle or a larger block_k).",
                           ("block_k", "swizzle"))
    if plan.accumulators > MAX_ACCUMULATORS:
        raise InvalidKnobs(f"Each consumer thread would hold {plan.accumulators} float32 accumulators, more than "
                           f"the {MAX_ACCUMULATORS} that leave registers for addresses and loop counters: use "
                           f"more consumers or a smaller block tile.", ("block_m", "block_n", "consumers"))
    if plan.shared_bytes > SHARED_LIMIT:
        raise InvalidKnobs(f"{k.stages} stages of {plan.stage_bytes:,}-byte buffers need {plan.shared_bytes:,} "
                           f"bytes of shared memory, more than the {SHARED_LIMIT:,} a block may use on the "
                           f"H100: use fewer stages or smaller tiles.", ("stages", "block_m", "block_n", "block_k"))
    if k.cluster > 1:
        check_cluster(k, plan)
    return plan


def check_cluster(k: MatmulHopperKnobs, plan: Plan) -> None:
    """A cluster pairs blocks 2i and 2i + 1. Tiles are numbered down the rows of a tile column
    (groups of 8 rows), so with an even number of tile rows those two blocks always hold
    neighbouring rows of one column, on every tile a persistent block visits too (the grid,
    min(tiles, 132), is then even, and so a multiple of the cluster)."""
    rows = plan.tiles[0]
    if rows % k.cluster:
        raise InvalidKnobs(f"A cluster of {k.cluster} blocks shares B's tile between neighbouring tile rows, so the "
                           f"number of tile rows must be even: m / block_m = {plan.m} / {k.block_m} = {rows} "
                           f"(choose another block_m, or cluster = 1).", ("cluster", "block_m"))
    if plan.b_rows % SWIZZLE_ATOM_ROWS:
        raise InvalidKnobs(f"Each block of a cluster copies {plan.b_rows} of B's {k.block_k} rows, which must be a "
                           f"whole number of {SWIZZLE_ATOM_ROWS}-row swizzle patterns: use a larger block_k, or "
                           f"cluster = 1.", ("cluster", "block_k"))


def tile_origin(tile, tiles_m: int, tiles_n: int):
    """(row, column) of a tile of C among the tiles_m × tiles_n tiles: tiles are numbered along
    groups of RASTER_GROUP tile rows, column by column, so that neighbouring blocks share A and B
    tiles. With tiles_m even, every group has an even number of rows, so tiles 2i and 2i + 1 are
    neighbouring rows of one column: the two blocks of a cluster."""
    group = tile // (RASTER_GROUP * tiles_n)
    rows = tvm.tirx.min(tiles_m - group * RASTER_GROUP, RASTER_GROUP)
    return group * RASTER_GROUP + tile % (RASTER_GROUP * tiles_n) % rows, tile % (RASTER_GROUP * tiles_n) // rows


def schedule(workload: Matmul, k: MatmulHopperKnobs) -> Schedule:
    """The kernel as a module (a Schedule with an empty trace: it is written, not scheduled)."""
    plan = check_knobs(workload, k)
    return Schedule(tvm.IRModule({"main": parsed_kernel(plan)}))


def kernel(p: Plan):  # noqa: PLR0915 - one kernel, read top to bottom
    k_ = p.k_
    dtype, M, N, K = p.dtype, p.m, p.n, p.k
    BM, BN, BK, STAGES, W, S = k_.block_m, k_.block_n, k_.block_k, k_.stages, p.atom, p.row_bytes
    MT, NACC, SW, WS = p.m_tiles, p.accumulators // p.m_tiles, p.swizzle_code, k_.warp_specialize
    PRODUCERS = int(WS)  # warpgroups before the first consumer
    CLUSTER, B_ROWS = k_.cluster, p.b_rows
    TILES_M, TILES_N = p.tiles
    TILES, GRID, KT = TILES_M * TILES_N, p.blocks, K // BK
    ITERS = -(-TILES // GRID)  # tiles per block
    A_CHUNKS, B_CHUNKS = BK // W, BN // W
    AB = SUPPORTED_DTYPES[dtype]
    WGMMA = f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{BN}k{WGMMA_K}.f32.{AB}.{AB}"
    # A is K-major (rows of K), B is N-major (rows of N): each box is one swizzled row wide,
    # and B's box as high as the rows one CTA copies (in a cluster, its half of block_k).
    A_MAP = tensor_map_2d(K, M, W, BM, SW)
    B_MAP = tensor_map_2d(N, K, W, B_ROWS, SW)
    # Descriptor strides, in 16-byte units: 8 swizzled rows make one swizzle atom (SBO); B's
    # atoms side by side along N are one block_k-row column of buffer apart (LBO).
    SBO, B_LBO = 8 * S // 16, BK * S // 16
    CONSUMER_REGS = CONSUMER_REGISTERS[k_.consumers]

    def a_step(m: int, kk: int) -> int:
        """Descriptor offset (16-byte units) of wgmma tile m, reduction step kk, in A's buffer
        (laid out [block_k / atom][block_m][atom])."""
        return k_major_offset(kk * WGMMA_K, BM, m * WGMMA_M, S)

    def b_step(kk: int) -> int:
        """... of step kk in B's buffer (laid out [block_n / atom][block_k][atom])."""
        return mn_major_offset(kk * WGMMA_K, S)

    @T.inline
    def load(j, bx, rank, A_map, B_map, A_smem, B_smem, full, empty):
        # Step j of this block's (tile, k-step) sequence into buffer j % STAGES, once the
        # consumers (of both CTAs, in a cluster) have released that buffer's previous use (a
        # fresh barrier passes parity 1). The full barrier expects the whole stage, whoever copies it.
        tm, tn = T.meta_var(tile_origin(bx + j // KT * GRID, TILES_M, TILES_N))
        s = T.meta_var(j % STAGES)
        T.cuda.mbarrier_wait(empty.ptr_to([s]), j // STAGES % 2 ^ 1)
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(full.ptr_to([s]), T.uint32(p.stage_bytes))
        for c in T.unroll(A_CHUNKS):
            T.ptx[TMA_LOAD](A_smem.ptr_to([s, c, 0, 0]), T.address_of(A_map),
                            j % KT * BK + c * W, tm * BM, full.ptr_to([s]))
        if CLUSTER > 1:
            # This CTA's rows of B's tile, written at the same offsets into both CTAs, each
            # completing the bytes it receives on its own full barrier s.
            for c in T.unroll(B_CHUNKS):
                T.ptx[TMA_MULTICAST](B_smem.ptr_to([s, c, rank * B_ROWS, 0]), T.address_of(B_map),
                                     tn * BN + c * W, j % KT * BK + rank * B_ROWS, full.ptr_to([s]),
                                     T.uint16(CLUSTER_MASK))
        else:
            for c in T.unroll(B_CHUNKS):
                T.ptx[TMA_LOAD](B_smem.ptr_to([s, c, 0, 0]), T.address_of(B_map),
                                tn * BN + c * W, j % KT * BK, full.ptr_to([s]))

    @T.inline
    def release(empty, s, rank, tx):
        # This consumer thread no longer reads buffer s. In a cluster the other CTA's copies
        # write into it too, so one lane per warp also arrives, for its warp, on the other
        # CTA's empty barrier s (mapa: its address as seen from there).
        T.ptx.mbarrier.arrive.shared.b64(empty.ptr_to([s]), T.uint32(1))
        if CLUSTER > 1:
            if tx % WARP_SIZE == 0:
                peer = T.alloc_buffer((1,), "uint32", scope="local")
                T.ptx.mapa.shared__cluster.u32(peer[0], T.cuda.cvta_generic_to_shared(empty.ptr_to([s])),
                                               T.uint32(rank ^ 1))
                T.ptx.mbarrier.arrive.shared__cluster.b64(peer[0], T.uint32(WARP_SIZE))

    @T.inline
    def store_float32(C, row, col, acc, m, i):
        # Columns col and col + 1 of rows row and row + 8: one 8-byte store per row.
        T.ptx["st.global.v2.f32"](C.ptr_to([row, col]), acc[m, i * 4], acc[m, i * 4 + 1])
        T.ptx["st.global.v2.f32"](C.ptr_to([row + 8, col]), acc[m, i * 4 + 2], acc[m, i * 4 + 3])

    @T.inline
    def store_rounded(C, row, col, acc, m, i):
        # The same pairs rounded to 16 bits: one 4-byte store per row. cvt puts its first
        # value in the upper half of the word, the higher address: column col + 1.
        packed = T.alloc_buffer((2,), "uint32", scope="local")
        T.ptx[PACK_TWO[p.out_dtype]](packed[0], acc[m, i * 4 + 1], acc[m, i * 4])
        T.ptx[PACK_TWO[p.out_dtype]](packed[1], acc[m, i * 4 + 3], acc[m, i * 4 + 2])
        T.ptx["st.global.b32"](C.ptr_to([row, col]), packed[0])
        T.ptx["st.global.b32"](C.ptr_to([row + 8, col]), packed[1])

    store = store_float32 if p.out_dtype == "float32" else store_rounded

    @T.prim_func
    def main(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (M, K), dtype, align=16)
        B = T.match_buffer(B_ptr, (K, N), dtype, align=16)
        C = T.match_buffer(C_ptr, (M, N), p.out_dtype, align=16)
        # The host encodes one TMA descriptor per operand; the kernel receives them by value.
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, dtype, 2, A.data, *A_MAP)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, dtype, 2, B.data, *B_MAP)
        T.device_entry()
        bx = T.cta_id([GRID])
        tx = T.thread_id([p.threads])
        if CLUSTER > 1:
            rank = T.cta_id_in_cluster([CLUSTER])  # 0 or 1: the upper or lower of the pair's tile rows
        else:
            rank = T.meta_var(0)
        pool = T.SMEMPool()
        A_smem = pool.alloc((STAGES, A_CHUNKS, BM, W), dtype, align=1024)  # swizzle atoms: 1024-byte aligned
        B_smem = pool.alloc((STAGES, B_CHUNKS, BK, W), dtype, align=1024)
        full = pool.alloc((STAGES,), "uint64", align=8)
        empty = pool.alloc((STAGES,), "uint64", align=8)
        pool.commit()
        acc = T.alloc_buffer((MT, NACC), "float32", scope="local")
        desc = T.alloc_buffer((2,), "uint64", scope="local")  # wgmma's shared-memory descriptors of A and B
        if tx == 0:
            for s in T.unroll(STAGES):
                T.ptx.mbarrier.init.shared.b64(full.ptr_to([s]), T.uint32(1))  # the producer's expect_tx
                T.ptx.mbarrier.init.shared.b64(empty.ptr_to([s]), T.uint32(k_.consumers * WARPGROUP * CLUSTER))
        T.ptx.fence.proxy.async_.shared__cta()  # the barriers are visible to the TMA unit
        if CLUSTER > 1:
            # ... and to the other CTA, before its first copy or arrive reaches them.
            T.ptx.fence.mbarrier_init.release.cluster()
            T.ptx.barrier.cluster.arrive()
            T.ptx.barrier.cluster.wait()
        else:
            T.cuda.cta_sync()

        if WS and tx < WARPGROUP:
            # The producer warpgroup: one thread walks every step of every tile of this block.
            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGISTERS)
            if tx == 0:
                for j in T.serial(ITERS * KT):
                    if bx + j // KT * GRID < TILES:
                        load(j, bx, rank, A_map, B_map, A_smem, B_smem, full, empty)
        else:
            if WS:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
            wg = T.meta_var(tx // WARPGROUP - PRODUCERS)  # this consumer's slab: rows wg·(block_m / consumers) ...
            if not WS:
                if tx == 0:
                    for j in T.serial(STAGES - 1):
                        if bx + j // KT * GRID < TILES:
                            load(j, bx, rank, A_map, B_map, A_smem, B_smem, full, empty)
            for it in T.serial(ITERS):
                tile = T.meta_var(bx + it * GRID)
                if tile < TILES:
                    tm, tn = T.meta_var(tile_origin(tile, TILES_M, TILES_N))
                    for m in T.unroll(MT):
                        for i in T.unroll(NACC):
                            acc[m, i] = T.float32(0)
                    for kt in T.serial(KT):
                        g = T.meta_var(it * KT + kt)
                        s = T.meta_var(g % STAGES)
                        T.cuda.mbarrier_wait(full.ptr_to([s]), g // STAGES % 2)
                        T.cuda.warp_sync()  # .aligned: the warp's threads (one of them may have copied) together
                        T.ptx.wgmma.fence.sync.aligned()
                        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[0]),
                                                              A_smem.ptr_to([s, 0, wg * MT * WGMMA_M, 0]), 1, SBO, SW)
                        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[1]), B_smem.ptr_to([s, 0, 0, 0]),
                                                              B_LBO, SBO, SW)
                        for kk in T.unroll(BK // WGMMA_K):
                            for m in T.unroll(MT):
                                # D += A·B; B is N-major in shared memory, hence its transpose flag.
                                T.ptx[WGMMA](*[acc[m, i] for i in range(NACC)],
                                             desc[0] + T.uint64(a_step(m, kk)), desc[1] + T.uint64(b_step(kk)),
                                             T.bool(True), 1, 1, 0, 1)
                        T.ptx.wgmma.commit_group.sync.aligned()
                        # Keep this step's multiplies in flight; the previous step's are done,
                        # so its buffer goes back to the producer.
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if kt > 0:
                            release(empty, (g - 1) % STAGES, rank, tx)
                        if not WS:
                            if tx == 0:
                                if bx + (g + STAGES - 1) // KT * GRID < TILES:
                                    load(g + STAGES - 1, bx, rank, A_map, B_map, A_smem, B_smem, full, empty)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    release(empty, (it * KT + KT - 1) % STAGES, rank, tx)
                    # wgmma's accumulator layout: warp w of the group holds rows 16w .. 16w + 15,
                    # lane l rows l / 4 and l / 4 + 8, columns 2 (l % 4) and the next, every 8 columns:
                    # each pair of neighbours leaves in one store.
                    for m in T.unroll(MT):
                        for i in T.unroll(NACC // 4):
                            row = T.meta_var(tm * BM + (wg * MT + m) * WGMMA_M + tx % WARPGROUP // 32 * 16
                                             + tx % 32 // 4)
                            col = T.meta_var(tn * BN + i * 8 + tx % 4 * 2)
                            store(C, row, col, acc, m, i)
        if CLUSTER > 1:
            # No CTA exits while the other may still arrive on its empty barriers.
            T.ptx.barrier.cluster.arrive()
            T.ptx.barrier.cluster.wait()

    return main


TEMPLATE = Template(
    name="matmul_hopper",
    title="Matmul — Hopper tensor cores (TMA + mbarrier pipeline + wgmma, warp-specialized; fp16/bf16)",
    summary="A kernel written in TVM's TIRx dialect: TMA copies tiles into swizzled shared buffers guarded by "
            "full/empty mbarriers, consumer warpgroups multiply them with wgmma straight from shared memory, a "
            "producer warpgroup keeps the ring full.",
    workload=Matmul,
    knobs=MatmulHopperKnobs,
    apply=schedule,
    tag_knobs={"blockIdx.x": ("block_m", "block_n", "persistent", "cluster"),
               "clusterCtaIdx.x": ("cluster",), "threadIdx.x": ("consumers", "warp_specialize")},
    shared_knobs=("block_m", "block_n", "block_k", "stages"),
    workload_defaults={"dtype": "float16"},
    pipeline="tirx",
    archs=("sm_90a",),
    tensor_cores=True,
)


parsed_kernel = parsed_once_per_plan(kernel)  # its T.inline calls ask inspect for the stack each

"""fp32 matmul the way Ampere/Hopper SGEMMs are written: warp tiles, cp.async and an N-stage pipeline.

A CUDA block computes a ``block_m × block_n`` tile of C with ``(block_m / warp_m) × (block_n /
warp_n)`` warps; each warp computes a ``warp_m × warp_n`` tile with its 32 threads, each
thread a ``thread_m × thread_n`` register tile — so ``(warp_m / thread_m) · (warp_n /
thread_n)`` must be 32. The reduction walks K in ``block_k`` slices: every slice of A and B is
copied to shared memory by all threads together, ``fetch_vector`` elements per copy.

``stages`` > 1 gives each shared tile that many buffers and turns the reduction loop into a
software pipeline: the copies of slice ``ko + stages - 1`` are issued while slice ``ko`` is
multiplied. With ``async_copy`` the copies are ``cp.async`` instructions (sm_80 and newer):
they go from global to shared memory without passing through registers and without blocking
the thread, which waits for them (``cp.async.wait_group``) only when it needs the data.
Several stages need more shared memory than the 48 KB a block gets statically:
``dynamic_shared`` allocates it dynamically (up to 227 KB per block on the H100, by opt-in).

Inside a step, each thread reads its column of A and row of B from shared memory into
registers, one ``k`` at a time, and multiplies them into its tile. ``register_double_buffer``
pipelines that inner loop as well, two register copies deep: the reads for ``k + 1`` are
issued before the multiply-adds of ``k``, so their latency hides behind arithmetic.

``split_k`` > 1 cuts K into slices, each summed by its own blocks (``blockIdx.z``) into a
buffer of partial sums, which a second small kernel adds (TVM's ``rfactor``): more blocks
when M × N alone gives too few to fill the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..targets import WARP_SIZE
from ..workloads import DTYPE, Matmul
from .common import (
    Template,
    async_copy_knob,
    bind,
    check_pipeline,
    cooperative_fetch,
    dynamic_shared_knob,
    new_schedule,
    pipeline,
    prefetch_registers,
    rfactor_slices,
    schedule_errors,
    stages_knob,
    sum_partials,
    unroll,
    unroll_max_step_knob,
)

TILES = (8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class MatmulAsyncKnobs(KnobSet):

    block_m: int = knob(128, "Rows of C computed by one CUDA block.", choices=TILES)
    block_n: int = knob(128, "Columns of C computed by one CUDA block.", choices=TILES)
    block_k: int = knob(16, "Reduction step: columns of A and rows of B staged in shared memory per step.",
                        choices=(4, 8, 16, 32, 64))
    warp_m: int = knob(32, "Rows of C computed by one warp (32 threads).", choices=TILES)
    warp_n: int = knob(64, "Columns of C computed by one warp.", choices=TILES)
    thread_m: int = knob(8, "Rows of C each thread computes (its register tile).", choices=(1, 2, 4, 8, 16))
    thread_n: int = knob(8, "Columns of C each thread computes.", choices=(1, 2, 4, 8, 16))
    split_k: int = knob(1, "Slices of the reduction (K), each summed by its own blocks: split_k times more blocks "
                        "when M × N gives too few to fill the GPU; a second kernel adds the partial sums. "
                        "1 = one kernel, no partial sums.", choices=(1, 2, 4, 8, 16))
    stages: int = stages_knob()
    async_copy: bool = async_copy_knob()
    fetch_vector: int = knob(4, "Elements per copy instruction (4 = 16 bytes, cp.async's widest).",
                             choices=(1, 2, 4))
    transpose_a: bool = knob(True, "Store A's shared tile K-major (block_k × block_m), so that a thread's rows "
                             "of A are contiguous and read as vectors; the copy then transposes, one "
                             "element per copy instruction (cp.async cannot scatter a vector).")
    read_vector: int = knob(4, "Elements each thread reads per instruction from shared memory into its "
                            "register tiles: B always, A when transpose_a is on.", choices=(1, 2, 4))
    store_vector: int = knob(1, "Elements of C each thread writes per store instruction (4 = 16 bytes): fewer "
                             "stores, each filling whole 32-byte sectors of memory.", choices=(1, 2, 4))
    register_double_buffer: bool = knob(False, "Two copies of the registers that hold a thread's values of A and "
                                        "B: while the multiply-adds use one copy, the next k's values are read "
                                        "from shared memory into the other, so the thread does not wait for its "
                                        "reads. The loop over k inside a step is then unrolled, which keeps both "
                                        "copies in registers.")
    shared_pad: int = knob(4, "Elements added to each row of the shared tiles, so that the transposed "
                           "stores of A and the reads of a warp spread over the memory banks; 0 = none.",
                           choices=(0, 1, 2, 4, 8))
    dynamic_shared: bool = dynamic_shared_knob()
    unroll_max_step: int = unroll_max_step_knob()


def warps_per_block(k: MatmulAsyncKnobs) -> tuple[int, int]:
    return k.block_m // k.warp_m, k.block_n // k.warp_n


def lanes_per_warp(k: MatmulAsyncKnobs) -> tuple[int, int]:
    return k.warp_m // k.thread_m, k.warp_n // k.thread_n


def shared_tile_bytes(workload: Matmul, k: MatmulAsyncKnobs) -> int:
    """Shared memory of all stages: A's block_k × block_m and B's block_k × block_n tiles, padded."""
    return 4 * k.stages * k.block_k * (k.block_m + k.block_n + 2 * k.shared_pad)


def check_knobs(workload: Matmul, k: MatmulAsyncKnobs) -> None:
    if workload.dtype != DTYPE:
        raise InvalidKnobs(f"This template multiplies float32 matrices; for {workload.dtype} inputs use the "
                           f"tensor-core template (matmul_tensorcore).", ())
    for block, warp, thread in (("block_m", "warp_m", "thread_m"), ("block_n", "warp_n", "thread_n")):
        b, w, t = getattr(k, block), getattr(k, warp), getattr(k, thread)
        if b % w:
            raise InvalidKnobs(f"The warp tile does not divide the block tile: {block} = {b} is not a multiple "
                               f"of {warp} = {w}.", (block, warp))
        if w % t:
            raise InvalidKnobs(f"{warp} = {w} is not a multiple of {thread} = {t}: the threads of a warp "
                               f"cannot share the warp tile evenly.", (warp, thread))
    rows, cols = lanes_per_warp(k)
    if rows * cols != WARP_SIZE:
        raise InvalidKnobs(
            f"A warp has 32 threads, but its tile gives {rows} × {cols} = {rows * cols} "
            f"(warp_m / thread_m × warp_n / thread_n); choose tiles whose ratio product is 32.",
            ("warp_m", "warp_n", "thread_m", "thread_n"))
    for dim, block in (("m", "block_m"), ("n", "block_n"), ("k", "block_k")):
        if getattr(workload, dim) % getattr(k, block):
            raise InvalidKnobs(f"{block} = {getattr(k, block)} does not divide {dim} = {getattr(workload, dim)}: "
                               f"this template has no guard for partial tiles.", (block,))
    if workload.k % (k.split_k * k.block_k):
        raise InvalidKnobs(f"split_k × block_k = {k.split_k} × {k.block_k} does not divide k = {workload.k}: "
                           f"each slice of the reduction must hold whole steps of block_k.", ("split_k", "block_k"))
    check_pipeline(k)
    if k.async_copy and k.fetch_vector * 4 not in (4, 8, 16):
        raise InvalidKnobs("cp.async copies 4, 8 or 16 bytes at once.", ("fetch_vector",))
    _check_vectors(k)


def _check_vectors(k: MatmulAsyncKnobs) -> None:
    """Vector copies and reads need whole vectors in each row and rows aligned to the vector:
    a misaligned 16-byte cp.async or float4 load faults at run time."""
    fetched = {"block_n": k.block_n, "shared_pad": k.shared_pad} | ({} if k.transpose_a else {"block_k": k.block_k})
    read = {"thread_n": k.thread_n, "shared_pad": k.shared_pad} | ({"thread_m": k.thread_m} if k.transpose_a else {})
    checks = (("fetch_vector", k.fetch_vector, fetched), ("read_vector", k.read_vector, read),
              ("store_vector", k.store_vector, {"thread_n": k.thread_n}))
    for name, v, sizes in checks:
        bad = [n for n, size in sizes.items() if size % v]
        if bad:
            listed = ", ".join(f"{n} = {sizes[n]}" for n in bad)
            raise InvalidKnobs(f"{name} = {v} moves {v} consecutive elements at once, but {listed} "
                               f"{'is' if len(bad) == 1 else 'are'} not a multiple of {v}: the vectors would "
                               f"straddle rows or be misaligned.", (name, *bad))


def schedule(workload: Matmul, k: MatmulAsyncKnobs):
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Matmul, k: MatmulAsyncKnobs):
    sch = new_schedule(workload)
    c = sch.get_sblock("C")
    if k.split_k > 1:
        # K's outer loop becomes a spatial axis of a partial-sum block ("C_rf", one
        # partial per slice); "C" then adds the partials in a second kernel.
        partial = rfactor_slices(sch, sch.get_loops(c)[2], k.split_k)
        _schedule_products(sch, k, partial)
        sum_partials(sch, c)
    else:
        _schedule_products(sch, k, c)
    return sch


def _schedule_products(sch, k: MatmulAsyncKnobs, c) -> None:
    """Block, warp and thread tiles of C (or of one slice of K's partial sums), fed by pipelined shared tiles."""
    scope = "shared.dyn" if k.dynamic_shared else "shared"
    output = sch.cache_write(c, 0, "local")
    a_shared = sch.cache_read(c, 0, scope)
    b_shared = sch.cache_read(c, 1, scope)
    if k.transpose_a:
        sch.transform_layout(a_shared, ("write", 0), lambda i, r: (r, i))
    registers = [sch.cache_read(c, i, "local") for i in (0, 1)]
    lane = _bind_tiles(sch, k, output)
    if k.store_vector > 1:  # the write-back's innermost loop walks a row of the thread's tile
        sch.vectorize(sch.split(sch.get_loops(output)[-1], factors=[None, k.store_vector])[1])

    sch.compute_at(c, lane, preserve_unit_loops=True)
    *_, ci, cj, kk = sch.get_loops(c)
    ko, ki = sch.split(kk, factors=[None, k.block_k])
    sch.reorder(ko, ki, ci, cj)
    for operand, stage in enumerate(registers):
        sch.compute_at(stage, ki)
        if k.read_vector > 1 and (operand == 1 or k.transpose_a):
            inner = sch.get_loops(stage)[-1]
            sch.vectorize(sch.split(inner, factors=[None, k.read_vector])[1])
    warps_y, warps_x = warps_per_block(k)
    threads = [("threadIdx.y", warps_y * warps_x), ("threadIdx.x", WARP_SIZE)]
    # A transposed: consecutive elements of a global row land a shared row apart, so one per copy.
    a_copy = (k.block_m, 1) if k.transpose_a else (k.block_k, k.fetch_vector)
    for stage, (row, vector) in ((a_shared, a_copy), (b_shared, (k.block_n, k.fetch_vector))):
        sch.compute_at(stage, ko)
        if k.shared_pad:
            sch.storage_align(stage, 0, axis=0, factor=row + k.shared_pad, offset=0)
        cooperative_fetch(sch, stage, ko, threads, vector=vector)
    sch.decompose_reduction(c, ko)
    if k.register_double_buffer:
        prefetch_registers(sch, ki)  # ki's body: [read A's registers, read B's registers, multiply]
    # ko's body: [copy A, copy B, multiply], the multiply pipelined itself with register_double_buffer.
    pipeline(sch, ko, k.stages, k.async_copy, nested=k.register_double_buffer)
    unroll(sch, lane, k.unroll_max_step)


def _bind_tiles(sch, k: MatmulAsyncKnobs, output):
    """Split C's rows and columns into block, warp and lane tiles, bind them (a slice of K, where
    split-K adds that loop, to blockIdx.z) and return the lane loop, under which each thread
    computes its register tile."""
    warps_y, warps_x = warps_per_block(k)
    lanes_y, lanes_x = lanes_per_warp(k)
    *slices, i, j = sch.get_loops(output)
    by, wy, ly, yi = sch.split(i, factors=[None, warps_y, lanes_y, k.thread_m])
    bx, wx, lx, xi = sch.split(j, factors=[None, warps_x, lanes_x, k.thread_n])
    sch.reorder(*slices, by, bx, wy, wx, ly, lx, yi, xi)
    warp = sch.fuse(wy, wx)
    lane = sch.fuse(ly, lx)
    tags = ((by, "blockIdx.y"), (bx, "blockIdx.x"), (warp, "threadIdx.y"), (lane, "threadIdx.x"))
    for loop, tag in (*((s, "blockIdx.z") for s in slices), *tags):
        bind(sch, loop, tag)
    return lane


TEMPLATE = Template(
    name="matmul_async",
    title="Matmul — warp tiles, cp.async and a multi-stage pipeline (fp32)",
    summary="Block, warp and thread tiles; shared tiles filled by cp.async copies that run stages − 1 "
            "reduction steps ahead of the multiply-adds; vector reads into register tiles, optionally double "
            "buffered; split-K slices whose partial sums a second kernel adds.",
    workload=Matmul,
    knobs=MatmulAsyncKnobs,
    apply=schedule,
    tag_knobs={
        "blockIdx.z": ("split_k",),
        "blockIdx.y": ("block_m",),
        "blockIdx.x": ("block_n",),
        "threadIdx.y": ("block_m", "block_n", "warp_m", "warp_n"),
        "threadIdx.x": ("warp_m", "warp_n", "thread_m", "thread_n"),
    },
    shared_knobs=("block_m", "block_n", "block_k", "stages", "shared_pad", "dynamic_shared"),
)

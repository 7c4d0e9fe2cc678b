"""The loop over tiles of the kernels that multiply on the tensor cores (attention_mma,
attention_hopper, matmul_hopper): what the rules of pipelining, warp specialization, the online
softmax and register pressure read (:class:`TileLoop`).

Each step of such a kernel's loop copies a tile (K and V, or A and B) into one buffer of a ring of
``stages`` shared buffers and multiplies it on the tensor cores; the attention kernels run the
online softmax of the step's scores on the CUDA cores in between. The counts come from the
template's own plan (its tiles and loop), as the copies are cp.async or TMA instructions that the
lowered TIR's access analysis does not follow. :class:`FmaLoop` is the same for fused attention on
the CUDA cores (attention_fused): its inner loops' multiply-adds, loads and conversions.

The timing model the tile-loop rules share is below (:func:`product_us`, :func:`exposed_softmax_us`,
:func:`copy_wait_us`): per SM, the products, the softmax that other streams do not hide, and the
copies that arrive after the steps they run ahead of; its constants are assumptions, and each rule's
share of it is scaled by the calibration (:mod:`.calibration`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...build import Build
from ...schedules import attention_fused, attention_hopper, attention_mma, matmul_hopper
from ...schedules.attention_fused import key_tiles
from ...targets import WARP_SIZE
from ..roofline import Ceilings

ELEMENT_BYTES = 2  # the tensor cores' 16-bit inputs


@dataclass(frozen=True)
class TileLoop:
    instruction: str  # "wgmma" or "mma.sync"
    steps: int  # steps of the loop, all blocks together (a causal block stops at its diagonal)
    step_flops: int  # tensor-core FLOPs of one step of one block
    step_bytes: int  # bytes one step copies into shared memory (a K and a V tile; an A and a B tile)
    stages: int  # buffers in the ring
    producer: bool  # a warpgroup that only issues the copies (warp specialization)
    consumers: int  # per block: the warpgroups (wgmma) or warps (mma.sync) that multiply, each on its own rows
    overlap: bool = False  # a tile's softmax runs while the tensor cores multiply the previous tile's P·V
    scores: int = 0  # attention: scores of one step of one block, each an exponential on the CUDA cores
    rescaled: int = 0  # attention: O's accumulators rescaled by exp(m − m') in one step of one block
    fragments: int = 0  # 32-bit registers per thread that the accumulators and fragments take
    peak_gflops: float = 0.0  # the tensor cores' peak for these inputs (0: not known)

    @property
    def flops(self) -> int:
        return self.steps * self.step_flops

    @property
    def tensor_us(self) -> float:
        """The loop's products at the tensor cores' peak, every SM busy (0 where the peak is not known)."""
        return self.flops / (self.peak_gflops * 1e3) if self.peak_gflops else 0.0

    def streams(self, resident_blocks: int) -> int:
        """Independent sequences of product-then-softmax on one SM: each consumer of each block
        resident there, twice with overlap (a warpgroup's softmax of one tile beside its product of
        another)."""
        return resident_blocks * self.consumers * (2 if self.overlap else 1)


def tile_loop(built: Build, ceilings: Ceilings) -> TileLoop | None:
    """The tile loop of ``built`` for the templates that have one, else None."""
    spec = built.spec
    knobs, workload = spec.knobs, spec.workload
    peak = ceilings.tensor_peak(workload.input_dtypes()[0]) or 0.0
    if isinstance(knobs, attention_hopper.AttentionHopperKnobs):
        plan = attention_hopper.check_knobs(workload, knobs)
        return TileLoop("wgmma", _attention_steps(workload, plan.block_q, knobs.block_kv),
                        _attention_step_flops(plan.block_q, knobs.block_kv, workload.head_dim),
                        plan.stage_bytes, knobs.stages, knobs.warp_specialize, knobs.consumers, knobs.overlap,
                        plan.block_q * knobs.block_kv, plan.block_q * workload.head_dim, plan.fragment_registers,
                        peak)
    if isinstance(knobs, attention_mma.AttentionMmaKnobs):
        plan = attention_mma.check_knobs(workload, knobs)
        return TileLoop("mma.sync", _attention_steps(workload, knobs.block_q, knobs.block_kv),
                        _attention_step_flops(knobs.block_q, knobs.block_kv, workload.head_dim),
                        2 * knobs.block_kv * workload.head_dim * ELEMENT_BYTES, knobs.stages, False,
                        knobs.warps, False, knobs.block_q * knobs.block_kv, knobs.block_q * workload.head_dim,
                        plan.registers_per_thread, peak)
    if isinstance(knobs, matmul_hopper.MatmulHopperKnobs):
        plan = matmul_hopper.check_knobs(workload, knobs)
        tiles_m, tiles_n = plan.tiles
        return TileLoop("wgmma", tiles_m * tiles_n * (workload.k // knobs.block_k),
                        2 * knobs.block_m * knobs.block_n * knobs.block_k, plan.stage_bytes, knobs.stages,
                        knobs.warp_specialize, knobs.consumers, fragments=plan.accumulators, peak_gflops=peak)
    return None


@dataclass(frozen=True)
class FmaLoop:
    """Fused attention on the CUDA cores (attention_fused): per step of its loop over key tiles, each
    thread's multiply-adds, the other instructions of its inner loops (loads and conversions to float32)
    and, where each thread reads K from global memory itself, the L1 wavefronts of those loads."""

    steps: int  # key tiles walked, all blocks together
    threads: int  # per block
    fmas: int  # per thread and step: both products
    others: int  # per thread and step: the inner loops' loads and conversions
    k_wavefronts: int  # per warp and step: L1 wavefronts of K's loads from global memory (0: K in shared)
    fp32_gflops: float  # the CUDA cores' peak the multiply-adds run at

    @property
    def fma_us(self) -> float:
        """The loop's multiply-adds at the FP32 peak, every SM busy."""
        return self.steps * self.threads * self.fmas * 2 / (self.fp32_gflops * 1e3)

    @property
    def wavefronts(self) -> int:
        """L1 wavefronts of K's loads from global memory, all blocks together."""
        return self.steps * -(-self.threads // WARP_SIZE) * self.k_wavefronts


def fma_loop(built: Build, ceilings: Ceilings) -> FmaLoop | None:
    """The inner loops of attention_fused (its kernel's steps 1 and 3, per thread and key tile), else None.
    Step 1, per VEC columns of head_dim: rows_per_thread loads of Q and keys loads of K; step 3, per VEC
    keys: rows_per_thread loads of P, and per key its columns' loads of V. A 16-bit element is converted to
    float32 each time it is used, unless float_tiles converted it into shared memory. Without kv_shared the
    lanes of a row read threads_per_row different rows of K at once: as many L1 wavefronts per load."""
    knobs, workload = built.spec.knobs, built.spec.workload
    if not isinstance(knobs, attention_fused.AttentionFusedKnobs):
        return None
    plan = attention_fused.check_knobs(workload, knobs)
    rows, keys, columns = knobs.rows_per_thread, plan.keys_per_thread, plan.columns_per_thread
    d, kv, vec = workload.head_dim, knobs.block_kv, knobs.vector
    converted_q, converted_kv = not knobs.float_tiles, not (knobs.float_tiles and knobs.kv_shared)
    scores = d // vec * (rows + keys) + d * (rows * converted_q + keys * converted_kv)
    output = kv // vec * rows + kv * columns * (1 + converted_kv)
    k_wavefronts = 0 if knobs.kv_shared else keys * (d // vec) * min(knobs.threads_per_row, WARP_SIZE)
    return FmaLoop(_attention_steps(workload, knobs.block_q, kv), plan.threads,
                   rows * keys * d + rows * columns * kv, scores + output, k_wavefronts,
                   ceilings.fp32_gflops)


def _attention_steps(workload, block_q: int, block_kv: int) -> int:
    per_head = sum(key_tiles(t, block_q, block_kv, workload.seq, workload.causal)
                   for t in range(workload.seq // block_q))
    return workload.batch * workload.heads * per_head


def _attention_step_flops(block_q: int, block_kv: int, head_dim: int) -> int:
    """Both products of one step: S = Q·Kᵀ and O += P·V, block_q × block_kv × head_dim multiply-adds each."""
    return 2 * 2 * block_q * block_kv * head_dim


# -- the timing model the tile-loop rules share -------------------------------------------------------------------

SFU_PER_SM = 16  # exponentials (MUFU.EX2) an SM issues per cycle: 4 per sub-partition (sm_80, sm_90)
# FP32 instructions per score beside its exponential: the scaled subtraction of the row maximum, the maximum, the
# row sum and the conversion of P to 16 bits (an assumption of the model).
SOFTMAX_OPS = 4
MMA_SYNC_SHARE = 0.6  # of the tensor cores' peak that mma.sync reaches on sm_90, whose full rate needs wgmma
COPY_LATENCY_CYCLES = 1000  # from a copy's issue (TMA or cp.async) to its first bytes in shared memory, from L2
FILL_BYTES_PER_CYCLE = 64  # bytes per cycle that one SM's shared memory receives from the L2


def product_us(f) -> float:
    """The loop's products on its instruction: the tensor cores' peak for wgmma; mma.sync reaches
    :data:`MMA_SYNC_SHARE` of it on sm_90."""
    loop = f.loop
    return loop.tensor_us / (MMA_SYNC_SHARE if loop.instruction == "mma.sync" and f.device.arch >= 90 else 1.0)


def softmax_parts_us(f) -> tuple[float, float]:
    """(the exponentials and their FP32 instructions, the rescaling of O) of every step, on the CUDA cores
    of every SM: what the online softmax adds to the products where nothing runs beside it."""
    loop, d = f.loop, f.device
    exp = loop.steps * loop.scores * (1 / SFU_PER_SM + SOFTMAX_OPS / d.fp32_lanes)
    return d.cycles_us(exp), d.cycles_us(loop.steps * loop.rescaled / d.fp32_lanes)


def exposed_softmax_us(f) -> float:
    """The softmax's time that the products do not hide: all of it beyond the products', and of the rest
    the share that one stream of the SM's streams (:meth:`TileLoop.streams`) leaves exposed."""
    softmax, products = sum(softmax_parts_us(f)), product_us(f)
    return max(0.0, softmax - products) + min(softmax, products) / f.loop.streams(f.resident_blocks)


def ahead(loop: TileLoop, producer: bool | None = None) -> float:
    """Tiles the copies run ahead of the multiplies: the ring's buffers less the one being multiplied; half
    a tile less with overlap (the previous tile's buffer is released only once its P·V is done) and half a
    tile less where the consumers issue the copies themselves, between their own multiplies."""
    producer = loop.producer if producer is None else producer
    return max(0.0, loop.stages - 1 - 0.5 * loop.overlap - 0.5 * (not producer))


def copy_wait_us(f, tiles_ahead: float) -> float:
    """The time the SMs wait for copies, the copies running ``tiles_ahead`` tiles ahead: per round of steps
    of an SM's resident blocks, a copy's latency and transfer beyond the compute of the steps ahead."""
    loop, d = f.loop, f.device
    resident = f.resident_blocks
    rounds = loop.steps / (d.sms * resident)  # each SM's rounds of one step of each resident block
    round_us = (product_us(f) + exposed_softmax_us(f)) / rounds  # one round on one SM
    copy_us = (COPY_LATENCY_CYCLES + loop.step_bytes / FILL_BYTES_PER_CYCLE) / (d.clock_ghz * 1e3)
    return rounds * max(0.0, copy_us - tiles_ahead * round_us)

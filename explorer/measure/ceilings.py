"""The device's roofline ceilings, measured: FP32 peak, HBM bandwidth, L2-resident bandwidth,
and on a Hopper GPU the tensor cores' peak per 16-bit input type.

Three TIR kernels (te + an ``s_tir`` schedule), each built so that no workload kernel can
beat it on its own resource:

- **stream read** (bandwidth): every thread reads float4s (one 16-byte load, the widest a
  thread issues), ``UNROLL`` of them in flight before it adds any, consecutive threads on
  consecutive float4s (coalesced), and keeps one float. For HBM the buffer is 1 GiB (far
  larger than any L2) and read once; for L2 it is a few MiB read many times, each pass
  shifted by an odd number of blocks so that a thread never rereads what its own SM's L1
  holds.
- **FMA** (compute): ``CHAINS`` independent multiply-adds per thread on registers, so the
  FP32 pipes never wait for a result; 2 FLOPs each.
- **wgmma chain** (tensor cores, :mod:`explorer.measure.tensor_roof`): on Hopper only; elsewhere
  the ceilings say why they have no tensor-core peak.

They are timed like a workload kernel (``time_function``: back to back, repeats of
≥ ``min_repeat_us``), once per device: the worker caches them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import te

from ..analysis.roofline import MEASURED, Ceilings
from ..errors import ExplorerError
from .settings import MeasureSettings
from .tensor_roof import LoadExecutable, jit, tensor_peaks_gflops
from .timing import time_function

THREADS = 256
UNROLL = 8  # float4 loads in flight per thread: 128 bytes, enough to cover DRAM latency at full occupancy
VECTOR = 4  # float32 lanes per load: float4
CHAINS = 8  # independent FMA chains per thread: covers the FMA pipe's latency (4 cycles) twice
FMA_SCALE = 0.999  # acc = acc * FMA_SCALE + x converges (to 1000 x): no overflow, nothing to fold away
CPU_CHUNK = 64
L2_SHIFT_BLOCKS = 131  # odd: successive passes land on other blocks, hence other SMs
# Measured once per device whatever the user's settings; the median of 10 repeats of ≥ 1 ms
# is stable to about 1%.
CEILING_SETTINGS = MeasureSettings(repeats=10)


@dataclass(frozen=True)
class Sizes:
    """Kernel sizes: ``threads`` in the grid; the HBM buffer; the L2 buffer (at most this
    many bytes, and at most half the device's L2) and the passes over it; FMA iterations."""

    threads: int
    hbm_bytes: int
    l2_bytes: int
    l2_passes: int
    fma_iterations: int


GPU_SIZES = Sizes(threads=1 << 18, hbm_bytes=1 << 30, l2_bytes=8 << 20, l2_passes=64, fma_iterations=2048)
# A CPU target (tests, --target llvm): the same kernels, sized for a few cores.
CPU_SIZES = Sizes(threads=1 << 12, hbm_bytes=64 << 20, l2_bytes=256 << 10, l2_passes=64, fma_iterations=256)


def stream_read_module(target: tvm.target.Target, float4s: int, threads: int, passes: int,
                       shift: int) -> tvm.IRModule:
    """``out[g] = Σ_p Σ_v src[(g + p·shift) mod float4s, v]``: each thread reads ``passes``
    float4s. With ``shift = threads`` and ``passes·threads = float4s`` every float4 is read
    once; with a smaller buffer, it is read ``passes·threads / float4s`` times."""
    src = te.placeholder((float4s, VECTOR), "float32", name="src")
    p = te.reduce_axis((0, passes), name="p")
    lanes = te.compute((threads, VECTOR), lambda g, v: te.sum(src[(g + p * shift) % float4s, v], axis=p),
                       name="lanes")
    # One float4 load per pass (the lanes vectorized), UNROLL passes in flight.
    return _per_thread_module(target, src, lanes, VECTOR, min(UNROLL, passes), tvm.s_tir.Schedule.vectorize)


def fma_module(target: tvm.target.Target, threads: int, iterations: int) -> tvm.IRModule:
    """``CHAINS`` accumulators per thread, each ``acc = acc·FMA_SCALE + x`` ``iterations``
    times (one fused multiply-add), summed into ``out[g]``."""
    fma = te.comm_reducer(lambda acc, x: acc * tvm.tirx.const(FMA_SCALE, "float32") + x,
                          lambda dtype: tvm.tirx.const(0, dtype), name="fma")
    src = te.placeholder((threads,), "float32", name="src")
    i = te.reduce_axis((0, iterations), name="i")
    chains = te.compute((threads, CHAINS), lambda g, c: fma(src[g] + c.astype("float32"), axis=i), name="chains")
    # The chains unrolled: CHAINS independent FMAs in a row, four steps of each unrolled.
    return _per_thread_module(target, src, chains, CHAINS, 4, tvm.s_tir.Schedule.unroll)


def _per_thread_module(target: tvm.target.Target, src: te.Tensor, values: te.Tensor, lanes: int, unrolled: int,
                       schedule_lanes: Callable) -> tvm.IRModule:
    """The shape of both ceiling kernels: thread ``g`` reduces ``values[g, lane]`` over its own
    reduction axis, reduction outside and lanes inside, in registers; ``unrolled`` reduction steps
    are unrolled and ``schedule_lanes(sch, lane_loop)`` shapes the lanes; ``out[g]`` sums them."""
    out = _total(values, lanes)
    sch = tvm.s_tir.Schedule(te.create_prim_func([src, out]))
    block = sch.get_sblock(values.op.name)
    g, lane, step = sch.get_loops(block)
    sch.reorder(g, step, lane)
    outer = _bind_threads(sch, g, target)
    sch.set_scope(block, 0, "local")
    _place_total(sch, outer)
    steps, inner = sch.split(step, factors=[None, unrolled])
    sch.unroll(inner)
    schedule_lanes(sch, lane)
    sch.decompose_reduction(block, steps)
    return sch.mod


def _total(values: te.Tensor, count: int) -> te.Tensor:
    """``out[g] = Σ_k values[g, k]``: what each thread keeps, so that nothing is dead code."""
    k = te.reduce_axis((0, count), name="k")
    return te.compute((values.shape[0],), lambda g: te.sum(values[g, k], axis=k), name="out")


def _place_total(sch: tvm.s_tir.Schedule, loop) -> None:
    """The sum under the thread's loop, unrolled: nvcc keeps it in a register (the output
    is ``__restrict__``) and stores it once."""
    block = sch.get_sblock("out")
    sch.reverse_compute_at(block, loop)
    sch.unroll(sch.get_loops(block)[-1])


def _bind_threads(sch: tvm.s_tir.Schedule, loop, target: tvm.target.Target):
    """Consecutive threads on consecutive elements; returns the innermost thread loop."""
    if target.kind.name == "cuda":
        bx, tx = sch.split(loop, factors=[None, THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        return tx
    outer, inner = sch.split(loop, factors=[None, CPU_CHUNK])
    sch.parallel(outer)
    return inner


def sizes_for(target: tvm.target.Target) -> Sizes:
    return GPU_SIZES if target.kind.name == "cuda" else CPU_SIZES


def l2_buffer_bytes(sizes: Sizes, device_l2_bytes: int) -> int:
    """A power of two that sits well inside the device's L2 (half of it at most)."""
    limit = min(sizes.l2_bytes, max(device_l2_bytes // 2, 64 << 10))
    return 1 << (limit.bit_length() - 1)


Load = Callable[[tvm.IRModule, str], object]  # (module, name) -> a runtime module on the device


def measure_ceilings(load: Load, device, target: tvm.target.Target, device_name: str, settings: MeasureSettings,
                     sizes: Sizes | None = None, load_executable: LoadExecutable = jit) -> Ceilings:
    """Time the three kernels on ``device``, and the tensor cores where it is a Hopper GPU;
    ``load`` compiles a module there and ``load_executable`` runs a compiled one there
    (locally, or uploaded to a remote server)."""
    sizes = sizes or sizes_for(target)
    n = sizes.threads
    device_l2 = int(getattr(device, "l2_cache_size_bytes", 0) or 0)
    out = tvm.runtime.empty((n,), "float32", device)

    def stream_gbps(nbytes: int, passes: int, shift: int, name: str) -> float:
        float4s = nbytes // (VECTOR * 4)
        module = load(stream_read_module(target, float4s, n, passes, shift), name)
        src = tvm.runtime.empty((float4s, VECTOR), "float32", device)
        timing = time_function(module, device, [src, out], settings)
        return (n * passes * VECTOR * 4 + n * 4) / timing.median_us / 1e3

    hbm_passes = max(1, sizes.hbm_bytes // (n * VECTOR * 4))
    hbm = stream_gbps(hbm_passes * n * VECTOR * 4, hbm_passes, n, "ceiling_hbm")
    l2_bytes = l2_buffer_bytes(sizes, device_l2 or sizes.l2_bytes * 2)
    l2 = stream_gbps(l2_bytes, sizes.l2_passes, THREADS * L2_SHIFT_BLOCKS, "ceiling_l2")
    module = load(fma_module(target, n, sizes.fma_iterations), "ceiling_fma")
    src = tvm.runtime.empty((n,), "float32", device)
    timing = time_function(module, device, [src, out], settings)
    gflops = 2 * n * CHAINS * sizes.fma_iterations / timing.median_us / 1e3
    ceilings = Ceilings(gflops, hbm, l2, device_l2 or l2_bytes * 2, f"{MEASURED} on {device_name}")
    return with_tensor_peaks(ceilings, device, target, device_name, settings, load_executable)


def with_tensor_peaks(ceilings: Ceilings, device, target: tvm.target.Target, device_name: str,
                      settings: MeasureSettings, load_executable: LoadExecutable = jit) -> Ceilings:
    """``ceilings`` with the tensor cores' peaks, or with the reason they have none: a
    failed wgmma chain costs the tensor roof only, never the other ceilings."""
    try:
        peaks = tensor_peaks_gflops(device, target, device_name, settings, load_executable)
    except ExplorerError as reason:
        return dataclasses.replace(ceilings, no_tensor_peak=str(reason))
    return dataclasses.replace(ceilings, tensor_gflops=peaks, no_tensor_peak="")

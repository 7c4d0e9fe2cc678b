"""The tensor cores' peak, measured: a wgmma chain on Hopper (sm_90a), per input type.

As the FP32 ceiling is an FMA chain on registers, this kernel keeps the tensor cores busy
with nothing else: two warpgroups per block, each issuing ``wgmma.m64n256k16`` (the largest
tile one instruction multiplies) ``STEPS`` times per group from a shared tile that never
changes, float32 accumulators in registers, one group in flight while the next is issued,
one block per SM. No copy, barrier or epilogue competes with the multiplies, so no GEMM can
beat it; 2·64·256·16 FLOPs per instruction. The accumulators are summed and stored once so
that nothing is dead code. Written in TVM's TIRx dialect, like the matmul_hopper template.

The ceilings (:mod:`explorer.measure.ceilings`) measure it per input type on a Hopper GPU
and keep it beside the FP32 peak as the compute roof of 16-bit matrix products.
"""
from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm.script import tirx as T

from ..errors import ExplorerError, summary_line
from ..gpus import GPUS
from .settings import MeasureSettings
from .timing import time_function

SUPPORTED = {"float16": "f16", "bfloat16": "bf16"}
WGMMA_M, WGMMA_N, WGMMA_K = 64, 256, 16
WARPGROUPS = 2  # per block: one warpgroup alone leaves the tensor cores idle between its groups
STEPS = 4  # wgmma instructions per commit group (a 64-deep reduction, as a GEMM's k-step)
ACCUMULATORS = WGMMA_M * WGMMA_N // 128  # float32 per thread
SWIZZLE_128B = 3
TILE_ROW_BYTES = 128  # one swizzled row: 64 16-bit elements
SMS = GPUS["H100 SXM"].sms  # blocks: one per SM of an H100 SXM
HOPPER = "9.0"  # compute capability: wgmma exists on sm_90a only
# An ``Executable`` (host and device code) -> its ``main`` runnable on the measured device:
# jitted here, or exported and uploaded to a remote server.
LoadExecutable = Callable[[tvm.runtime.Executable, str], object]


def flops_per_block(iterations: int) -> int:
    return WARPGROUPS * iterations * STEPS * 2 * WGMMA_M * WGMMA_N * WGMMA_K


def wgmma_chain_module(dtype: str, blocks: int = SMS, iterations: int = 4096) -> tvm.IRModule:
    """``out[block, thread]`` = the sum of a thread's accumulators after ``iterations`` groups
    of ``STEPS`` wgmma on zeroed 64 × 64 tiles of A and 64 × 256 of B (the result is 0)."""
    ab = SUPPORTED[dtype]
    wgmma = f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{WGMMA_N}k{WGMMA_K}.f32.{ab}.{ab}"
    threads = WARPGROUPS * 128
    sbo = 8 * TILE_ROW_BYTES // 16  # 8 swizzled rows per atom, in 16-byte units
    b_lbo = 64 * TILE_ROW_BYTES // 16  # B's 64-column atoms: one 64-row column of tile apart
    a_elems, b_elems = WGMMA_M * 64, 64 * WGMMA_N

    @T.prim_func
    def main(out: T.Buffer((blocks, threads), "float32")):
        T.device_entry()
        bx = T.cta_id([blocks])
        tx = T.thread_id([threads])
        A_smem = T.alloc_buffer((a_elems,), dtype, scope="shared", align=1024)
        B_smem = T.alloc_buffer((b_elems,), dtype, scope="shared", align=1024)
        acc = T.alloc_buffer((ACCUMULATORS,), "float32", scope="local")
        desc = T.alloc_buffer((2,), "uint64", scope="local")
        total = T.alloc_buffer((1,), "float32", scope="local")
        for i in T.serial(a_elems // threads):
            A_smem[i * threads + tx] = T.Cast(dtype, T.float32(0))
        for i in T.serial(b_elems // threads):
            B_smem[i * threads + tx] = T.Cast(dtype, T.float32(0))
        T.ptx.fence.proxy.async_.shared__cta()  # the stores are visible to wgmma's reads
        T.cuda.cta_sync()
        for i in T.unroll(ACCUMULATORS):
            acc[i] = T.float32(0)
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[0]), A_smem.data, 1, sbo, SWIZZLE_128B)
        T.cuda.wgmma.encode_matrix_descriptor(T.address_of(desc[1]), B_smem.data, b_lbo, sbo, SWIZZLE_128B)
        for _it in T.serial(iterations):
            T.ptx.wgmma.fence.sync.aligned()
            for kk in T.unroll(STEPS):
                T.ptx[wgmma](*[acc[i] for i in range(ACCUMULATORS)], desc[0] + T.uint64(kk * 2),
                             desc[1] + T.uint64(kk * WGMMA_K * TILE_ROW_BYTES // 16), T.bool(True), 1, 1, 0, 1)
            T.ptx.wgmma.commit_group.sync.aligned()
            T.ptx.wgmma.wait_group.sync.aligned(1)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        total[0] = T.float32(0)
        for i in T.unroll(ACCUMULATORS):
            total[0] = total[0] + acc[i]
        out[bx, tx] = total[0]

    return tvm.IRModule({"main": main})


def target_sm90a() -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}, host="llvm")


def jit(executable: tvm.runtime.Executable, _name: str):
    return executable.jit()


def measure_tensor_tflops(dtype: str, settings: MeasureSettings, device=None, iterations: int = 4096,
                          load: LoadExecutable = jit) -> float:
    """The tensor cores' float32-accumulate peak for ``dtype`` inputs on ``device`` (a Hopper GPU), TFLOP/s."""
    device = device or tvm.cuda(0)
    blocks = device.multi_processor_count
    chain = wgmma_chain_module(dtype, blocks, iterations)
    module = load(tvm.compile(chain, target=target_sm90a(), tir_pipeline="tirx"), f"tensor_roof_{SUPPORTED[dtype]}")
    out = tvm.runtime.empty((blocks, WARPGROUPS * 128), "float32", device)
    timing = time_function(module, device, [out], settings)
    return blocks * flops_per_block(iterations) / timing.median_us / 1e6


def why_no_tensor_peak(device, target: tvm.target.Target, device_name: str) -> str | None:
    """Why the wgmma chain cannot measure ``device``'s tensor cores (a clause: the roofline
    says "… and <this>"), or None on a Hopper GPU."""
    if target.kind.name != "cuda":
        return "their peak is measured on a Hopper (sm_90) GPU, not on a CPU"
    if device.compute_version != HOPPER:
        arch = device.compute_version.replace(".", "")
        return f"their peak is measured with wgmma, which only Hopper (sm_90) GPUs have ({device_name} is sm_{arch})"
    return None


def tensor_peaks_gflops(device, target: tvm.target.Target, device_name: str, settings: MeasureSettings,
                        load: LoadExecutable = jit) -> tuple[tuple[str, float], ...]:
    """(input type, GFLOP/s) of the tensor cores for each 16-bit type; raises ExplorerError
    with the reason as a clause (:func:`why_no_tensor_peak`) where they cannot be measured."""
    if reason := why_no_tensor_peak(device, target, device_name):
        raise ExplorerError(reason)
    try:
        return tuple((dtype, 1e3 * measure_tensor_tflops(dtype, settings, device, load=load)) for dtype in SUPPORTED)
    except Exception as error:  # TVM or NVRTC refused the chain, or it failed on the device
        raise ExplorerError(f"the wgmma chain that measures their peak failed on {device_name} "
                            f"({summary_line(error)})") from None

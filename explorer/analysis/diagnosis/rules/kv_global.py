"""K read from global memory by every thread: fused attention on the CUDA cores without kv_shared,
whose lanes of a query row read that many different rows of K at once (their keys are consecutive
rows, one 128-byte line each): one L1 wavefront per row, where a tile of K in shared memory, its rows
padded, serves each load in one."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

WAVEFRONTS_PER_CYCLE = 1  # an SM's L1 serves one wavefront (up to 128 bytes) per cycle
KV_GLOBAL_COST = (f"the K loads' L1 wavefronts at {WAVEFRONTS_PER_CYCLE} per cycle per SM, beyond the time of the "
                  "multiply-adds and the instructions beside them (the issue finding's), with which they overlap")


def kv_global_rule(f: Facts) -> Finding | None:
    loop = f.fma_loop
    if loop is None or not loop.k_wavefronts:
        return None
    wave_us = f.device.cycles_us(loop.wavefronts / WAVEFRONTS_PER_CYCLE)
    compute_us = loop.fma_us * (1 + loop.others / loop.fmas)
    if wave_us <= compute_us:
        return None
    evidence = [f"A warp's loads of K take {loop.k_wavefronts:,} L1 wavefronts per key tile (the lanes of a row read "
                f"different rows of K at once): {wave_us:,.0f} µs in all, against {compute_us:,.0f} µs of arithmetic "
                "and the instructions beside it.",
                "kv_shared copies each K and V tile to shared memory once per block: every thread then reads it "
                "there, its rows padded so that a load is one wavefront."]
    return finding("kv-global", "Every thread reads K from global memory: its loads are L1-bound.", evidence,
                   wave_us - compute_us, KV_GLOBAL_COST)


RULE = Rule("kv-global", "fused attention whose threads read K from global memory, many lines per warp load",
            KV_GLOBAL_COST, kv_global_rule, relieved_by=("kv_shared",))

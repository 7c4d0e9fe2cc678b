"""K and V re-read: attention in one kernel whose query tiles are too small to reuse each key and value.

A block of such a kernel holds ``block_q`` query rows and streams every K and V tile of its head
through shared memory, so the keys and values are loaded once per block of query rows: seq / block_q
times in all (about half as often with the causal mask, whose blocks stop at the diagonal). Not the
``re-reads`` rule's case, which counts an input read again by a later kernel: here one kernel reads
it again, from block to block, and the lowered TIR's access analysis does not see those copies
(cp.async, or addresses through the block's head index), so the template's tiles give the count.
"""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

KV_REUSE_COST = ("the bytes the kernel moves (its inputs and output once, K and V once per block of query rows) at "
                 "the L2's measured bandwidth (the blocks of a head run side by side, so the L2 serves the repeats), "
                 "or at the roof's where the L2's is not known and the K and V of the heads in flight do not fit in "
                 "it, − the time of its arithmetic (the roofline's least time, at the peak of the units the template "
                 "multiplies on): what the loads add where they outlast the multiply-adds")


def kv_reuse_rule(f: Facts) -> Finding | None:
    """Fused attention whose traffic, K and V counted once per block of query rows, takes longer
    than its arithmetic: a block of more query rows reads K and V fewer times."""
    kv_bytes = f.kv_bytes  # K and V themselves: what one block holding every query row would load
    if not f.query_rows_per_block or not kv_bytes or f.kv_loaded_bytes <= kv_bytes:
        return None
    moved = f.compulsory_bytes + f.kv_loaded_bytes - kv_bytes
    if not f.device.l2_gbps and f.kv_in_flight_bytes and f.kv_in_flight_bytes <= f.device.l2_bytes:
        # The K and V of the heads being worked on fit in the L2, which serves the repeats at a bandwidth no
        # one publishes: pricing them at the memory roof would charge a cost the kernel does not pay.
        return None
    bandwidth, where = ((f.device.l2_gbps, "the L2's measured bandwidth") if f.device.l2_gbps else
                        (f.device.bandwidth_gbps, f"the {f.device.roof} roof's bandwidth: the K and V of the heads "
                         "in flight do not fit in the L2, or their size is not known"))
    moved_us = moved / (bandwidth * 1e3)
    arithmetic_us = f.bound_us  # the roofline of the units the template multiplies on
    if moved_us <= arithmetic_us:
        return None
    times = f.kv_loaded_bytes / kv_bytes
    told = f"{times:,.0f}" if times == round(times) else f"{times:,.1f}"
    rows = f.query_rows_per_block
    evidence = [f"Each block holds {rows} query rows and walks every key and value tile of its head: K and V "
                f"({kv_bytes / 1e6:,.1f} MB) are loaded {told} times, {f.kv_loaded_bytes / 1e9:,.2f} GB in "
                f"all, {(f.kv_loaded_bytes - kv_bytes) / 1e9:,.2f} GB of it again.",
                f"With the other inputs and the output the kernel moves {moved / 1e9:,.2f} GB: {moved_us:,.1f} µs at "
                f"{bandwidth:,.0f} GB/s ({where}), longer than the {arithmetic_us:,.1f} µs of its arithmetic.",
                f"Each key and value a block loads serves its {rows} query rows: a block of twice the rows (block_q) "
                "loads K and V half as often, as far as its registers and shared memory allow."]
    if "l2_hit_rate" in f.counters:
        evidence.append(f"Nsight Compute: L2 hit rate {f.counters['l2_hit_rate']:.0f}%.")
    return finding("kv-reuse", f"Query tiles of {rows} rows: K and V are loaded {told} times.", evidence,
                   moved_us - arithmetic_us, KV_REUSE_COST)


RULE = Rule("kv-reuse", "fused attention whose small query tiles load K and V again for every block",
            KV_REUSE_COST, kv_reuse_rule)

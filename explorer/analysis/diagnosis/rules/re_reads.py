"""Re-reads: several kernels each read the workload's input."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

REREAD_COST = ("the input's bytes read beyond once, at the roof's bandwidth (a kernel reads a buffer at most once "
               "from memory; a later kernel reads it again)")


def reread_rule(f: Facts) -> Finding | None:
    """Several kernels each read the workload's input: passes that one kernel could make over data
    it has just read (softmax as max, sum and normalize kernels)."""
    readers = [(i, read) for i, read in enumerate(f.input_reads, start=1) if read]
    total = sum(read for _, read in readers)
    if len(readers) < 2 or not f.input_bytes or total <= 1.5 * f.input_bytes:
        return None
    times = total / f.input_bytes
    evidence = [f"{len(readers)} kernels read the input: {total / 1e6:,.1f} MB together, where reading it once is "
                f"{f.input_bytes / 1e6:,.1f} MB ({times:.1f}×).",
                "; ".join(f"kernel {i} reads {read / 1e6:,.1f} MB" for i, read in readers) + ".",
                "Each kernel after the first reads again what the one before already read: one kernel making "
                "every pass over a row it holds reads it from memory once."]
    if "l2_hit_rate" in f.counters:
        evidence.append(f"Nsight Compute: L2 hit rate {f.counters['l2_hit_rate']:.0f}%.")
    return finding("re-reads", f"The input is read {times:.1f} times, once per kernel: passes that could be fused.",
                   evidence, f.device.bytes_us(total - f.input_bytes), REREAD_COST)


RULE = Rule("re-reads", "the workload's input read by several kernels: passes that could be fused", REREAD_COST,
            reread_rule)

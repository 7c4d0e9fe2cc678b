"""The diagnosis's rules, one small module each (as TVM's dlight keeps one schedule rule per file):
each holds its check, a pure function of :class:`~..facts.Facts` that returns a Finding or None
with the cost its model charges in µs, the constants of that model, and its ``Rule`` row (name,
what it looks for, how its cost is estimated). A new rule is a module here and one entry of
:data:`RULES`."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule
from . import (
    bank_conflicts,
    barriers,
    coalescing,
    cuda_cores,
    divergence,
    issue,
    kernels,
    kv_global,
    kv_reuse,
    masked_work,
    mma_sync,
    parallelism,
    pipeline,
    producer,
    races,
    re_reads,
    rescale,
    reuse,
    rewrites,
    ring_depth,
    softmax,
    spills,
    vector_width,
    work_per_thread,
)

# In this order: a finding's place among equal costs follows it.
RULES: tuple[Rule, ...] = (
    parallelism.OCCUPANCY, parallelism.GRID, bank_conflicts.RULE, divergence.RULE, coalescing.RULE, reuse.RULE,
    spills.RULE, kernels.RULE, rewrites.RULE, vector_width.RULE, pipeline.RULE, re_reads.RULE, work_per_thread.RULE,
    masked_work.RULE, cuda_cores.RULE, kv_reuse.RULE,
    races.RULE,  # a wrong result: ranked first whatever the order (diagnoser.ranked)
    barriers.RULE, softmax.RULE, rescale.RULE, ring_depth.RULE, producer.RULE, mma_sync.RULE, issue.RULE,
    kv_global.RULE,
)

# Each rule's name (a Finding's ``rule``), what it looks for and how its cost is estimated: the list the
# graded documentation (bench/diagnosis_agreement.py) prints.
RULE_TABLE: tuple[tuple[str, str, str], ...] = tuple((rule.name, rule.looks_for, rule.cost) for rule in RULES)


def findings_of(f: Facts) -> dict[str, Finding]:
    """Every rule's finding for ``f``, by rule name."""
    return {found.rule: found for found in (rule(f) for rule in RULES) if found is not None}


def estimated_total(f: Facts) -> float:
    """The roofline's least time plus every finding's cost beyond it: what suggestions are compared by."""
    return f.bound_us + sum(found.cost_us for found in findings_of(f).values() if not found.within_roof)

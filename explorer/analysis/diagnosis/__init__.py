"""A diagnosis per setting: the few findings that most limit it, ranked, each with its
evidence, an estimated cost and the knob change that addresses it.

The analyses of one build are first reduced to :class:`Facts`, plain numbers (occupancy and
its limiter, registers and spills, bank conflicts per shared access, sectors per global
access, work per thread, the roofline's least time, the SASS mix, Nsight Compute's counters
when given). Each *rule* is a small pure function of Facts that returns a :class:`Finding`
or None, with the cost its model charges in µs (each rule's ``*_COST`` sentence says how).

**Ranking** (:data:`RANKING_RULE`): findings are ordered by estimated cost, largest first;
one below ``MIN_SHARE`` of the roofline's least time is dropped.

**Near its limit** (:data:`LIMIT_RULE`): where no neighbour is estimated faster by more than
the model's held-out error (:mod:`.calibration`), no move is suggested and the diagnosis says so.

**Suggestions** (:data:`SUGGESTION_RULE`): every neighbouring setting, one knob moved to
its nearest allowed value that builds (:func:`neighbours`), is built and reduced to Facts. A finding's suggestion is
the neighbour that lowers that finding's own cost the most (by at least ``MIN_RELIEF``; among
equals, the lowest estimated total: the roofline's least time plus every finding's cost),
provided that total is below the current setting's by more than the model's error. The
estimate is a static model, not a time: the app and ``--try-on-gpu`` measure the suggestions
where there is a GPU.

By job:

- :mod:`.facts` — :class:`Device`, :class:`Facts` and how a build becomes Facts (:func:`facts_of`).
- :mod:`.tiles` — the tile loop of the tensor-core templates (:class:`TileLoop`) and the timing model its rules share.
- :mod:`.calibration` — the rules' constants fitted to measurements (``calibration.json``) and the model's error.
- :mod:`.findings` — the records: :class:`Rule`, :class:`Finding`, :class:`Suggestion`, :class:`Diagnosis`.
- :mod:`.rules` — one module per rule, each with its row of :data:`RULE_TABLE`; :data:`RULES` in order.
- :mod:`.counters` — Nsight Compute's counters the rules quote.
- :mod:`.search` — the neighbours, their builds (threads where asked) and :func:`suggest`.
- :mod:`.diagnoser` — :func:`diagnose`: facts, findings ranked, suggestions, notes.
- :mod:`.report` — the diagnosis as text and as JSON (the caller makes the links).
"""
from . import calibration
from .counters import L2_HIT_RATE, STALL_METRIC, STALLS, counters_of, ncu_metrics, stall_evidence
from .diagnoser import (
    LIMIT_RULE,
    MIN_SHARE,
    RANKING_RULE,
    STATIC_NOTE,
    TOP,
    diagnose,
    diagnose_spec,
    near_limit,
    ranked,
    refusal,
)
from .facts import REGISTER_NOTE, Device, Facts, GlobalFact, RaceFact, SharedFact, device_for, facts_of
from .findings import Diagnosis, Finding, Rule, Suggestion
from .report import diagnosis_json, format_diagnosis
from .rules import RULE_TABLE, RULES, estimated_total, findings_of
from .rules.bank_conflicts import bank_conflict_rule
from .rules.barriers import barrier_rule
from .rules.coalescing import coalescing_rule
from .rules.cuda_cores import cuda_cores_rule
from .rules.issue import issue_rule
from .rules.kernels import kernels_rule
from .rules.kv_global import kv_global_rule
from .rules.kv_reuse import kv_reuse_rule
from .rules.masked_work import masked_work_rule
from .rules.mma_sync import mma_sync_rule
from .rules.parallelism import grid_rule, occupancy_rule
from .rules.pipeline import pipeline_rule
from .rules.producer import producer_rule
from .rules.races import race_rule
from .rules.re_reads import reread_rule
from .rules.rescale import rescale_rule
from .rules.reuse import reuse_rule
from .rules.rewrites import rewrite_rule
from .rules.ring_depth import ring_rule
from .rules.softmax import softmax_rule
from .rules.spills import spill_rule
from .rules.vector_width import vector_rule
from .rules.work_per_thread import work_per_thread_rule
from .search import (
    MIN_RELIEF,
    STEPS_TRIED,
    SUGGESTION_RULE,
    Move,
    analysed_neighbours,
    move_error,
    neighbours,
    suggest,
)
from .tiles import FmaLoop, TileLoop

__all__ = [
    "Device", "Diagnosis", "Facts", "Finding", "GlobalFact", "L2_HIT_RATE", "LIMIT_RULE", "MIN_RELIEF", "MIN_SHARE",
    "Move", "TileLoop", "barrier_rule", "mma_sync_rule", "near_limit", "producer_rule", "rescale_rule", "ring_rule",
    "softmax_rule", "calibration", "issue_rule", "kv_global_rule", "FmaLoop",
    "RANKING_RULE", "REGISTER_NOTE", "RULES", "RULE_TABLE", "RaceFact", "Rule", "STALLS", "STALL_METRIC", "STATIC_NOTE",
    "STEPS_TRIED", "SUGGESTION_RULE", "SharedFact", "Suggestion", "TOP", "analysed_neighbours",
    "bank_conflict_rule", "coalescing_rule", "counters_of", "cuda_cores_rule", "device_for", "diagnose",
    "diagnose_spec", "diagnosis_json", "estimated_total", "facts_of", "findings_of", "format_diagnosis",
    "grid_rule", "kernels_rule", "kv_reuse_rule", "masked_work_rule", "move_error", "ncu_metrics", "neighbours",
    "occupancy_rule",
    "pipeline_rule", "race_rule", "ranked", "refusal", "reread_rule", "reuse_rule", "rewrite_rule", "spill_rule",
    "stall_evidence", "suggest", "vector_rule", "work_per_thread_rule",
]

"""The diagnosis: each rule on hand-built Facts with a known answer, the ranking and the
suggestion rules, neighbours, refusals, the lesson agreement and the CLI's JSON shape."""
import dataclasses
import json

import pytest

from explorer import agreement
from explorer.analysis import diagnosis as dx
from explorer.analysis.diagnosis import Device, Facts, GlobalFact, RaceFact, SharedFact
from explorer.analysis.diagnosis.search import _split_moves
from explorer.analysis.roofline import Ceilings
from explorer.cli import main
from explorer.lessons import get_lesson
from explorer.presets import get_preset

pytestmark = pytest.mark.usefixtures("assumed_calibration")
ORIGINAL_TABLE = dx.calibration.table  # what the diagnosis reads outside the tests

# 100 SMs at 2 GHz: one cycle on every SM is 1 / (100 × 2e3) µs; 1000 GB/s: 1e6 bytes per µs.
DEVICE = Device("test GPU", 90, 100, 2.0, 1000.0, "HBM")


def facts(**changes) -> Facts:
    """A healthy setting: 10,000 blocks of 256 threads, 8 blocks per SM, nothing wrong."""
    base = dict(device=DEVICE, bound_us=10.0, bound="memory", kernels=1, blocks=10_000, threads_per_block=256,
                shared_bytes=4096, blocks_per_sm=8, limiter="threads", registers=32, spill_bytes=0,
                outputs=2_560_000, outputs_per_thread=1, loads_per_output=1.0)
    return Facts(**{**base, **changes})


def test_a_healthy_setting_has_no_finding():
    assert dx.findings_of(facts()) == {}
    assert dx.estimated_total(facts()) == 10.0


def test_an_uncoalesced_load_costs_its_extra_sectors_at_the_roof():
    # Lanes read floats 32 apart: 32 sectors per request where 4 hold the data.
    strided = GlobalFact("A[tx * 32]", "load", 4, 1000, 32_000, 4000)
    found = dx.coalescing_rule(facts(globals=(strided,)))
    assert found.rule == "coalescing"
    assert "32.0 sectors per request" in found.title and "where 4.0 hold" in found.evidence[0]
    assert found.cost_us == pytest.approx(28_000 * 32 / 1e6)
    assert dx.coalescing_rule(facts(globals=(GlobalFact("A[tx]", "load", 4, 1000, 4000, 4000),))) is None
    # Inputs of 10 MB that the L2 (50 MB, 5000 GB/s) holds: it serves the extra sectors again.
    l2 = dataclasses.replace(DEVICE, l2_gbps=5000.0, l2_bytes=50_000_000)
    cached = dx.coalescing_rule(facts(device=l2, globals=(strided,), input_bytes=10_000_000))
    assert cached.cost_us == pytest.approx(28_000 * 32 / 5e6) and "fit in the L2" in cached.evidence[-1]
    assert dx.coalescing_rule(facts(device=l2, globals=(strided,), input_bytes=60_000_000)).cost_us == \
        pytest.approx(found.cost_us)


def test_a_32_way_bank_conflict_costs_a_cycle_per_extra_wavefront():
    column = SharedFact("S[tx * 32]", "load", 32, 32_000, 31_000)
    found = dx.bank_conflict_rule(facts(shared=(column,)))
    assert "32-way" in found.title
    assert found.cost_us == pytest.approx(31_000 / (100 * 2.0 * 1e3))
    assert dx.bank_conflict_rule(facts(shared=(SharedFact("S[tx]", "load", 1, 1000, 0),))) is None


def test_register_limited_occupancy():
    # One block of 8 warps per SM where the grid would give it 100: 8 warps of 16.
    f = facts(blocks_per_sm=1, limiter="registers", registers=200)
    found = dx.occupancy_rule(f)
    assert found.title == "Occupancy is limited by registers: 8 warps per SM."
    assert "200 registers per thread" in found.evidence[1]
    assert found.cost_us == pytest.approx(10.0 * (16 / 8 - 1))
    assert dx.grid_rule(f) is None


def test_a_tile_too_large_leaves_sms_idle():
    # 50 blocks for 100 SMs, 8 warps each: half the SMs busy, each with half the warps it needs.
    f = facts(blocks=50, outputs_per_thread=200)
    found = dx.grid_rule(f)
    assert "50 blocks of 256 threads" in found.title and "50 SMs get none" in found.evidence[0]
    assert found.cost_us == pytest.approx(10.0 * (1 / (0.5 * 0.5) - 1))
    assert dx.occupancy_rule(f) is None


def test_idle_lanes_count_against_parallelism():
    # Blocks of one thread: each warp has 1 of 32 lanes busy.
    # 3,200 blocks give each SM the 32 blocks it can hold: 32 warps, one lane each.
    f = facts(threads_per_block=1, blocks=3200, blocks_per_sm=32, limiter="blocks")
    assert dx.grid_rule(f).cost_us == pytest.approx(10.0 * (16 / (32 / 32) - 1))
    assert "31 of its warps' lanes idle" in dx.grid_rule(f).evidence[1]


def test_threads_whose_tile_lies_outside_the_output_do_not_hide_latency():
    # 200 blocks: 2 per SM, 16 warps; tiles of 2 outputs per thread for 1 output's worth of work each.
    f = facts(blocks=200, outputs_per_thread=2, stage_outputs=200 * 256)
    assert f.useful == 0.5 and f.warps_per_sm == 16
    found = dx.grid_rule(f)
    assert found.cost_us == pytest.approx(10.0 * (16 / (16 * 0.5) - 1))
    assert "50% of the threads' tiles fall outside the output" in found.evidence[1]


def test_spills_cost_their_bytes_for_every_thread():
    found = dx.spill_rule(facts(spill_bytes=64, blocks=100, threads_per_block=128))
    assert found.cost_us == pytest.approx(64 * 100 * 128 / 1e6)


def test_an_output_written_many_times_over():
    # 2.56 M outputs of 4 bytes, each stored 8 times: accumulated in global memory.
    stored = 8 * 2_560_000 * 4
    stores = GlobalFact("C[i]", "store", 4, 640_000, stored // 32, stored // 32, stored)
    found = dx.rewrite_rule(facts(globals=(stores,)))
    assert "8.0 times" in found.title
    assert found.cost_us == pytest.approx(2 * (stored - 2_560_000 * 4) / 1e6)


def test_an_accumulator_the_compiler_keeps_in_a_register_is_no_rewrite():
    # The same 8 stores per output, 7 of them to an address that does not change over the reduction loop.
    stored = 8 * 2_560_000 * 4
    stores = GlobalFact("C[i]", "store", 4, 640_000, stored // 32, stored // 32, stored)
    assert dx.rewrite_rule(facts(globals=(stores,), register_kept_bytes=7 * 2_560_000 * 4)) is None
    # Stored again and again within a 10.24 MB output the L2 (50 MB, 5000 GB/s) holds: at the L2's bandwidth.
    l2 = dataclasses.replace(DEVICE, l2_gbps=5000.0, l2_bytes=50_000_000)
    found = dx.rewrite_rule(facts(device=l2, globals=(stores,), stored_footprint=2_560_000 * 4))
    assert found.cost_us == pytest.approx(2 * 7 * 2_560_000 * 4 / 5e6) and "5,000 GB/s" in found.evidence[1]
    # Intermediates passed between kernels (each address stored once) go to memory and back, L2 or not.
    passed = dx.rewrite_rule(facts(device=l2, globals=(stores,), stored_footprint=stored))
    assert passed.cost_us == pytest.approx(2 * 7 * 2_560_000 * 4 / 1e6)


def test_stores_to_one_address_over_a_loop_are_kept_in_a_register():
    """conv1d-v1: 16,415 outputs, one a block, each summed over 32 taps straight into B[blockIdx.x] (and zeroed at
    r == 0): 33 stores of 4 bytes an output, of which nvcc writes one (its SASS: one STG). conv1d-v2 guards them
    with ``if (i < 16415)`` inside the loop: a conditional store nvcc leaves in memory (33 STG)."""
    from explorer.build import build

    one = dx.facts_of(build(get_preset("conv1d-v1").spec))
    assert one.register_kept_bytes == 32 * 16_415 * 4
    assert "rewrites" not in dx.findings_of(one)
    guarded = dx.facts_of(build(get_preset("conv1d-v2").spec))
    assert guarded.register_kept_bytes == 0 and guarded.stored_footprint < 2 * 16_415 * 4
    assert "rewrites" in dx.findings_of(guarded)
    split = dx.facts_of(build(get_preset("conv2d-modern-split-k").spec))  # partial sums for a second kernel
    assert split.register_kept_bytes == 0 and "rewrites" in dx.findings_of(split)


def test_a_kernel_launched_from_a_host_loop_pays_each_launch():
    from explorer.build import build

    found = dx.kernels_rule(facts(launches=16))
    assert found.cost_us == pytest.approx(15 * 1.2) and found.title == "16 kernel launches instead of one."
    assert dx.kernels_rule(facts(launches=1)) is None
    # d2l's default schedule launches its kernel once per channel, from a loop on the host.
    assert dx.facts_of(build(get_preset("d2l-default-c16").spec)).launches == 16
    assert dx.facts_of(build(get_preset("d2l-tiled-c16").spec)).launches == 1
    assert dx.facts_of(build(get_preset("rowwise-softmax-separate").spec)).launches == 3


def test_synchronous_copies_in_a_staged_loop_on_sm80():
    # One block per SM (100 blocks): nothing else computes while it waits, 600 cycles a step, one wave.
    alone = dx.pipeline_rule(facts(staged_steps=64, blocks=100))
    assert alone.cost_us == pytest.approx(64 * 600 / (2.0 * 1e3))
    # 8 resident blocks (800): each block's step is at least 10 µs × 100 SMs ÷ (800 blocks × 64 steps) = 0.0195 µs,
    # 39 cycles at 2 GHz, and the 7 others compute 273 of each wait's 600 cycles.
    f = facts(staged_steps=64, blocks=100 * 8)
    found = dx.pipeline_rule(f)
    hidden = 7 * 10 * 100 / (800 * 64) * 2e3
    assert found.cost_us == pytest.approx(64 * (600 - hidden) / (2.0 * 1e3))
    assert "7 other resident blocks compute about 273" in found.evidence[2]
    assert dx.pipeline_rule(facts(staged_steps=64, async_copies=True)) is None


def test_ranking_is_by_cost_and_drops_the_negligible():
    big, small, tiny = (dx.Finding(name, name, (), cost, "") for name, cost in (("a", 5.0), ("b", 1.0), ("c", 0.4)))
    assert [f.rule for f in dx.ranked([small, tiny, big], bound=10.0)] == ["a", "b"]


def test_a_suggestion_lowers_its_finding_and_the_total():
    # 3.1 million extra wavefronts: 15.5 µs at one a cycle on 100 SMs at 2 GHz, beside the roofline's 10 µs.
    conflicted = facts(shared=(SharedFact("S[tx * 32]", "load", 32, 3_200_000, 3_100_000),))
    worse_elsewhere = facts(shared=(), blocks=10)  # no conflicts, but an idle GPU
    better = facts(shared=(SharedFact("S[tx * 33]", "load", 1, 1000, 0),))
    spec = get_preset("dw-blog-final-96").spec
    first, second = spec.with_knobs(unroll=True), spec.with_knobs(num_thread_x=8)
    candidates = [(first, (("unroll", "false", "true"),), worse_elsewhere),
                  (second, (("num_thread_x", "16", "8"),), better)]
    chosen = dx.suggest("bank-conflicts", conflicted, candidates)
    assert chosen.spec == second and chosen.describe() == "num_thread_x 16 → 8" and chosen.cost_us == 0
    assert dx.suggest("bank-conflicts", conflicted, candidates, taken=[second]) is None
    assert dx.suggest("coalescing", conflicted, candidates) is None  # no such finding
    # Of the moves that relieve the finding, the one estimated fastest: removing the conflicts at the price of
    # 20 µs of uncoalesced loads (30 µs in all) loses to halving them (17.75 µs).
    uncoalesced = facts(globals=(GlobalFact("A[tx * 32]", "load", 4, 1000, 629_000, 4000),))  # 20 µs of sectors
    halved = facts(shared=(SharedFact("S[tx * 16]", "load", 16, 1_600_000, 1_550_000),))
    both = [(first, (("unroll", "false", "true"),), uncoalesced), (second, (("num_thread_x", "16", "8"),), halved)]
    assert dx.estimated_total(uncoalesced) == pytest.approx(30.0) and dx.estimated_total(halved) == pytest.approx(17.75)
    assert dx.suggest("bank-conflicts", conflicted, both).spec == second


def test_a_move_estimated_faster_by_less_than_the_models_error_is_not_suggested():
    # 0.155 µs of conflicts on a 10 µs roofline: removing them is 1.5% faster, within the model's error.
    slight = facts(shared=(SharedFact("S[tx * 32]", "load", 32, 32_000, 31_000),))
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=8)
    candidates = [(spec, (("num_thread_x", "16", "8"),), facts())]
    assert dx.calibration.speedup_error() > 0.02
    assert dx.suggest("bank-conflicts", slight, candidates) is None
    limit = dx.near_limit(slight, candidates)
    assert limit.startswith("No setting one knob away is estimated faster by more than the model's error")
    assert "within that error of the roofline's least time, 10.00 µs, set by" in limit
    # Far above the roofline and no move that helps: the largest finding holds it.
    stuck = facts(shared=(SharedFact("S[tx * 32]", "load", 32, 3_200_000, 3_100_000),))
    assert "its largest cost, bank-conflicts (15.50 µs), holds it above" in dx.near_limit(stuck, [(spec, (), stuck)])
    assert dx.near_limit(stuck, candidates) is None  # the neighbour without conflicts is 2.5 times faster


def test_a_moves_margin_is_the_error_of_the_rule_it_changes_most(monkeypatch):
    # Bank-conflict moves measured to ±30%, every move to ±10%: removing 4 µs of conflicts from a 20 µs setting
    # (25% faster) beats neither its rule's error as a suggestion nor, as a move, the near-limit verdict.
    monkeypatch.setattr(dx.calibration, "table", lambda: {
        "speedup_error": 0.1, "rules": {"bank-conflicts": {"pair_error": 0.3, "held_out_pairs": 20},
                                        "coalescing": {"pair_error": 0.05, "held_out_pairs": 20}}})
    conflicted = facts(bound_us=16.0, shared=(SharedFact("S[tx * 32]", "load", 32, 900_000, 800_000),))
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=8)
    plain = [(spec, (("num_thread_x", "16", "8"),), facts(bound_us=16.0))]
    now, then = dx.findings_of(conflicted), dx.findings_of(plain[0][2])
    assert now["bank-conflicts"].cost_us == pytest.approx(4.0) and dx.move_error(now, then) == 0.3
    assert dx.suggest("bank-conflicts", conflicted, plain) is None
    assert dx.near_limit(conflicted, plain) is not None
    # A move whose largest change is in a rule measured well (coalescing, ±5%) is held to that rule's error.
    strided = (GlobalFact("A[tx * 32]", "load", 4, 1000, 1_032_000, 32_000),)  # 1 M extra sectors: 32 µs
    assert dx.move_error(dx.findings_of(facts(globals=strided)), dx.findings_of(facts())) == 0.05
    assert dx.move_error(now, now) == 0.1  # no cost moves: every move's error


def test_no_move_estimated_faster_by_less_than_the_noise_band_is_suggested(monkeypatch):
    # Bank-conflict moves measured to ±2% (as vector-width moves were): removing 4 µs of conflicts from a 104 µs
    # setting is 4% faster, beyond that error but within the ±5% in which two measured times are the same speed.
    monkeypatch.setattr(dx.calibration, "table", lambda: {
        "speedup_error": 0.02, "rules": {"bank-conflicts": {"pair_error": 0.02, "held_out_pairs": 20}}})
    assert dx.calibration.speedup_error("bank-conflicts") == 0.05 == dx.calibration.speedup_error()
    conflicted = facts(bound_us=100.0, shared=(SharedFact("S[tx * 32]", "load", 32, 900_000, 800_000),))
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=8)
    plain = [(spec, (("num_thread_x", "16", "8"),), facts(bound_us=100.0))]
    assert dx.estimated_total(conflicted) == pytest.approx(104.0)
    assert dx.suggest("bank-conflicts", conflicted, plain) is None and dx.near_limit(conflicted, plain) is not None
    faster = [(spec, (("num_thread_x", "16", "8"),), facts(bound_us=98.0))]  # 104 / 98: 6% faster
    assert dx.suggest("bank-conflicts", conflicted, faster).spec == spec


RACE = RaceFact("row_max_shared", "thread (0, 0, 0) writes row_max_shared[0] (#5, CUDA line 113) and thread "
                "(32, 0, 0) reads it (#6, CUDA line 117): no __syncthreads() between them.", (113, 117))


def test_a_race_is_a_wrong_result_ranked_before_every_cost():
    # A register-limited setting with a race: the occupancy finding costs 10 µs, the race nothing, yet leads.
    f = facts(blocks_per_sm=1, limiter="registers", registers=200, races=(RACE,))
    found = dx.race_rule(f)
    assert found.wrong and found.cost_us == 0.0
    assert found.title == "Shared-memory race on row_max_shared at CUDA lines 113, 117: the result is wrong."
    assert found.evidence[0] == RACE.sentence and "__syncthreads()" in found.evidence[-1]
    assert [x.rule for x in dx.ranked(dx.findings_of(f).values(), f.bound_us)] == ["race", "occupancy"]
    assert dx.estimated_total(f) == dx.estimated_total(facts(blocks_per_sm=1, limiter="registers", registers=200))
    assert dx.race_rule(facts()) is None
    text = dx.format_diagnosis(dx.Diagnosis(get_preset("rowwise-softmax-fused").spec, (found,), 10.0, "memory"))
    assert "1. Shared-memory race on row_max_shared at CUDA lines 113, 117: the result is wrong.\n" in text
    assert "no single knob move removes it" in text


def test_a_setting_with_a_race_is_never_suggested():
    conflicted = facts(shared=(SharedFact("S[tx * 32]", "load", 32, 32_000, 31_000),))
    racy_but_fast = facts(races=(RACE,))
    right_but_slower = facts(shared=(SharedFact("S[tx * 32]", "load", 32, 32_000, 31_000),), blocks=10)
    spec = get_preset("dw-blog-final-96").spec
    first, second = spec.with_knobs(unroll=True), spec.with_knobs(num_thread_x=8)
    candidates = [(first, (("unroll", "false", "true"),), racy_but_fast),
                  (second, (("num_thread_x", "16", "8"),), right_but_slower)]
    assert dx.suggest("bank-conflicts", conflicted, candidates) is None  # only the racy one lowers it
    # A race's suggestion: the neighbour without one, however slow.
    assert dx.suggest("race", facts(races=(RACE,)), candidates).spec == second


def test_neighbours_move_one_knob_to_its_nearest_values():
    spec = get_preset("dw-blog-final-96").spec  # num_thread_x 16 of 1, 2, 4, ..., unroll false
    paths = {moves[0][1][0][:2] + (moves[0][1][0][2],): [m[1][0][2] for m in moves] for moves in dx.neighbours(spec)}
    assert paths[("unroll", "false", "true")] == ["true"]
    assert paths[("num_thread_x", "16", "32")][:2] == ["32", "64"]
    assert paths[("num_thread_x", "16", "8")][:2] == ["8", "4"]


def test_split_moves_shift_the_smallest_prime_factor_between_neighbouring_levels():
    assert _split_moves((6, 1, 4)) == [(3, 2, 4), (6, 2, 2)]
    assert _split_moves((1, 1)) == []


def test_a_refused_setting_gets_its_sentence_only(capsys):
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=64)  # 64 × 2 threads for 32 columns
    d = dx.diagnose_spec(spec, compile=False)
    assert d.findings == () and "some threads would have no output" in d.refused
    assert dx.format_diagnosis(d) == d.refused
    assert main(["show", "dw-blog-final-96", "--view", "diagnosis", "--set", "num_thread_x=64"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_json_shape(capsys):
    # Harris's first reduction: its cubin is compiled by test_app.py's tabs too, and its neighbours built again by
    # test_a_tree_whose_adding_threads_are_spread_over_the_warps below.
    assert main(["show", "reduce-1-interleaved-divergent", "--view", "diagnosis", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["diagnosis"]
    assert set(data) == {"knobs", "evidence", "refused", "roofline", "estimate_us", "neighbours_tried", "findings",
                         "ranking_rule", "suggestion_rule", "limit", "limit_rule", "notes"}
    assert data["evidence"] == "static" and data["refused"] is None
    assert set(data["roofline"]) == {"least_us", "bound", "measured_us", "percent_of_roofline"}
    finding = data["findings"][0]
    assert set(finding) == {"rank", "rule", "title", "wrong", "evidence", "cost_us", "cost_percent_of_roofline",
                            "cost_rule", "suggestion"}
    costs = [f["cost_us"] for f in data["findings"]]
    assert costs == sorted(costs, reverse=True) and [f["rank"] for f in data["findings"]] == list(
        range(1, len(costs) + 1))
    suggestion = next(f["suggestion"] for f in data["findings"] if f["suggestion"])
    assert set(suggestion) == {"changes", "set", "query", "cost_us", "estimate_us"}
    change = suggestion["changes"][0]
    assert suggestion["query"]["knob." + change["knob"]] == change["to"] and suggestion["set"][0].startswith(
        change["knob"] + "=")


# -- lesson agreement -----------------------------------------------------------------------


def test_same_move():
    assert agreement.same_move(8, 16, 32) and not agreement.same_move(8, 4, 32)
    assert agreement.same_move(False, True, True) and not agreement.same_move("shared", "none", "local")
    # A split's factors moving inwards, to whichever inner level, go the same way.
    assert agreement.same_move((7, 1, 1, 1), (1, 7, 1, 1), (1, 1, 7, 1))
    assert not agreement.same_move((1, 7, 1, 1), (7, 1, 1, 1), (1, 1, 7, 1))


def test_agrees_when_a_suggestion_moves_a_changed_knob_the_same_way():
    before = get_preset("dw-blog-vthread-case1").spec
    after = get_preset("dw-blog-vthread-case2").spec  # num_vthread_x 1 → 4
    assert agreement.agrees(before, after, before.with_knobs(num_vthread_x=2))
    assert not agreement.agrees(before, after, before.with_knobs(num_thread_x=16))


def test_which_steps_are_graded():
    steps = {s.preset.id: s for s in get_lesson("depthwise_blog").steps}
    assert agreement.why_not_graded(steps["dw-blog-channel-21"]) == agreement.FIRST_STEP
    assert agreement.why_not_graded(steps["dw-blog-channel-32"]) == agreement.WORKLOAD_ONLY
    assert agreement.why_not_graded(steps["dw-blog-threads-case4"]) == agreement.SLOWER_ON_PURPOSE
    assert agreement.why_not_graded(steps["dw-blog-vthread-case2"]) == ""
    assert agreement.why_not_graded(steps["dw-blog-unfused-96"]) == agreement.SLOWER_ON_PURPOSE  # than final-96
    modern = {s.preset.id: s for s in get_lesson("matmul_modern").steps}
    assert agreement.why_not_graded(modern["modern-async-1024"]) == agreement.NEW_TEMPLATE
    best = {s.preset.id: s for s in get_lesson("best").steps}
    assert agreement.why_not_graded(best["best-dw-64"]) == agreement.SEARCHED


def test_grading_takes_the_top_two_suggestions():
    step = {s.preset.id: s for s in get_lesson("depthwise_blog").steps}["dw-blog-vthread-case2"]
    before = step.previous.spec

    def diagnosis(*moves):
        found = tuple(dx.Finding(f"r{i}", "", (), 1.0, "", dx.Suggestion(before.with_knobs(**m), (), 0, 0))
                      for i, m in enumerate(moves))
        return dx.Diagnosis(before, found)

    assert agreement.grade_step("depthwise_blog", step, diagnosis({"unroll": True}, {"num_vthread_x": 2})).agreeing == 2
    late = diagnosis({"unroll": True}, {"num_thread_x": 16}, {"num_vthread_x": 2})
    graded = agreement.lesson_agreement([get_lesson("depthwise_blog")], diagnose=lambda spec: late)
    late_step = next(g for g in graded if g.after == "dw-blog-vthread-case2")
    assert not late_step.agrees and late_step.agreeing_later == 3 and late_step.costs == (1.0, 1.0, 1.0)
    assert agreement.agreement_share(graded)[1] == sum(g.graded for g in graded) > 0


# -- bench/diagnosis_agreement.py, without a GPU ---------------------------------------------


def test_the_gpu_half_tries_presets_that_are_not_a_searchs_best():
    import diagnosis_agreement as bench  # bench/ (pytest's pythonpath)

    tried = bench.presets_to_try()
    best = {step.preset.spec for step in get_lesson("best").steps}
    assert tried and not any(p.spec in best for p in tried)
    assert len({p.spec for p in tried}) == len(tried)
    spec = get_preset("dw-blog-final-96").spec
    suggestion = dx.Suggestion(spec.with_knobs(num_thread_x=8), (("num_thread_x", "16", "8"),), 0, 0)
    preset = get_preset("dw-blog-final-96")
    assert bench._row(preset, suggestion, {spec: 10.0, suggestion.spec: 12.0})["verdict"] == "slower"
    assert bench._row(preset, suggestion, {spec: 10.0, suggestion.spec: 8.0})["speedup"] == pytest.approx(1.25)
    assert not bench._row(preset, suggestion, {spec: 10.0})["measured"]  # stopped by the time budget
    text = bench.gpu_text([bench._row(preset, suggestion, {spec: 10.0, suggestion.spec: 12.0})], "GPU", 1, "cmd")
    assert "rightly says no one-knob move is, for 0 of 1 presets" in text and \
        "| dw-blog-final-96 | 10.00 | num_thread_x 16 → 8 | 12.00 | slower (0.83×) |" in text
    # No suggestion (near its limit): right when no neighbour is faster beyond ±5%, wrong otherwise.
    a, b = spec.with_knobs(num_thread_x=8), spec.with_knobs(unroll=True)
    near = bench._row(preset, None, {spec: 10.0, a: 9.8, b: 12.0}, [a, b])
    assert near["verdict"] == "near its limit" and near["neighbours"] == 2
    wrong = bench._row(preset, None, {spec: 10.0, a: 8.0, b: 12.0}, [a, b])
    assert wrong["verdict"] == "a neighbour is faster" and wrong["fastest"] == "num_thread_x 16 → 8"
    assert not bench._row(preset, None, {spec: 10.0, a: 8.0}, [a, b])["measured"]
    both = bench.gpu_text([near, wrong], "GPU", 1, "cmd")
    assert "for 1 of 2 presets (50%)**: 0 suggestions faster, 1 of 2 near-limit verdicts confirmed" in both


def test_nsight_compute_counters_are_quoted_beside_the_static_evidence():
    from pathlib import Path

    from explorer.analysis import ncu

    capture = (Path(__file__).parent / "data" / "ncu_raw_threads_32x1.csv").read_text()
    (launch,) = ncu.parse_ncu_csv(capture)
    counters = dx.counters_of(launch)
    assert counters["bank_conflicts"] == 11_520 + 1 and counters["achieved_occupancy"] == pytest.approx(24.61)
    assert counters["duration_us"] == pytest.approx(7.552)
    column = SharedFact("S[tx * 32]", "load", 32, 32_000, 31_000)
    found = dx.bank_conflict_rule(facts(shared=(column,), counters=counters))
    assert found.evidence[-1] == "Nsight Compute: 11,521 bank conflicts."
    occupied = dx.occupancy_rule(facts(blocks_per_sm=1, limiter="registers", counters=counters))
    assert occupied.evidence[-1] == "Nsight Compute: achieved occupancy 25%."
    stalled = ncu.KernelCounters(0, "main_kernel", "", "", {dx.STALL_METRIC.format("mio_throttle"): 57.07})
    assert dx.counters_of(stalled) == {"stall_mio_throttle": 57.07}
    found = dx.bank_conflict_rule(facts(shared=(column,), counters=dx.counters_of(stalled)))
    assert found.evidence[-1] == ("Nsight Compute: warps stalled on the shared-memory pipe (mio_throttle) 57% of "
                                  "the time.")


@pytest.mark.gpu
def test_on_a_gpu_the_diagnosis_places_the_measured_setting(capsys):
    assert main(["show", "dw-blog-channel-96", "--view", "diagnosis", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["diagnosis"]
    assert data["evidence"] == "measured"
    roofline = data["roofline"]
    assert roofline["measured_us"] > roofline["least_us"] > 0
    assert 0 < roofline["percent_of_roofline"] < 100
    assert data["findings"] and any(f["suggestion"] for f in data["findings"])


# -- global coalescing (explorer.analysis.coalescing) ------------------------------------------


def test_sectors_per_request_of_hand_made_warps():
    import numpy as np

    from explorer.analysis.coalescing import request_sectors

    lanes = np.arange(32)
    active = np.ones((1, 32), bool)

    def sectors(element, words=1):
        word = (element * words)[None, :, None] + np.arange(words)
        return tuple(int(v[0]) for v in request_sectors(word, active))

    assert sectors(lanes) == (4, 4, 128)  # consecutive floats: 128 bytes
    assert sectors(lanes * 32) == (32, 4, 128)  # a float each 128 bytes apart: 32 sectors for 4 sectors' worth
    assert sectors(lanes * 0) == (1, 1, 4)  # every lane the same float: a broadcast
    assert sectors(lanes, words=4) == (16, 16, 512)  # float4s: 512 bytes


def test_an_uncoalesced_store_in_a_real_build():
    from explorer.analysis.coalescing import analyze_coalescing
    from explorer.build import build

    # Threads (y, x) = (32, 1): a warp's lanes are 32 rows, each writing its own row of outputs.
    report = analyze_coalescing(build(get_preset("dw-blog-threads-case4").spec))
    (store,) = report.of("store")
    assert store.sectors_per_request == 32 and store.excess == 8
    loads = {a.buffer: a for a in report.of("load")}
    assert loads["Filter"].excess == 1


@pytest.mark.gpu
def test_on_a_gpu_with_ncu_the_diagnosis_quotes_the_counters(capsys):
    from explorer.analysis import ncu

    if ncu.ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    assert main(["show", "dw-blog-threads-case4", "--view", "diagnosis", "--ncu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["diagnosis"]
    assert any("Nsight Compute profiled one launch" in note for note in data["notes"])
    assert any(line.startswith("Nsight Compute: ") for f in data["findings"] for line in f["evidence"])


# -- reductions and row-wise kernels --------------------------------------------------------


def test_reuse_counts_only_loads_a_tile_could_share():
    # A matmul-like stage: 8 loads per output where 1 would do: (8 - 1) × 2.56 M / 32 requests at one per cycle.
    assert dx.reuse_rule(facts(loads_per_output=8.0)).cost_us == pytest.approx(7 * 2_560_000 / 32 / (100 * 2e3))
    # A row reduction: each output reads its own 4096 elements, which no tile shares.
    assert dx.reuse_rule(facts(loads_per_output=4096.0, compulsory_loads_per_output=4096.0)) is None
    # Beyond that floor the extra loads count again: 8 where 4 are compulsory.
    found = dx.reuse_rule(facts(loads_per_output=8.0, compulsory_loads_per_output=4.0))
    assert found.cost_us == pytest.approx(4 * 2_560_000 / 32 / (100 * 2e3))


def test_a_warp_with_idle_lanes_issues_a_request_per_load_for_its_threads_only():
    # Blocks of 8 threads: a warp's request serves 8 loads, not 32: four times the requests of full warps.
    full = dx.reuse_rule(facts(loads_per_output=8.0)).cost_us
    eight = dx.reuse_rule(facts(loads_per_output=8.0, threads_per_block=8, blocks=320_000))
    assert eight.cost_us == pytest.approx(4 * full) == pytest.approx(7 * 2_560_000 / 8 / (100 * 2e3))
    assert "fills 25% of its warps' lanes" in eight.evidence[1]


def test_threads_sharing_one_output_are_all_useful():
    # A row per block of 256 threads, reduced across the threads: 1 output per block, not 256.
    row = dict(blocks=4096, stage_outputs=4096, outputs_per_thread=1, loads_per_output=4096.0,
               compulsory_loads_per_output=4096.0)
    assert facts(**row).useful == pytest.approx(1 / 256)  # read as if each thread owned an output
    assert facts(**row, threads_per_output=256).useful == 1.0
    assert dx.findings_of(facts(**row, threads_per_output=256)) == {}


def test_one_element_16_bit_loads_are_narrow():
    # A warp of 2-byte loads asks for 64 contiguous bytes: 2 sectors per request.
    halves = GlobalFact("X[i]", "load", 2, 1000, 2000, 2000, 64_000)
    found = dx.vector_rule(facts(globals=(halves,)))
    assert found.title == "Global loads of 2 bytes per lane where 16 would do."
    assert "a 16-byte load moves 8 of them" in found.evidence[-1]
    assert found.cost_us == pytest.approx(1000 * (1 - 2 / 16) / 4 / (100 * 2e3))
    # 4-byte loads still need 4 sectors per request (a warp's 128 contiguous bytes).
    assert dx.vector_rule(facts(globals=(GlobalFact("A[i]", "load", 4, 1000, 2000, 2000),))) is None
    assert dx.vector_rule(facts(globals=(GlobalFact("A[i]", "load", 4, 1000, 4000, 4000),))) is not None


def test_an_input_read_by_each_of_three_kernels():
    # Softmax as three kernels over a 64 MB input: 192 MB read, 128 MB of it again, at 1e6 bytes per µs.
    mb64 = 64_000_000
    found = dx.reread_rule(facts(kernels=3, input_bytes=mb64, input_reads=(mb64, mb64, mb64)))
    assert found.rule == "re-reads" and "read 3.0 times" in found.title
    assert "3 kernels read the input: 192.0 MB together, where reading it once is 64.0 MB" in found.evidence[0]
    assert found.cost_us == pytest.approx(128.0)
    assert dx.reread_rule(facts(kernels=1, input_bytes=mb64, input_reads=(mb64,))) is None
    # A sum's second kernel reads the first one's partial sums, not the input.
    assert dx.reread_rule(facts(kernels=2, input_bytes=mb64, input_reads=(mb64, 0))) is None


def test_causal_attention_computing_its_masked_scores():
    # 68.7 GFLOP kept by the mask, as many computed for the masked half: half of 8,000 µs measured goes to them.
    gflop = 68_719_476_736
    found = dx.masked_work_rule(facts(masked_flops=gflop, workload_flops=gflop, measured_us=8000.0))
    assert found.rule == "masked-work" and found.cost_us == pytest.approx(4000.0)
    assert "also compute 68.7 GFLOP for the scores above the diagonal" in found.evidence[0]
    # Without a measurement the roofline's least time (10 µs here) is the base.
    assert dx.masked_work_rule(facts(masked_flops=gflop, workload_flops=gflop)).cost_us == pytest.approx(5.0)
    assert dx.masked_work_rule(facts(workload_flops=gflop)) is None


def test_16_bit_products_on_cuda_cores():
    # The roofline allows 15,000 µs at the FP32 peak (the units the template multiplies on), 1,111 µs at the
    # tensor cores': 13,889 µs the tensor cores would save, part of the roofline's time, not added to the estimate.
    cuda_cores = facts(bound_us=15000.0, tensor_core_us=1111.0)
    found = dx.cuda_cores_rule(cuda_cores)
    assert found.rule == "cuda-cores" and found.cost_us == pytest.approx(13889.0) and found.within_roof
    assert "its roofline allows 15,000.0 µs at the FP32 peak, against 1,111.0 µs on the tensor cores" in \
        found.evidence[0]
    assert dx.estimated_total(cuda_cores) == 15000.0
    assert dx.cuda_cores_rule(facts(bound_us=1111.0)) is None  # mma in the kernel, or float32 inputs
    assert dx.cuda_cores_rule(facts(bound_us=50.0, tensor_core_us=50.0)) is None  # memory-bound: nothing to gain


def test_the_roofline_of_a_template_is_the_roof_of_the_units_it_multiplies_on():
    from explorer.analysis.roofline import bound_us, published_ceilings
    from explorer.build import build
    from explorer.tabs import ANALYSES

    def least_us(preset):
        built = build(get_preset(preset).spec)
        found = dx.facts_of(built)
        # The Roofline tab's static point is the diagnosis's least time: one roof for both.
        assert ANALYSES["roofline"].analyze(built).current.latency_us == pytest.approx(found.bound_us)
        return found.bound_us, found.tensor_core_us

    h100 = published_ceilings("sm_90")
    fused = get_preset("attention-cuda-cores-d128").spec.workload
    on_cuda_cores = bound_us(h100, fused.flops, fused.compulsory_bytes, ("float32",))
    on_tensor_cores = bound_us(h100, fused.flops, fused.compulsory_bytes, ("float16",) * 3)
    assert least_us("attention-cuda-cores-d128") == (pytest.approx(on_cuda_cores), pytest.approx(on_tensor_cores))
    assert least_us("attention-mma") == (pytest.approx(on_tensor_cores), None)  # mma.sync: the tensor cores' roof
    assert least_us("matmul-naive-1024")[1] is None  # float32 inputs: their roof is the CUDA cores'


def test_masked_work_is_the_three_kernels_causal_only():
    from explorer.build import build

    def masked(preset):
        return dx.facts_of(build(get_preset(preset).spec)).masked_flops

    # 4 × 32 heads × 2048² scores × 64 × 4 FLOPs, halved by the mask: the half computed for nothing.
    assert masked("attention-unfused-causal") == 4 * 32 * 2048 * 2048 * 64 * 2
    assert masked("attention-unfused") == 0 and masked("attention-fused-causal") == 0


# 8 sequences × 16 heads × 4096 tokens × head_dim 128 in float16: K and V are 2 × 134,217,728 bytes; Q, K, V and O
# together 536,870,912 (the compulsory bytes).
KV_BYTES, COMPULSORY = 268_435_456, 536_870_912


def test_fused_attention_whose_query_tiles_reload_k_and_v():
    # Blocks of 16 query rows: K and V loaded 4096 / 16 = 256 times, 255 of them again. The kernel moves
    # 536,870,912 + 255 × 268,435,456 = 68,987,912,192 bytes: 68,987.9 µs at 1e6 bytes per µs, against 1,111 µs
    # of arithmetic.
    small = facts(bound_us=1111.0, compulsory_bytes=COMPULSORY, query_rows_per_block=16, kv_bytes=KV_BYTES,
                  kv_loaded_bytes=256 * KV_BYTES)
    found = dx.kv_reuse_rule(small)
    assert found.rule == "kv-reuse" and found.title == "Query tiles of 16 rows: K and V are loaded 256 times."
    assert found.cost_us == pytest.approx(68_987.912192 - 1111.0)
    assert "K and V (268.4 MB) are loaded 256 times, 68.72 GB in all, 68.45 GB of it again" in found.evidence[0]
    assert "the HBM roof's bandwidth" in found.evidence[1]  # priced at the roof: the L2's bandwidth is not known
    # Blocks of 128 rows, 32 loads: 8,858,370,048 bytes. At the L2's 9,000 GB/s that is 984.3 µs, within the
    # 1,111 µs of arithmetic: nothing to charge. At the roof's 1,000 GB/s it is 8,858.4 µs.
    large = dataclasses.replace(small, query_rows_per_block=128, kv_loaded_bytes=32 * KV_BYTES)
    assert dx.kv_reuse_rule(dataclasses.replace(large, device=dataclasses.replace(DEVICE, l2_gbps=9000.0))) is None
    assert dx.kv_reuse_rule(large).cost_us == pytest.approx(8_858.370048 - 1111.0)
    # Products on CUDA cores, whose roofline allows 10,000 µs: the loads of the 128-row tiles hide behind them.
    assert dx.kv_reuse_rule(dataclasses.replace(large, bound_us=10_000.0)) is None
    assert dx.kv_reuse_rule(facts(bound_us=1111.0)) is None  # not a fused attention kernel
    # The K and V of the heads in flight (40 MB) fit in a 50 MB L2 whose bandwidth is not known: the repeats
    # come from there, at a cost no published figure prices, so the rule says nothing rather than overcharge.
    in_l2 = dataclasses.replace(small, kv_in_flight_bytes=40_000_000,
                                device=dataclasses.replace(DEVICE, l2_bytes=50_000_000))
    assert dx.kv_reuse_rule(in_l2) is None
    assert dx.kv_reuse_rule(dataclasses.replace(in_l2, kv_in_flight_bytes=60_000_000)).cost_us == found.cost_us


def test_k_and_v_loaded_once_per_block_of_query_rows_in_the_fused_builds():
    from explorer.build import Spec, build
    from explorer.schedules import get_template
    from explorer.workloads import Attention

    def spec(template, causal=False, **knobs):
        return Spec(template, Attention(batch=8, heads=16, seq=4096, head_dim=128, causal=causal),
                    get_template(template).knobs(**knobs))

    # attention_fused on CUDA cores, 16-row tiles: 4,224 blocks (32 an SM × 132) run at once, 16.5 heads' worth,
    # so 18 heads' K and V (2,097,152 bytes each) are in flight: 37,748,736 bytes, within the H100's 50 MiB L2.
    # With the published figures (no L2 bandwidth) the repeats are not priced.
    narrow = dx.facts_of(build(spec("attention_fused", block_q=16, block_kv=16, kv_shared=False)))
    wide = dx.facts_of(build(spec("attention_fused", block_q=128, block_kv=16, kv_shared=False)))
    assert (narrow.kv_bytes, narrow.kv_loaded_bytes, wide.kv_loaded_bytes) == (KV_BYTES, 256 * KV_BYTES, 32 * KV_BYTES)
    assert narrow.compulsory_bytes == COMPULSORY and narrow.query_rows_per_block == 16
    assert narrow.kv_in_flight_bytes == 18 * 2_097_152 and narrow.device.l2_bytes == 50 * 2**20
    assert dx.kv_reuse_rule(narrow) is None and dx.kv_reuse_rule(wide) is None
    # Measured ceilings with the L2's bandwidth (9,000 GB/s) and the tensor cores' peak (989,000 GFLOP/s): mma.sync
    # with 64-row tiles moves 536,870,912 + 63 × 268,435,456 bytes, 1,938.7 µs, against 1,111.7 µs of arithmetic
    # (1,099,511,627,776 FLOP): 827.0 µs charged; 128-row tiles move 8,858,370,048 bytes, 984.3 µs: nothing.
    measured = Ceilings(67_000.0, 3_350.0, 9_000.0, 50 * 2**20, "measured on a test H100",
                        (("float16", 989_000.0),))
    short = dx.facts_of(build(spec("attention_mma", block_q=64, warps=4, block_kv=64, stages=1)), ceilings=measured)
    tall = dx.facts_of(build(spec("attention_mma", block_q=128, warps=4, block_kv=32, stages=2)), ceilings=measured)
    assert dx.kv_reuse_rule(short).cost_us == pytest.approx(17_448_304_640 / 9e6 - 1_099_511_627_776 / 989e6)
    assert dx.kv_reuse_rule(tall) is None
    # attention_mma, one stage: the access analysis reads its K and V copies, and counts the same bytes.
    mma = build(spec("attention_mma", block_q=64, warps=4, block_kv=64, stages=1))
    analysed = sum(g.ideal_bytes for g in dx.facts_of(mma).globals if g.op == "load" and g.buffer in ("K", "V"))
    assert dx.facts_of(mma).kv_loaded_bytes == analysed == 64 * KV_BYTES
    # Causal, 64-row and 32-key tiles: query tile t walks 2(t + 1) key tiles, 2 × (1 + … + 64) = 4,160 per head,
    # 4,160 × 32 keys × 128 × 2 bytes × 2 (K and V) × 128 heads: 32.5 times K and V.
    causal = dx.facts_of(build(spec("attention_mma", causal=True, block_q=64, warps=4, block_kv=32)))
    assert causal.kv_loaded_bytes == 4160 * 32 * 128 * 2 * 2 * 128 == 32.5 * KV_BYTES
    assert dx.facts_of(build(get_preset("attention-unfused").spec)).kv_loaded_bytes == 0  # three kernels, no tiles


def test_a_tree_after_one_load_per_thread():
    # 16,384 blocks of 256 threads, 8 per SM on 100 SMs: 21 waves, each paying 8 steps of 60 cycles.
    f = facts(blocks=16_384, tree_steps=8, loads_per_thread=1.0)
    found = dx.work_per_thread_rule(f)
    assert found.title == "Too little work per thread: 1 element before an 8-step tree."
    assert found.cost_us == pytest.approx(21 * 100 * 8 * 60 / (100 * 2e3))
    assert dx.work_per_thread_rule(facts(blocks=512, tree_steps=8, loads_per_thread=32.0)) is None
    assert dx.work_per_thread_rule(facts(loads_per_thread=1.0)) is None  # no tree


def test_facts_of_reductions_and_rowwise_builds():
    from explorer.build import build

    def of(preset):
        return dx.facts_of(build(get_preset(preset).spec))

    x = 4096 * 4096 * 4
    separate, on_chip = of("rowwise-softmax-separate"), of("rowwise-softmax-on-chip")
    assert separate.input_reads == (x, x, x) and on_chip.input_reads == (x,)
    assert separate.compulsory_loads_per_output == 4096 and separate.threads_per_output == 256
    assert separate.useful == 1.0
    tree = of("reduce-3-sequential")  # 2^22 floats: 16,384 blocks of 256 threads, one load each
    assert (tree.loads_per_thread, tree.tree_steps, tree.staged_steps) == (1.0, 8, 0)  # a tree stages nothing
    assert of("reduce-7-multiple-elements").loads_per_thread == 32
    assert of("matmul-tiled-1024").staged_steps == 1024 // 8  # block_k = 8: a loop that stages tiles


def test_the_lessons_steps_get_the_findings_that_lead_to_the_next():
    from explorer.build import build

    def diagnosis(preset):
        return dx.diagnose_spec(get_preset(preset).spec, compile=False)

    def rules(d):
        return {f.rule: f for f in d.findings}

    separate = rules(diagnosis("rowwise-softmax-separate"))
    assert set(separate) == {"re-reads", "kernels"}  # no reuse or occupancy finding on a row reduction
    moves = {f.suggestion.changes for f in separate.values()}
    assert moves == {(("fusion", "separate", "on_chip"),), (("fusion", "separate", "fused"),)}
    assert "re-reads" not in rules(diagnosis("rowwise-softmax-on-chip"))
    narrow = rules(diagnosis("rowwise-layernorm-fused"))["vector-width"]
    assert narrow.title.startswith("Global loads of 2 bytes per lane")
    little = rules(diagnosis("reduce-3-sequential"))
    assert little["work-per-thread"].suggestion.changes == (("elements_per_thread", "1", "2"),)
    assert "pipeline" not in little
    # No such finding at all, shown or not (the rules on the build's Facts: no neighbours to build for suggestions).
    many = dx.facts_of(build(get_preset("reduce-7-multiple-elements").spec))
    assert "work-per-thread" not in dx.findings_of(many)


def test_the_rule_table_names_every_rule():
    # Each rule fires on some hand-made Facts; the table the documentation prints names them all.
    fired = {dx.reread_rule(facts(kernels=3, input_bytes=100, input_reads=(100, 100, 100))).rule,
             dx.work_per_thread_rule(facts(tree_steps=8, loads_per_thread=1.0)).rule,
             dx.pipeline_rule(facts(staged_steps=64)).rule, dx.kernels_rule(facts(kernels=2)).rule,
             dx.kv_reuse_rule(facts(query_rows_per_block=16, kv_bytes=100, kv_loaded_bytes=10_000_000_000)).rule}
    assert len(dx.RULE_TABLE) == len(dx.RULES) and fired <= {name for name, _, _ in dx.RULE_TABLE}


def test_a_cpu_write_keeps_the_gpu_table_of_the_last_gpu_run():
    import diagnosis_agreement  # bench/diagnosis_agreement.py (pytest's pythonpath)

    document = "# Diagnosis\n\ngrades\n\n## The top suggestion, tried on the GPU\n\n| a | 1.00 |\n"
    assert diagnosis_agreement.kept_gpu_section(document) == "## The top suggestion, tried on the GPU\n\n| a | 1.00 |\n"
    assert diagnosis_agreement.kept_gpu_section("# Diagnosis\n\ngrades\n") == ""


def test_a_tree_whose_adding_threads_are_spread_over_the_warps():
    """Harris's kernel 1 at 256 threads (8 warps): steps s = 1 … 128 keep 8, 8, 8, 8, 8, 4, 2, 1 warps busy for
    128, 64, 32, 16, 8, 4, 2, 1 adding threads, which side by side fill 4, 2, 1, 1, 1, 1, 1, 1 warps: 35 extra
    warp steps per block. Kernels 2 and 3 put the adding threads first: none. At kernel 2, whose bank conflicts
    sequential and divergent addressing both remove, the suggestion is sequential (no divergence either)."""
    from explorer.analysis.diagnosis import diagnose_spec, facts_of
    from explorer.build import build

    steps = {pid: facts_of(build(get_preset(pid).spec)).divergent_warp_steps
             for pid in ("reduce-1-interleaved-divergent", "reduce-2-interleaved-strided", "reduce-3-sequential")}
    assert steps == {"reduce-1-interleaved-divergent": 35, "reduce-2-interleaved-strided": 0, "reduce-3-sequential": 0}
    first = diagnose_spec(get_preset("reduce-1-interleaved-divergent").spec, compile=False)
    assert "divergence" in {found.rule for found in first.findings}
    second = diagnose_spec(get_preset("reduce-2-interleaved-strided").spec, compile=False)
    assert "divergence" not in {found.rule for found in second.findings}
    moves = [s.describe() for s in second.suggestions()]
    assert any("addressing interleaved_strided → sequential" in move for move in moves)
    assert not any("interleaved_divergent" in move for move in moves)


def test_the_gpu_half_end_to_end_with_a_stand_in_measurement(monkeypatch, tmp_path):
    import tempfile

    import diagnosis_agreement as bench
    from server_fakes import fake_measurement

    import explorer.measure

    # Two presets this process has diagnosed already (test_cli_json_shape, with the cubin, and
    # test_the_lessons_steps_get_the_findings_that_lead_to_the_next, above): the forked processes find their
    # builds, their neighbours' and the first one's SASS in the memory they start with.
    presets = [get_preset("reduce-1-interleaved-divergent"), get_preset("rowwise-softmax-separate")]
    monkeypatch.setattr(bench, "presets_to_try", lambda: presets)
    measured = []

    def stand_in(spec, settings=None, library=None, **_):
        measured.append(spec)
        return fake_measurement(spec, 10.0 if spec in {p.spec for p in presets} else 5.0)

    monkeypatch.setattr(explorer.measure, "measure", stand_in)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(bench, "START_METHOD", "fork")  # no CUDA here (tests/README.md)
    rows = bench.try_on_gpu(1, __import__("time").time() + 600, lambda text: None)
    assert [r["preset"] for r in rows] == [p.id for p in presets]
    assert all(r["verdict"] == "faster" and r["speedup"] == 2.0 for r in rows if r["suggestion"])
    assert len(measured) == len(set(measured)) >= 3
    assert not list(tmp_path.glob("diagnosis-libraries-*"))  # the libraries go with the run


# -- the rules of the later lessons: barriers, tile loops on the tensor cores, fused attention on CUDA cores --


def test_block_wide_barriers_for_steps_one_warp_works_in():
    # 8,192 blocks, 8 resident per SM on 100 SMs: 11 waves, each paying 6 barriers of BARRIER_CYCLES per SM.
    from explorer.analysis.diagnosis.rules.barriers import BARRIER_CYCLES

    found = dx.barrier_rule(facts(blocks=8192, warp_only_barriers=6))
    assert found.rule == "barriers" and "6 block-wide barriers" in found.title
    assert found.cost_us == pytest.approx(11 * 6 * BARRIER_CYCLES / (2.0 * 1e3))
    assert dx.barrier_rule(facts()) is None


def test_barriers_of_harriss_trees():
    """256 threads, sequential addressing: steps s = 32 … 1 add in the first warp only, each behind a
    __syncthreads() with last_warp = tree (6), none once the last warp is unrolled or shuffles; the strided
    tree's steps s = 4 … 128 have 32 or fewer adding threads, the first ones (6); the divergent tree's adding
    threads are spread over the warps but at its last step (s = 128: thread 0 alone)."""
    from explorer.analysis.diagnosis.facts import _warp_only_barriers
    from explorer.build import build

    counts = {pid: _warp_only_barriers(build(get_preset(pid).spec))
              for pid in ("reduce-1-interleaved-divergent", "reduce-2-interleaved-strided",
                          "reduce-4-first-add-during-load", "reduce-5-unroll-last-warp", "reduce-shuffle")}
    assert counts == {"reduce-1-interleaved-divergent": 1, "reduce-2-interleaved-strided": 6,
                      "reduce-4-first-add-during-load": 6, "reduce-5-unroll-last-warp": 0, "reduce-shuffle": 0}


def tile_loop(**changes) -> dx.TileLoop:
    """1,000 steps of 4 MFLOP on tensor cores of 400 TFLOP/s (10 µs in all), 8,192 scores and 8,192 rescaled
    accumulators a step, 64,000 bytes copied a step into 2 stages, one consumer and no producer."""
    base = dict(instruction="wgmma", steps=1000, step_flops=4_000_000, step_bytes=64_000, stages=2, producer=False,
                consumers=1, overlap=False, scores=8192, rescaled=8192, peak_gflops=400_000)
    return dx.TileLoop(**{**base, **changes})


def test_the_softmax_beside_the_products():
    # On 100 SMs at 2 GHz, 128 FP32 lanes each: 1,000 × 8,192 × (1/16 + 4/128) cycles of exponentials
    # (3.84 µs) and 1,000 × 8,192 / 128 of rescaling (0.32 µs), beside 10 µs of products.
    from explorer.analysis.diagnosis import tiles

    one = facts(blocks=100, blocks_per_sm=1, loop=tile_loop())
    assert tiles.softmax_parts_us(one) == pytest.approx((3.84, 0.32))
    assert dx.softmax_rule(one).cost_us == pytest.approx(3.84)  # one stream: nothing hides it
    assert dx.rescale_rule(one).cost_us == pytest.approx(0.32)
    two = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(consumers=2))
    assert dx.softmax_rule(two).cost_us == pytest.approx(3.84 / 2)  # the other consumer's products hide half
    overlapped = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(consumers=2, overlap=True))
    assert dx.softmax_rule(overlapped).cost_us == pytest.approx(3.84 / 4)
    assert "4 stream(s) per SM" in dx.softmax_rule(overlapped).title


def test_copies_ahead_of_the_multiplies():
    # 10 rounds per SM (1,000 steps, 100 SMs, one block each), each 1.416 µs (10 µs of products and 4.16 µs of
    # softmax over 10); a copy takes (1,000 + 64,000 / 64) cycles = 1 µs. A producer's copies run 1 tile ahead,
    # hiding it; a consumer's own run half a tile ahead: 1 − 0.708 µs a round waits.
    from explorer.analysis.diagnosis import tiles

    alone = facts(blocks=100, blocks_per_sm=1, loop=tile_loop())
    assert tiles.ahead(alone.loop) == 0.5 and tiles.ahead(alone.loop, producer=True) == 1
    assert dx.ring_rule(alone) is None
    assert dx.producer_rule(alone).cost_us == pytest.approx(10 * (1.0 - 0.5 * 1.416))
    assert dx.producer_rule(facts(blocks=100, blocks_per_sm=1, loop=tile_loop(producer=True))) is None
    # Overlap holds the previous tile's buffer: with a producer, 2 stages run half a tile ahead.
    held = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(producer=True, overlap=True))
    assert tiles.ahead(held.loop) == 0.5
    round_us = (10 + tiles.exposed_softmax_us(held)) / 10
    assert dx.ring_rule(held).cost_us == pytest.approx(10 * (1.0 - 0.5 * round_us))
    assert "stages 2" not in dx.ring_rule(held).title and "run 0.5 tile(s) ahead" in dx.ring_rule(held).title
    assert dx.ring_rule(facts(blocks=100, blocks_per_sm=1, loop=tile_loop(producer=True, overlap=True,
                                                                           stages=3))) is None


def test_mma_sync_on_hopper_and_no_latency_rule_for_wgmma():
    from explorer.analysis.diagnosis.tiles import MMA_SYNC_SHARE

    mma = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(instruction="mma.sync"))
    assert dx.mma_sync_rule(mma).cost_us == pytest.approx(10 / MMA_SYNC_SHARE - 10)
    assert dx.mma_sync_rule(facts(blocks=100, blocks_per_sm=1, loop=tile_loop())) is None
    # One block of 4 warps per SM: too few to hide latency by the warps' count, but a wgmma loop hides it with
    # its ring of copies, which its own findings price.
    few = dict(blocks=1000, threads_per_block=128, blocks_per_sm=1, limiter="shared memory")
    assert dx.occupancy_rule(facts(**few)) is not None
    assert dx.occupancy_rule(facts(**few, loop=tile_loop())) is None
    assert dx.occupancy_rule(facts(**few, loop=tile_loop(instruction="mma.sync"))) is not None


def test_the_tile_loops_of_the_attention_and_matmul_templates():
    """attention-hopper (8 × 16 heads × 4096², d 128; 2 consumers of 64 rows, 128 keys a step): 4,096 blocks of
    32 steps, each step 2 × 2 × 128 × 128 × 128 FLOP and a K and a V tile of 128 × 128 halves; its consumers hold
    the scores (64), the probabilities (32) and O (64) per thread. hopper-ws-fp16-4096: 16 × 32 tiles of 64
    steps of 2 × 128 × 256 × 64 FLOP, 48 KB a step; 2 consumers of 64 rows hold 64 × 256 / 128 accumulators."""
    from explorer.analysis.diagnosis.tiles import tile_loop as of
    from explorer.analysis.roofline import published_ceilings
    from explorer.build import build

    h100 = published_ceilings("sm_90")
    attention = of(build(get_preset("attention-hopper").spec), h100)
    assert (attention.instruction, attention.steps, attention.step_flops, attention.step_bytes) == \
        ("wgmma", 4096 * 32, 2 * 2 * 128 * 128 * 128, 2 * 128 * 128 * 2)
    assert (attention.stages, attention.producer, attention.consumers, attention.overlap) == (2, True, 2, False)
    assert (attention.scores, attention.rescaled, attention.fragments) == (128 * 128, 128 * 128, 64 + 32 + 64)
    assert attention.tensor_us == pytest.approx(attention.flops / (dict(h100.tensor_gflops)["float16"] * 1e3))
    gemm = of(build(get_preset("hopper-ws-fp16-4096").spec), h100)
    assert (gemm.steps, gemm.step_flops, gemm.step_bytes, gemm.fragments, gemm.scores) == \
        (16 * 32 * 64, 2 * 128 * 256 * 64, (128 + 256) * 64 * 2, 128, 0)
    mma = of(build(get_preset("attention-mma-cp-async").spec), h100)
    assert (mma.instruction, mma.consumers, mma.stages, mma.producer) == ("mma.sync", 4, 2, False)
    assert of(build(get_preset("reduce-4-first-add-during-load").spec), h100) is None


def test_a_neighbours_registers_follow_its_fragments():
    """attention-mma-cp-async's warps of 16 rows hold 32 + 32 + 16 + 64 fragment registers (Q, S, P, O) for 64
    keys a step; with 32 keys, S and P halve: 24 fewer. Compiled at 173, the neighbour is estimated at 149. At
    attention-mma-tall (32 rows a warp: twice the fragments, 240), compiled at 255 registers and 64 bytes of
    spills, 64 rows a block of 4 warps need 120: 255 + 16 − 120 = 151, no spills."""
    import dataclasses

    from explorer.build import build

    cp_async = get_preset("attention-mma-cp-async").spec
    like = dataclasses.replace(dx.facts_of(build(cp_async)), registers=173, spill_bytes=0)
    assert like.loop.fragments == 144
    neighbour = dx.facts_of(build(cp_async.with_knobs(block_kv=32)), like=like)
    assert (neighbour.registers, neighbour.spill_bytes) == (149, 0)
    tall = get_preset("attention-mma-tall").spec
    spilled = dataclasses.replace(dx.facts_of(build(tall)), registers=255, spill_bytes=64)
    shorter = dx.facts_of(build(tall.with_knobs(block_q=64)), like=spilled)
    assert (shorter.registers, shorter.spill_bytes) == (151, 0)


def test_a_move_that_raises_another_finding_is_tried_with_the_knob_that_relieves_it():
    from explorer.analysis.diagnosis.search import _relieving_moves

    spec = get_preset("attention-hopper").spec
    now = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(producer=True))
    overlapped = facts(blocks=100, blocks_per_sm=1, loop=tile_loop(producer=True, overlap=True))
    assert dx.ring_rule(now) is None and dx.ring_rule(overlapped) is not None  # the move raises ring-depth
    moves = _relieving_moves(now, [(spec.with_knobs(overlap=True), (("overlap", "false", "true"),), overlapped)])
    changes = {path[0][1] for path in moves}
    assert (("overlap", "false", "true"), ("stages", "2", "3")) in changes
    assert all(change[0] == ("overlap", "false", "true") and change[1][0] in ("stages", "warp_specialize")
               for change in changes)
    assert _relieving_moves(now, [(spec, (("overlap", "false", "true"),), now)]) == []  # nothing raised


def fma_loop(**changes) -> dx.FmaLoop:
    """attention-fused's inner loops, hand-counted: 4 rows × 4 keys × 64 columns + 4 rows × 4 columns × 64 keys
    multiply-adds per thread and key tile; 64 × (4 + 4) loads of Q and K and as many conversions, 64 × 4 loads
    of P and 64 × 4 of V and their conversions; 4 keys × 64 columns × 16 lines of K a warp."""
    base = dict(steps=1000, threads=256, fmas=2048, others=1792, k_wavefronts=4096, fp32_gflops=50_000)
    return dx.FmaLoop(**{**base, **changes})


def test_fused_attention_on_cuda_cores_issues_loads_beside_its_multiply_adds():
    # 1,000 tiles × 256 threads × 2,048 multiply-adds at 50 TFLOP/s: 20.97 µs; 0.875 other instructions each.
    loop = fma_loop()
    assert loop.fma_us == pytest.approx(1000 * 256 * 2048 * 2 / 5e7)
    assert dx.issue_rule(facts(fma_loop=loop)).cost_us == pytest.approx(loop.fma_us * 0.875)
    # 1,000 × 8 warps × 4,096 wavefronts at one a cycle on 100 SMs at 2 GHz: 163.84 µs, beyond 1.875 × 20.97 µs.
    assert dx.kv_global_rule(facts(fma_loop=loop)).cost_us == pytest.approx(163.84 - 1.875 * loop.fma_us)
    assert dx.kv_global_rule(facts(fma_loop=fma_loop(k_wavefronts=0))) is None


def test_the_inner_loops_of_the_fused_attention_presets():
    from explorer.analysis.diagnosis.tiles import fma_loop as of
    from explorer.analysis.roofline import published_ceilings
    from explorer.build import build

    h100 = published_ceilings("sm_90")
    fused = of(build(get_preset("attention-fused").spec), h100)
    assert (fused.threads, fused.fmas, fused.others, fused.k_wavefronts) == (256, 2048, 1792, 4096)
    assert fused.steps == 4 * 32 * (2048 // 64) * (2048 // 64)
    # K and V in shared memory, 8 rows × 4 keys a thread over 8 lanes a row: 64 × 12 loads and conversions in
    # step 1; 32 × 8 loads of P, 32 × 8 of V and their conversions in step 3; for 8 × 4 × 64 + 8 × 8 × 32.
    shared = of(build(get_preset("attention-fused-shared").spec), h100)
    assert (shared.fmas, shared.others, shared.k_wavefronts) == (4096, 2 * 768 + 256 + 512, 0)
    # float32 tiles, 4-element loads: no conversion; 64 / 4 × 20 + 64 / 4 × 4 + 64 × 16 loads.
    wide = of(build(get_preset("attention-fused-4096").spec), h100)
    assert (wide.fmas, wide.others) == (8192, 320 + 64 + 1024)


def test_a_step_not_claimed_faster_agrees_with_a_setting_near_its_limit():
    steps = {s.preset.id: s for s in get_lesson("rowwise").steps}
    on_chip = steps["rowwise-softmax-on-chip"]  # no slower than the fused kernel
    fused = steps["rowwise-softmax-fused"]  # faster than the separate kernels
    assert not agreement.claims_faster(on_chip) and agreement.claims_faster(fused)
    found = (dx.Finding("vector-width", "", (), 1.0, ""),)
    near = dx.Diagnosis(on_chip.previous.spec, found, limit="No setting one knob away is estimated faster …")
    grade = agreement.grade_step("rowwise", on_chip, near)
    assert grade.agrees and grade.agrees_near_limit and grade.agreeing is None
    assert not agreement.grade_step("rowwise", on_chip, dx.Diagnosis(on_chip.previous.spec, found)).agrees
    # A step claimed faster is advice that a move pays: a diagnosis near its limit does not agree with it.
    assert not agreement.grade_step("rowwise", fused, dx.Diagnosis(fused.previous.spec, found, limit="…")).agrees


def test_the_gpus_verdict_grades_a_step_and_the_strict_grade_beside_it():
    step = {s.preset.id: s for s in get_lesson("depthwise_blog").steps}["dw-blog-threads-case2"]  # num_thread_y 8 → 4
    before, after = step.previous.spec, step.preset.spec
    assert agreement.claims_faster(step)  # the blog: 9.7 → 8.8 µs on a GTX 1080

    def suggesting(**knobs):
        move = dx.Suggestion(before.with_knobs(**knobs), (), 0, 0)
        return dx.Diagnosis(before, (dx.Finding("reuse", "", (), 1.0, "", move),))

    near = dx.Diagnosis(before, (dx.Finding("reuse", "", (), 1.0, ""),), limit="No setting one knob away …")
    slower = {before: 3.54, after: 4.41}  # the H100: ×0.80, the claim not reproduced
    move = agreement.grade_step("depthwise_blog", step, suggesting(num_thread_y=4), slower)
    assert move.measured_speedup == pytest.approx(3.54 / 4.41) and not move.faster
    assert move.agrees_strictly and not move.agrees  # it advises a move the GPU measured slower
    held = agreement.grade_step("depthwise_blog", step, near, slower)
    assert held.agrees and held.agrees_near_limit and not held.agrees_strictly
    other = agreement.grade_step("depthwise_blog", step, suggesting(num_thread_x=16), slower)
    assert other.agrees and other.declines and not other.agrees_strictly
    faster = {before: 4.41, after: 3.54}
    assert agreement.grade_step("depthwise_blog", step, suggesting(num_thread_y=4), faster).agrees
    assert not agreement.grade_step("depthwise_blog", step, near, faster).agrees
    # Not measured: the tutorial's claim (faster) stands in, and only the move agrees.
    assert agreement.grade_step("depthwise_blog", step, suggesting(num_thread_y=4)).agrees
    assert not agreement.grade_step("depthwise_blog", step, near).agrees
    grades = [move, held, other]
    assert agreement.agreement_share(grades) == (2, 3) and agreement.agreement_share(grades, strict=True) == (1, 3)


def test_a_step_that_changes_the_workload_is_graded_at_step_ks_knobs_on_the_new_workload():
    steps = {s.preset.id: s for s in get_lesson("depthwise_blog").steps}
    case1 = steps["dw-blog-vthread-case1"]  # 96×96, after the thread table's case 4 on 32×32
    diagnosed = agreement.diagnosed_setting(case1)
    assert diagnosed.knobs == case1.previous.spec.knobs and diagnosed.workload == case1.preset.spec.workload
    assert not agreement.claims_faster(case1)  # no claim against case 4's knobs on 96×96
    # The blocking step on 64×64 after the channel step on 96×96: the channel step on 64×64 is step 3, and the
    # blog claims the blocking faster than it.
    blocking = steps["dw-blog-blocking-64"]
    assert agreement.diagnosed_setting(blocking) == steps["dw-blog-channel-64"].preset.spec
    assert agreement.claims_faster(blocking)
    within = steps["dw-blog-vthread-case2"]
    assert agreement.diagnosed_setting(within) == within.previous.spec
    refused = agreement.grade_step("depthwise_blog", case1, dx.refusal(diagnosed, __import__(
        "explorer.errors", fromlist=["InvalidKnobs"]).InvalidKnobs("too big", ())))
    assert refused.not_graded == agreement.REFUSED and not refused.graded


def test_the_recorded_times_hold_every_search_row():
    import calibrate_diagnosis as bench

    times, about = bench.recorded_times()
    assert times[get_preset("dw-blog-threads-case2").spec] == pytest.approx(4.409342920353982)
    searched = [s for s in times if s.template == "conv1d" and s.knobs.threads_x == 1 and s.knobs.threads_y == 1
                and s.knobs.formulation == "filter_reduction" and s.knobs.reduction_split == 8]
    assert len(times) > 2000 and searched  # beyond the 24 a search the fit takes


# -- the calibration (bench/calibrate_diagnosis.py), without a GPU ---------------------------------------------


def calibration_table(rows):
    """A table of (measured, bound, cost of rule a, cost of rule b, group) rows."""
    import numpy as np
    from calibrate_diagnosis import Table

    return Table(["a", "b"], np.array([r[0] for r in rows], float), np.array([r[1] for r in rows], float),
                 np.array([[r[2], r[3]] for r in rows], float), [r[4] for r in rows])


def test_the_fit_scales_each_rules_cost_to_the_measured_times():
    import numpy as np
    from calibrate_diagnosis import SCALES, fit

    # measured = bound + 1.5 × cost of a (rule b never fires): a's scale is the grid's value nearest 1.5.
    rows = [(10 + 1.5 * c, 10, c, 0, f"w{i % 3}") for i, c in enumerate((1, 2, 3, 4, 5, 6, 7, 8))]
    t = calibration_table(rows)
    scales = fit(t, np.arange(len(rows)))
    assert scales[0] == pytest.approx(1.5, rel=0.03) and scales[1] == 1.0
    assert np.allclose(t.estimate(scales), t.measured, rtol=0.05)
    assert SCALES.min() == 0.5 and SCALES.max() == 2  # a factor of 2 either way of the model's constants
    few = calibration_table(rows[:4])  # fewer than MIN_SETTINGS settings: the model's constants stay
    assert fit(few, np.arange(4))[0] == 1.0


def test_settings_that_run_for_a_few_microseconds_are_left_out_of_the_fit():
    from calibrate_diagnosis import MIN_US, Sample, table_of

    spec = get_preset("reduce-4-first-add-during-load").spec
    samples = [Sample(spec, MIN_US / 2, "test"), Sample(spec.with_knobs(threads=128), 2 * MIN_US, "test"),
               Sample(spec.with_knobs(threads=64), 3 * MIN_US, "test")]
    views = [{"bound_us": 1.0, "costs": {"a": 1.0}}, {"bound_us": 1.0, "costs": {"a": 2.0}}, None]  # None: refused
    t, kept = table_of(samples, views, ["a", "b"])
    assert [s.measured_us for s in kept] == [2 * MIN_US] and t.costs.tolist() == [[2.0, 0.0]]


def test_held_out_errors_per_rule_and_of_one_knob_speedups():
    from calibrate_diagnosis import Sample, held_out

    spec = get_preset("reduce-4-first-add-during-load").spec
    # Pairs one knob apart (threads 256 against 128 …) of one workload, the same law in every fold.
    specs = [spec.with_knobs(threads=t, elements_per_thread=e) for t in (64, 128, 256) for e in (2, 4, 8)]
    rows = [(10 + 1.5 * (i + 1), 10, i + 1, 0, f"group {i % 3}") for i in range(len(specs))]
    t = calibration_table(rows)
    samples = [Sample(s, row[0], "test") for s, row in zip(specs, rows, strict=True)]
    errors = held_out(t, samples)
    assert errors["rules"]["a"]["held_out_settings"] == len(specs) and errors["rules"]["b"]["held_out_settings"] == 0
    assert errors["rules"]["a"]["held_out_error"] < 0.02 and errors["speedup_error"] < 0.02
    assert errors["pairs"] == 18  # each of 9 settings has 2 + 2 neighbours one knob away, each pair counted once


def test_the_graded_steps_settings_are_left_out_of_the_fit_and_their_error_stated_apart():
    from calibrate_diagnosis import Sample, calibration

    spec = get_preset("reduce-4-first-add-during-load").spec
    specs = [spec.with_knobs(threads=t, elements_per_thread=e) for t in (64, 128, 256) for e in (2, 4, 8)]
    rows = [(10 + 1.5 * (i + 1), 10, i + 1, 0, f"group {i % 3}") for i in range(len(specs))]
    # Three graded settings that follow another law (10 + 4 × cost): the fit must not see them.
    graded = [spec.with_knobs(threads=512, elements_per_thread=e) for e in (2, 4, 8)]
    rows += [(10 + 4 * c, 10, c, 0, "group 0") for c in (1, 2, 3)]
    samples = [Sample(s, row[0], "test") for s, row in zip(specs + graded, rows, strict=True)]
    about = {"machine": "H100", "date": "2026-11-25", "l2_gbps": 0}
    c = calibration(calibration_table(rows), samples, about, "cmd", set(graded))
    assert c["settings"] == 9 and c["rules"]["a"]["scale"] == pytest.approx(1.5, rel=0.03)
    # Estimated 10 + k × a's scale (near 1.5: 11.5, 13, 14.5 µs) against 14, 18, 22 measured: the median error is
    # the middle one's, 18 / 13 - 1; of the three one-knob speedups (14/18 against 11.5/13 …) the smallest pair's,
    # 18 × 11.5 / (14 × 13) - 1.
    a = c["rules"]["a"]["scale"]
    lessons = c["lessons"]
    assert lessons["settings"] == 3 and lessons["settings_error"] == pytest.approx(18 / (10 + 2 * a) - 1, abs=1e-3)
    assert lessons["pairs"] == 3
    assert lessons["speedup_error"] == pytest.approx(18 * (10 + a) / (14 * (10 + 2 * a)) - 1, abs=1e-3)
    every = calibration(calibration_table(rows), samples, about, "cmd")  # fitted to them too: another scale
    assert every["settings"] == 12 and every["rules"]["a"]["scale"] != a and every["lessons"]["settings"] == 0


def test_the_recorded_settings_and_the_dry_run():
    import calibrate_diagnosis as bench

    samples, about = bench.recorded_samples()
    assert len(samples) > 300 and about["machine"] == "NVIDIA H100 80GB HBM3" and about["l2_gbps"] > 5000
    sources = {s.source for s in samples}
    assert "bench/results/lessons-sm_90.json" in sources and "docs/lessons-gpu.md" in sources
    reduce5 = next(s for s in samples if s.spec == get_preset("reduce-5-unroll-last-warp").spec)
    assert reduce5.measured_us == 10.94  # docs/lessons-gpu.md's table
    assert len(bench.pairs_of(samples)) > 100


def test_measured_samples_are_kept_and_a_refit_reads_them_back(monkeypatch, tmp_path):
    import json

    import calibrate_diagnosis as bench

    first, second = get_preset("reduce-5-unroll-last-warp").spec.with_knobs(threads=128), get_preset("conv1d-v2").spec
    samples = [bench.Sample(first, 12.5, "measured by this run"), bench.Sample(second.with_knobs(threads_y=2), 30.25,
                                                                              "measured by this run")]
    about = {"machine": "NVIDIA H200", "date": "2026-12-04", "l2_gbps": 9000.0, "l2_from": "measured", "target": "h200"}
    assert bench.samples_path("NVIDIA H200") == bench.RESULTS / "calibration-nvidia-h200.json"
    path = tmp_path / "calibration-nvidia-h200.json"
    bench.save_samples(samples, about, path)
    kept = json.loads(path.read_text())
    kept["samples"].append({"setting": {**kept["samples"][0]["setting"], "knob.no_such_knob": "1"},
                            "measured_us": 1.0})  # a knob renamed since: not the setting measured
    path.write_text(json.dumps(kept))
    said = []
    loaded, header = bench.load_samples(path, said.append)
    assert header == about and [(s.spec, s.measured_us) for s in loaded] == [(first, 12.5), (second.with_knobs(
        threads_y=2), 30.25)]
    assert {s.source for s in loaded} == {str(path)} and len(said) == 1 and "no_such_knob" in said[0]
    # --recorded --samples fits to them (the static views stood in for: they need builds, not the file).
    monkeypatch.setattr(bench, "cached_views", lambda samples, target, workers, cache: [
        {"bound_us": 10.0, "costs": {}} for _ in samples])
    out = tmp_path / "table.json"
    assert bench.main(["--recorded", "--samples", str(path), "--write", "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert table["machine"] == "NVIDIA H200" and table["measured_by"] == [str(path)] and table["settings"] == 2


def test_the_diagnosis_reads_the_calibration(monkeypatch, tmp_path):
    import json

    from explorer.analysis.diagnosis import calibration

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"machine": "GPU", "date": "today", "settings": 3, "speedup_error": 0.2,
                                "rules": {"kernels": {"scale": 2.5}}, "devices": {"sm_90": {"l2_gbps": 7000}}}))
    monkeypatch.setattr(calibration, "PATH", path)
    monkeypatch.setattr(calibration, "table", ORIGINAL_TABLE)  # read from PATH, once
    ORIGINAL_TABLE.cache_clear()
    try:
        assert calibration.scale("kernels") == 2.5 and calibration.scale("spills") == 1.0
        assert calibration.speedup_error() == 0.2 and calibration.l2_gbps("sm_90") == 7000
        two = facts(kernels=3)
        assert dx.kernels_rule(two).cost_us == pytest.approx(2 * 1.2)  # the check: the model's constants
        scaled = dx.findings_of(two)["kernels"]  # through its Rule: × the fitted scale
        assert scaled.cost_us == pytest.approx(2.5 * 2 * 1.2) and "× 2.50" in scaled.cost_rule
    finally:
        ORIGINAL_TABLE.cache_clear()

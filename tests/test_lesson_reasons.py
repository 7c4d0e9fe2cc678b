"""Why a measured timing claim may differ from the tutorial's: each reason from hand-made
evidence and hand-made times (no GPU needed), and the measured steps' record."""
import pytest

from explorer import lesson_reasons as R
from explorer import lessons as L
from explorer.build import build
from explorer.errors import ExplorerError
from explorer.presets import get_preset

# Step 8 of the blog's lesson claims to be faster than step 7 (the tutorial: 8.8 vs 9.7 µs on a GTX 1080).
CASE1, CASE2 = get_preset("dw-blog-threads-case1"), get_preset("dw-blog-threads-case2")
(FASTER,) = CASE2.compare


def evidence(blocks=256, degree=1, occupancy=1.0):
    return R.Evidence(shared_bytes=4660, bank_conflict_degree=degree, outputs_per_thread=8, loads_per_output=3.75,
                      blocks_per_sm=8, occupancy=occupancy, occupancy_limiter="threads", registers="not compiled",
                      blocks=blocks)


def step(preset, us, roofline_pct=None, error="", **static):
    return R.MeasuredStep(preset.id, us, None, roofline_pct, None, error, evidence(**static))


def why(this_us, other_us, this=None, other=None, sm_count=None, comparison=FASTER):
    this, other = this or step(CASE2, this_us), other or step(CASE1, other_us)
    check = L.check_comparison(CASE2, comparison, {CASE2.id: this_us, CASE1.id: other_us}, where="H100")
    return R.reasons(check, 8, this, other, sm_count)


def test_within_the_noise_band_and_a_few_microseconds():
    # 4.1 / 4.0 = ×1.025: within ±5%; both under FEW_MICROSECONDS (10 µs).
    assert why(4.0, 4.1) == ("The two differ by less than ±5% here, within run-to-run noise; both take a few "
                             "microseconds, where launch cost and the last wave of blocks weigh as much as the "
                             "schedule.")


def test_reversed_order_and_both_near_the_roof():
    # 20 / 30 = ×0.67: step 8 is slower; 70% and 80% of the roofline are both ≥ NEAR_ROOF (60%).
    this, other = step(CASE2, 30.0, roofline_pct=70.0), step(CASE1, 20.0, roofline_pct=80.0)
    assert why(30.0, 20.0, this, other) == (
        "The order is reversed here (×0.67); both run at 70% or more of the roofline, so the GPU's bandwidth or "
        "peak, not the schedule, sets their time.")


def test_a_grid_smaller_than_the_gpu():
    # 100 blocks for 132 SMs leaves 32 SMs idle; 256 blocks fill them. 20 vs 20.5 µs (×1.025): noise, but not a few µs.
    this = step(CASE2, 20.0, blocks=100)
    assert why(20.0, 20.5, this, sm_count=132) == (
        "The two differ by less than ±5% here, within run-to-run noise; step 8 launches only 100 blocks for 132 SMs.")
    assert "blocks for" not in why(20.0, 20.5, this, sm_count=None)  # the SMs unknown: no such reason


def test_bank_conflicts_and_occupancy_that_differ():
    this = step(CASE2, 30.0, degree=1, occupancy=1.0)
    other = step(CASE1, 20.0, degree=2, occupancy=0.5)  # |1.0 - 0.5| ≥ 0.25
    assert why(30.0, 20.0, this, other) == (
        "The order is reversed here (×0.67); the bank model gives 1-way against 2-way conflicts; occupancy is 100% "
        "against 50%.")


def test_a_kernel_the_bank_model_cannot_read_gives_no_bank_reason():
    # The written attention kernel has no bank figure (None): no "None-way" sentence, occupancy still compared.
    this = step(CASE2, 30.0, degree=None, occupancy=1.0)
    other = step(CASE1, 20.0, degree=2, occupancy=0.5)
    assert why(30.0, 20.0, this, other) == "The order is reversed here (×0.67); occupancy is 100% against 50%."


def test_at_most_three_reasons():
    this = step(CASE2, 30.0, roofline_pct=70.0, blocks=100, degree=1)
    other = step(CASE1, 20.0, roofline_pct=80.0, blocks=64, degree=2)
    text = why(30.0, 20.0, this, other, sm_count=132)
    assert text.count(";") == 2 and text.endswith("step 8 launches only 100 blocks for 132 SMs.")


def test_one_reason_alone_names_the_hardware_too():
    # 30 vs 20 µs the wrong way round, nothing else: the tutorial's GPU is named as the other difference.
    assert why(30.0, 20.0) == ("The order is reversed here (×0.67); nothing in the static analyses singles out a "
                               "cause: GTX 1080 and this GPU differ in cache sizes, memory bandwidth and compiler.")


def test_same_speed_claims_have_no_noise_reason():
    same = L.Comparison(CASE1.id, "same_speed")
    assert "noise" not in why(40.0, 20.0, comparison=same) and "reversed" not in why(40.0, 20.0, comparison=same)


def test_without_a_measurement_the_reason_is_the_error():
    check = L.check_comparison(CASE2, FASTER, {CASE1.id: 4.0}, errors={CASE2.id: "wrong result: x"})
    assert R.reasons(check, 8, step(CASE2, None, error="wrong result: x"), step(CASE1, 4.0), 132) == "wrong result: x"
    assert R.reasons(check, 8, step(CASE2, None), None, 132) == "the compared step was not measured"


def test_measure_steps_keeps_the_record_and_the_evidence():
    from server_fakes import fake_measurement

    by_spec = {CASE2.spec: 4.0, CASE1.spec: None}  # None: a wrong result
    done = []
    found = R.measure_steps([CASE2, CASE1], lambda spec: fake_measurement(spec, by_spec[spec]),
                            lambda spec: build(spec, "h100"), on_done=lambda p, us, error: done.append(p.id))
    ok, wrong = found[CASE2.id], found[CASE1.id]
    # 2·256·32·32·9 = 4,718,592 FLOP in 4 µs; the fake roofline allows 2 µs: 50%.
    assert (ok.median_us, ok.gflops, ok.roofline_us, ok.percent_of_roofline) == (
        4.0, pytest.approx(1179.648), 2.0, 50.0)
    assert ok.error == "" and ok.blocks == 256  # one block per 32×32 channel
    assert wrong.median_us is None and wrong.error.startswith("wrong result:") and wrong.evidence is not None
    assert done == [CASE2.id, CASE1.id]


def test_a_step_that_cannot_be_built_has_no_evidence():
    def fails(spec):
        raise ExplorerError("The kernel crashed.")

    (found,) = R.measure_steps([CASE2], fails, fails).values()
    assert found.error == "The kernel crashed." and found.evidence is None and found.blocks is None


def test_evidence_counts_the_first_kernels_blocks():
    # Blocking 96×96 into 32×32 tiles: 9 blocks per channel, 256 channels.
    assert R.evidence(build(get_preset("dw-blog-vthread-case2").spec, "h100")).blocks == 9 * 256

"""One registry of claim relations and one of static facts (explorer.claims): the preset
loader reads against it and the lessons word and check claims through it, so an entry
added there is accepted and checked with no other edit."""
from test_lessons import BASE  # a tutorial with one preset, 'a'

from explorer import claims
from explorer import lessons as L
from explorer.claims import FACTS, RELATIONS, Fact
from explorer.presets import all_presets, load_file

# One 32×32 channel per block of 8×8 threads.
TUTORIAL = BASE + "knobs = { blocking_h = 0, blocking_w = 0, num_thread_y = 8, num_thread_x = 8, num_vthread_x = 1 }\n"


def test_every_shipped_claim_resolves_through_the_registries():
    facts = relations = 0
    for preset in all_presets().values():
        for fact, _ in preset.static:
            assert fact in FACTS, (preset.id, fact)
            facts += 1
        for comparison in preset.compare:
            check = L.check_comparison(preset, comparison)
            assert f" is {RELATIONS[comparison.expect]} " in check.sentence(preset), (preset.id, comparison)
            relations += 1
    assert facts >= 16 and relations >= 15


def test_a_fact_added_to_the_registry_is_loaded_and_checked(tmp_path, monkeypatch):
    # 8×8 threads: two warps of 32 per block.
    warps = Fact("warps per block", lambda b: b.kernels[0].threads_per_block // 32)
    monkeypatch.setitem(claims.FACTS, "warps_per_block", warps)
    path = tmp_path / "t.toml"
    path.write_text(TUTORIAL + "static = { warps_per_block = 2 }\n")
    (preset,) = load_file(path).presets
    (check,) = L.static_checks(preset, "h100")
    assert (check.label, check.actual, check.verdict) == ("warps per block", 2, L.REPRODUCED)


def test_a_relation_added_to_the_registry_is_loaded_and_worded(tmp_path, monkeypatch):
    monkeypatch.setitem(claims.RELATIONS, "no_faster", "no faster than")
    path = tmp_path / "t.toml"
    path.write_text(TUTORIAL + 'compare = [ { with = "b", expect = "no_faster" } ]\n\n[[preset]]\nid = "b"\n'
                    'title = "B"\nsource = "s"\ntemplate = "depthwise_blog"\nclaim = "c"\n'
                    'workload = { kind = "depthwise_conv2d", height = 32, width = 32 }\n')
    this, other = load_file(path).presets
    check = L.ComparisonCheck(this.compare[0], other, None, None)
    assert check.sentence(this) == "Step 1 is no faster than step 2: B."

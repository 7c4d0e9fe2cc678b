"""Numbers in words (explorer/units.py) and the labels and sentences that use them: units that read
right at every size, a noun in the number its count asks for, the article a number takes aloud."""
import pytest

from explorer.units import article, byte_size, count


def test_a_count_takes_its_noun_in_the_right_number():
    assert count(1, "block") == "1 block" and count(0, "block") == "0 blocks"
    assert count(16384, "block") == "16,384 blocks" and count(2, "warp") == "2 warps"
    assert count(1, "access", "accesses") == "1 access" and count(3, "access", "accesses") == "3 accesses"
    assert count(1.5, "element") == "1.5 elements" and count(1.0, "element") == "1 element"


@pytest.mark.parametrize("n,text", [(0, "0 B"), (36, "36 B"), (1000, "1,000 B"), (1023, "1,023 B"),
                                    (1024, "1.0 KB"), (25_088, "24.5 KB"), (163_880, "160.0 KB"),
                                    (3 << 20, "3.0 MB")])
def test_a_size_in_bytes_reads_in_the_unit_it_fills(n, text):
    assert byte_size(n) == text


@pytest.mark.parametrize("n,word", [(8, "an"), (5, "a"), (1, "a"), (11, "an"), (18, "an"), (80, "an"),
                                    (86, "an"), (800, "an"), (180, "a"), (110, "a"), (8192, "an"),
                                    (11_000, "an"), (1100, "a"), (100, "a"), (18_432, "an"), (0, "a")])
def test_the_article_of_a_number_said_aloud(n, word):
    assert article(n) == word


def test_the_labels_use_them():
    from test_analysis_diagnosis import facts

    from app import panels
    from explorer.analysis.diagnosis import occupancy_rule, work_per_thread_rule
    from explorer.analysis.resources import analyze_resources, format_resources
    from explorer.build import build
    from explorer.presets import get_preset

    # The sum's second kernel is one block; the softmax's statistics take 36 bytes of shared memory.
    sum_of = panels.launch_summary(build(get_preset("reduce-3-sequential").spec))
    assert sum_of.endswith("; 1 block × 256 threads, 1.0 KB shared")
    softmax = build(get_preset("rowwise-softmax-separate").spec)
    assert panels.launch_summary(softmax).split(": ", 1)[1].startswith("4,096 blocks × 256 threads, 36 B shared")
    assert panels.shared_split(softmax.kernels[0]) == "36 bytes, all static"
    hopper = build(get_preset("attention-hopper").spec).kernels[0]
    assert panels.shared_split(hopper) == "163,880 bytes: 0 static, 163,880 dynamic (given at launch)"
    text = format_resources(analyze_resources(build(get_preset("attention-hopper").spec)))
    assert "occupancy: 1 block/SM (12 warps, 19%)" in text
    found = work_per_thread_rule(facts(tree_steps=8, loads_per_thread=1.0))
    assert found.title == "Too little work per thread: 1 element before an 8-step tree."
    assert "10,000 blocks: 13 waves of 800 blocks" in found.evidence[1]  # 100 SMs × 8 blocks a wave
    found = occupancy_rule(facts(blocks_per_sm=1, limiter="shared memory"))
    assert found.evidence[0].startswith("1 block of 256 threads fits on an SM, limited by shared memory: 8 warps")


def test_the_sass_header_counts_the_dynamic_shared_memory_a_kernel_is_launched_with():
    """A cubin holds the static arrays (on sm_90 with the 1 KB the system reserves): the Hopper kernels'
    160 KB pool is given at launch, and the header says so."""
    from types import SimpleNamespace

    from explorer.analysis.sass import dynamic_shared, resources_line
    from explorer.build import build
    from explorer.presets import get_preset

    assert dynamic_shared(build(get_preset("attention-hopper").spec)) == {"main_kernel": 163_880}
    assert set(dynamic_shared(build(get_preset("attention-fused").spec)).values()) == {0}  # static tiles
    cubin = SimpleNamespace(registers=168, shared_bytes=1024, stack_bytes=0,
                            mix=SimpleNamespace(spill_bytes=0, instructions=1234))
    assert resources_line(cubin, 163_880) == ("168 registers/thread, 1,024 B shared + 163,880 B dynamic, 0 B stack "
                                              "frame, 0 B spilled (local loads and stores), 1,234 instructions")
    assert "1,024 B shared, 0 B stack" in resources_line(cubin)

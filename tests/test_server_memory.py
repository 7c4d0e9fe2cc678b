"""The server's memory: the class bench's PSS summary (by hand), the caches sized from the machine's memory
(explorer/server/settings.py's plan, by hand for an 8, a 32 and a 128 GiB machine), and a cache that never holds
more than the plan gives it."""
import classroom_report  # bench/ (pytest's pythonpath)
import classroom_sampler
import pytest

from explorer import build as build_module
from explorer.presets import get_preset
from explorer.server import settings
from explorer.server.settings import ServerSettings, memory_plan
from explorer.server.single_flight import SingleFlight


def samples(pss: list[float], started: float = 1000.0, every: float = 30.0) -> list[dict]:
    """A sample every ``every`` s from ``started`` + ``every``, with these summed PSS (RSS twice as much)."""
    return [{"t": started + every * (i + 1), "pss_server_mib": p, "rss_server_mib": 2 * p,
             "pss_parts_mib": {"app": p}, "pss_kinds_mib": {}} for i, p in enumerate(pss)]


def test_the_summed_pss_at_the_fractions_of_a_shorter_run_its_growth_and_its_bound():
    # A 10-minute run (600 s): minute 1, 5, 10 and 20 of a 20-minute class are 30, 150, 300 s and the end.
    run = samples([500, 800, 900, 950, 1000, 1000, 1000, 1005, 1010, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                   1000, 1000, 1020])  # at 1030, 1060, ..., 1600
    summary = classroom_report.memory_over_time(run, 1000.0, 600, bound_mib=1100)
    # Each mark the median of the samples within 15 s of it (half a minute of a 20-minute class, halved); the end:
    # the last 30 s and after (1570 and 1600 s: 1000 and 1020).
    assert [(m["minute"], m["pss_mib"], m["rss_mib"]) for m in summary["marks"]] == [
        (0.5, 500, 1000), (2.5, 1000, 2000), (5.0, 1000, 2000), (10.0, 1010, 2020)]
    # Filled at minute 2.5 (the sample at 1150 s: 1000 MiB); +10 MiB to the end (1585 s), 7.25 minutes later.
    assert summary["filled_at_minute"] == 2.5
    assert summary["growth_after_fill_mib"] == 10
    assert summary["growth_mib_per_minute"] == pytest.approx(10 / 7.25, abs=0.05)
    assert summary["max_pss_mib"] == 1020
    assert (summary["flat"], summary["kept"]) == (True, True)  # 10 ≤ 5% of 1000; 1020 ≤ 1100
    assert classroom_report.memory_verdict(summary) == "met"
    text = classroom_report.memory_summary_text(summary)
    assert "500 MiB at minute 0.5, 1000 MiB at minute 2.5, 1000 MiB at minute 5, 1010 MiB at minute 10" in text
    assert "+10 MiB from minute 2.5 to the end" in text and "bound 1100 MiB, kept" in text


def test_growth_after_the_caches_fill_and_a_passed_or_missing_bound_are_misses():
    run = samples([1000] * 5 + [1100, 1200, 1300, 1400, 1500])  # 300 s: filled at 75 s (the sample at 1090 s)
    summary = classroom_report.memory_over_time(run, 1000.0, 300, bound_mib=1400)
    assert summary["filled_at_minute"] == 1.25
    assert summary["growth_after_fill_mib"] == 500 and not summary["flat"]
    assert summary["max_pss_mib"] == 1500 and summary["kept"] is False
    assert classroom_report.memory_verdict(summary) == (
        "missed: 100 MiB above its bound; grew 500 MiB after the caches filled (more than 5%)")
    unbounded = classroom_report.memory_over_time(samples([1000] * 10), 1000.0, 300)
    assert classroom_report.memory_verdict(unbounded) == "missed: no bound stated by the server"
    assert classroom_report.memory_over_time([{"t": 1.0, "pss_server_mib": None}], 0.0, 300) is None


def test_the_device_pages_memory_sentence_gives_the_bound_the_bench_checks():
    plan = memory_plan(8 * 1024)
    assert classroom_sampler.memory_bound_mib(plan.sentence()) == pytest.approx(plan.bound_mib, abs=52)  # 0.1 GiB
    assert plan.sentence().startswith(classroom_sampler.MEMORY_CAPTION)
    assert classroom_sampler.memory_bound_mib("Memory: under 512 MiB") == 512
    assert classroom_sampler.memory_bound_mib("no figure") is None


def test_the_caches_are_sized_from_an_8_gib_machines_memory():
    # 8 GiB, no GPU, one app process with one build process and its diagnosing process: the caches get 512 MiB.
    plan = memory_plan(8 * 1024, gpus=0)
    assert plan.measure_cache == 2048  # 8 × 256
    per_app = 512 - 2048 * 0.002  # 507.9 MiB
    assert plan.build_cache == int(per_app * 2 / 3 / 5.0) == 67
    assert plan.diagnose_builds == min(int(per_app / 3 / 1.2), 128) == 128  # 141, at most 128
    assert plan.processes == {"launcher": 1, "app": 1, "build": 1, "diagnose": 1}
    assert plan.processes_mib == 64 + 700 + 400 + 500
    assert plan.caches_mib == pytest.approx(67 * 5.0 + 128 * 1.2 + 2048 * 0.002)
    assert plan.bound_mib == pytest.approx(1664 + 492.7, abs=0.1)
    small = memory_plan(4 * 1024, gpus=0)  # 4 GiB: 256 MiB of caches, 1024 measurements
    assert (small.build_cache, small.diagnose_builds, small.measure_cache) == (
        int((256 - 2.048) * 2 / 3 / 5), int((256 - 2.048) / 3 / 1.2), 1024) == (33, 70, 1024)


def test_the_caches_are_sized_from_a_32_gib_machines_memory():
    # 32 GiB, one GPU, one app process of 4 build processes, 4 compile processes: the caches get 2 GiB.
    plan = memory_plan(32 * 1024, build_workers=4, compile_workers=4, gpus=1)
    assert plan.measure_cache == 8192
    per_app = 2048 - 8192 * 0.002
    assert (plan.build_cache, plan.diagnose_builds) == (int(per_app * 2 / 3 / 5), 128) == (270, 128)
    assert plan.processes == {"launcher": 1, "app": 1, "build": 4, "diagnose": 1, "compile": 4, "measure": 1}
    assert plan.processes_mib == 64 + 700 + 4 * 400 + 500 + 4 * 960 + 2000
    assert plan.caches_mib == pytest.approx(270 * 5 + 128 * 1.2 + 8192 * 0.002)


def test_the_caches_are_sized_from_a_128_gib_machines_memory():
    # The class machine: 16 cores, 4 app processes of 2 build processes, a measuring service of 12 compile processes
    # and one GPU: 8 GiB of caches, 2 GiB per app process; the measurements at their most.
    plan = memory_plan(128 * 1024, app_processes=4, build_workers=2, compile_workers=12, gpus=1)
    assert plan.measure_cache == 16384
    per_app = (8192 - 16384 * 0.002) / 4
    assert (plan.build_cache, plan.diagnose_builds) == (int(per_app * 2 / 3 / 5), 128) == (271, 128)
    assert plan.processes == {"launcher": 1, "app": 4, "build": 8, "diagnose": 4, "service": 1, "compile": 12,
                              "measure": 1}
    assert plan.caches_mib <= 8192
    assert plan.bound_mib == pytest.approx(plan.processes_mib + plan.caches_mib)


def test_sizes_the_environment_gives_are_kept_and_planned_with():
    plan = memory_plan(8 * 1024, gpus=0, build_cache=128, diagnose_builds=8, measure_cache=4096)
    assert (plan.build_cache, plan.diagnose_builds, plan.measure_cache) == (128, 8, 4096)
    assert plan.caches_mib == pytest.approx(128 * 5.0 + 8 * 1.2 + 4096 * 0.002)
    tiny = memory_plan(512, gpus=0)  # a small machine: the least that a page needs
    assert (tiny.build_cache, tiny.diagnose_builds, tiny.measure_cache) == (16, 16, 1024)


def test_the_servers_default_sizes_are_this_machines_plan(monkeypatch):
    for name in ("EXPLORER_BUILD_CACHE", "EXPLORER_DIAGNOSE_BUILDS", "EXPLORER_MEASURE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    plan = settings.this_machines_plan()
    server = ServerSettings()
    assert (server.build_cache, server.diagnose_builds, server.measure_cache) == (
        plan.build_cache, plan.diagnose_builds, plan.measure_cache)
    monkeypatch.setenv("EXPLORER_BUILD_CACHE", "7")
    assert ServerSettings().build_cache == 7 and settings.this_machines_plan().build_cache == 7


def test_an_app_processs_build_cache_never_holds_more_than_its_plan_gives(monkeypatch):
    monkeypatch.delenv("EXPLORER_BUILD_CACHE", raising=False)
    size = memory_plan(8 * 1024, gpus=0).build_cache  # 67
    cache: SingleFlight = SingleFlight(size)
    for key in range(3 * size):
        cache.get(key, lambda: object())
        assert len(cache) <= size
    assert cache.stats()["entries"] == size


def test_the_diagnosing_process_keeps_the_builds_its_plan_gives(monkeypatch):
    from explorer.server import diagnosing

    monkeypatch.setattr(build_module, "_build_cached", build_module._build_cached)  # handed back after the test
    monkeypatch.setenv("EXPLORER_DIAGNOSE_BUILDS", "2")
    monkeypatch.setattr(diagnosing.os, "nice", lambda increment: 0)
    monkeypatch.setattr(diagnosing, "source_only_process_init", lambda root: None)
    diagnosing._diagnosing_process_init("")
    assert build_module._build_cached.cache_info().maxsize == 2
    spec = get_preset("dw-blog-final-96").spec
    for preset in ("dw-blog-blocking-96", "dw-blog-threads-case2", "dw-blog-final-96"):
        build_module.build(get_preset(preset).spec, "h100")
        assert build_module._build_cached.cache_info().currsize <= 2
    assert spec is not None


class Member:
    """A process as psutil gives it: its RSS and PSS (MiB), and its name; None: its PSS cannot be read."""

    def __init__(self, pid, rss, pss, name="python"):
        self.pid, self.rss, self.pss, self._name = pid, rss, pss, name

    def name(self):
        return self._name

    def memory_info(self):
        return type("Memory", (), {"rss": self.rss * 2**20})()

    def memory_full_info(self):
        if self.pss is None:
            raise classroom_sampler.psutil.AccessDenied(self.pid)
        return type("Full", (), {"rss": self.rss * 2**20, "pss": self.pss * 2**20})()


def test_each_processs_pss_is_summed_by_part_and_kind_beside_its_rss():
    # An app process (RSS 400, PSS 250) over a build worker (300, 120) and a diagnose worker (500, 330).
    tree = [(Member(1, 400, 250), "app", 0), (Member(2, 300, 120, "build worker"), "workers", 1),
            (Member(3, 500, 330, "diagnose worker"), "workers", 1)]
    sample = classroom_sampler.memory_sample(tree)
    assert (sample["rss_server_mib"], sample["pss_server_mib"]) == (1200, 700)
    assert sample["pss_parts_mib"] == {"app": 250, "workers": 450}
    assert sample["pss_kinds_mib"] == {"build": 120, "diagnose": 330}
    unreadable = classroom_sampler.memory_sample([*tree, (Member(4, 50, None), "workers", 1)])
    assert unreadable["rss_server_mib"] == 1250 and unreadable["pss_server_mib"] is None  # no partial sum


def test_the_memory_row_names_the_class_and_is_replaced_by_the_next_run_of_it():
    report = {"seconds": 1200, "students": 100, "links": [], "delivered_moves_per_s": 12.3,
              "intended_moves_per_s": 16.7,
              "memory": classroom_report.memory_over_time(samples([20000.0] * 40, every=30.0), 1000.0, 1200,
                                                          bound_mib=28262.4)}
    lessons = ["matmul_modern", "conv2d_modern", "matmul_hopper"]
    row = classroom_report.memory_result(report, lessons, "H200", "2026-12-04", "bash bench/classroom_gpu.sh class R")
    assert row.target == ("the server's memory over a 20-minute class of 100 (matmul_modern + conv2d_modern + "
                          "matmul_hopper)")  # the row docs/results.md has for the H100's run: this one replaces it
    assert row.met == "met"
    assert row.now.startswith("summed PSS 19.53 GiB at minute 1, 19.53 GiB at minute 5, 19.53 GiB at minute 10, "
                              "19.53 GiB at minute 20 (+0 MiB from minute 5, at most 19.53 GiB); bound 27.6 GiB")
    assert row.now.endswith("; 12.3 of 16.7 moves/s delivered")


def test_a_compile_process_gives_its_freed_heap_back_after_each_compile():
    from explorer.server.compiles import CompileService

    assert CompileService(ServerSettings())._release_heap


def test_the_device_page_states_the_bound_in_one_sentence():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    main = str(Path(__file__).resolve().parent.parent / "app" / "main.py")
    at = AppTest.from_file(main, default_timeout=120).switch_page("views/explorer.py").run()
    at.switch_page("views/device.py").run()
    said = [c.value for c in at.caption if c.value.startswith(classroom_sampler.MEMORY_CAPTION)]
    assert said == [settings.this_machines_plan().sentence()]
    assert classroom_sampler.memory_bound_mib(said[0]) > 0

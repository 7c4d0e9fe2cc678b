"""The static race check: its pieces on hand-made rows, hand-written kernels (a loop whose barrier
does not cover its next iteration, a thread-guarded copy, Harris's warp-synchronous last warp with
and without __syncwarp), and the row-wise kernels as they were scheduled before their race was
fixed. Every shipped preset is checked in tests/test_presets.py, whose builds it reuses."""
import importlib

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from explorer import build as builds
from explorer.analysis import accesses
from explorer.analysis import diagnosis as dx
from explorer.analysis.accesses import kernel_accesses, shared_accesses
from explorer.analysis.diagnosis import facts_of
from explorer.analysis.races import (
    analyze_races,
    checked_blocks,
    find_races,
    format_races,
    race_pair,
    races_of,
    racing,
    window,
)
from explorer.build import build, lower
from explorer.presets import get_preset
from explorer.schedules import rowwise
from explorer.targets import FULL_MASK

H100 = tvm.target.Target(tvm.target.Target("nvidia/nvidia-h100"), host="llvm")
_tir_build = importlib.import_module("tvm.tirx.build")


def checked(func, pipeline="tirx"):
    """The race report of a hand-written kernel, lowered as reduce_tree's kernels are (its barriers as
    written), with its CUDA for the lines."""
    host, devices = lower(tvm.IRModule({"main": func}), H100, pipeline)
    with H100:
        cuda = _tir_build.tir_to_runtime(host, devices, H100.host).imports[0].inspect_source("cuda")
    return races_of(next(iter(devices.values())), cuda), cuda.splitlines()


# -- the pieces ------------------------------------------------------------------------------


def test_a_loop_with_a_barrier_is_checked_at_its_ends_and_neighbouring_pairs_between():
    assert window(6).tolist() == [0, 1, 2, 3, 4, 5]
    # 100 iterations: 0-2 and 97-99; two pairs starting at the thirds of 3..95 (33.7, 64.3), rounded down.
    assert window(100).tolist() == [0, 1, 2, 33, 34, 64, 65, 97, 98, 99]
    assert checked_blocks((7, 1, 1)).tolist() == [0, 3, 6]
    assert checked_blocks((1, 1, 1)).tolist() == [0]


def rows(*entries):
    """(block, phase, unit, thread, warp phase, store) rows as the columns racing takes."""
    return [np.array(column) for column in zip(*entries, strict=True)]


@pytest.mark.parametrize(("entries", "racy"), [
    # thread 0 writes unit 5, thread 40 (warp 1) reads it in the same phase: a race.
    ([(0, 0, 5, 0, 0, True), (0, 0, 5, 40, 0, False)], True),
    # ... a phase later (after a __syncthreads()): ordered.
    ([(0, 0, 5, 0, 0, True), (0, 1, 5, 40, 1, False)], False),
    # ... in another block: another copy of shared memory.
    ([(0, 0, 5, 0, 0, True), (1, 0, 5, 40, 0, False)], False),
    # lanes 0 and 1 of one warp, a __syncwarp() between them (warp phases 0 and 1): ordered.
    ([(0, 0, 5, 0, 0, True), (0, 0, 5, 1, 1, False)], False),
    # ... without it: a race.
    ([(0, 0, 5, 0, 2, True), (0, 0, 5, 1, 2, False)], True),
    # a thread reading what it wrote, and two threads reading: no race.
    ([(0, 0, 5, 3, 0, True), (0, 0, 5, 3, 0, False)], False),
    ([(0, 0, 5, 3, 0, False), (0, 0, 5, 40, 0, False)], False),
    # two threads writing one unit: a race (which value stays is not defined).
    ([(0, 0, 5, 3, 0, True), (0, 0, 5, 40, 0, True)], True),
    # neighbouring units: no race.
    ([(0, 0, 5, 0, 0, True), (0, 0, 6, 40, 0, False)], False),
])
def test_a_location_races_when_another_thread_touches_what_one_writes_unordered(entries, racy):
    order, starts, found = racing(*rows(*entries))
    assert found.any() == racy
    assert len(starts) == len({(b, p, u) for b, p, u, *_ in entries})


def test_the_example_pair_prefers_threads_of_different_warps():
    # unit 9, one phase: thread 2 writes; thread 3 (its warp) and thread 70 (warp 2) read.
    block, phase, unit, thread, warp_phase, store = rows((0, 0, 9, 2, 0, True), (0, 0, 9, 3, 0, False),
                                                         (0, 0, 9, 70, 0, False))
    order, starts, racy = racing(block, phase, unit, thread, warp_phase, store)
    i, j, within = race_pair(np.arange(3), thread[order], warp_phase[order], store[order])
    assert (thread[order][i], thread[order][j], within) == (2, 70, False)


# -- hand-written kernels --------------------------------------------------------------------


def staged(write_late: bool, second_barrier: bool):
    """A loop of 4 steps, 64 threads: each step writes its thread's element and reads its mirror's
    (63 - tx) with a barrier between; ``write_late`` puts the read first (it reads the step before's
    write). Without a second barrier a write of one step meets the read of the step next to it."""

    @T.prim_func
    def main(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
        with T.launch_thread("blockIdx.x", 1):
            tx = T.launch_thread("threadIdx.x", 64)
            sdata = T.alloc_buffer((64,), "float32", scope="shared")
            total = T.alloc_buffer((1,), "float32", scope="local")
            total[0] = T.float32(0)
            for k in range(4):
                if write_late:
                    total[0] = total[0] + sdata[63 - tx]
                    T.tvm_storage_sync("shared")
                    sdata[tx] = A[k * 64 + tx]
                else:
                    sdata[tx] = A[k * 64 + tx]
                    T.tvm_storage_sync("shared")
                    total[0] = total[0] + sdata[63 - tx]
                if second_barrier:
                    T.tvm_storage_sync("shared")
            B[tx] = total[0]

    return main


@pytest.mark.parametrize("write_late", [False, True])
def test_a_write_meets_the_neighbouring_iterations_read_across_the_loop(write_late):
    report, lines = checked(staged(write_late, second_barrier=False))
    (race,) = report.races
    assert (race.write.op, race.other.op, race.within_warp) == ("store", "load", False)
    # thread tx writes element tx, thread 63 - tx reads it (another warp for tx = 0: thread 63).
    assert race.write.thread[0] + race.other.thread[0] == 63 and race.element == race.write.thread[0]
    steps = {race.write.iteration["k"], race.other.iteration["k"]}
    assert len(steps) == 2 and max(steps) - min(steps) == 1  # neighbouring steps
    assert "sdata_ptr[((int)threadIdx.x)] = A_ptr" in lines[race.write.line - 1]
    assert "sdata_ptr[(63 - ((int)threadIdx.x))]" in lines[race.other.line - 1]
    report, _ = checked(staged(write_late, second_barrier=True))
    assert not report.races and report.kernels[0].checked == 2


def copied_by_one_thread(barrier: bool, readers: str):
    """Thread 0 copies A[0] into shared memory; then ``readers`` (every thread, or thread 0 again)
    read it, with or without a barrier between."""

    @T.prim_func
    def main(A: T.Buffer((1,), "float32"), B: T.Buffer((128,), "float32")):
        with T.launch_thread("blockIdx.x", 1):
            tx = T.launch_thread("threadIdx.x", 128)
            value = T.alloc_buffer((1,), "float32", scope="shared")
            if tx == 0:
                value[0] = A[0]
            if barrier:
                T.tvm_storage_sync("shared")
            if readers == "all" or tx == 0:
                B[tx] = value[0]

    return main


def test_a_value_one_thread_writes_for_all_needs_a_barrier():
    report, lines = checked(copied_by_one_thread(barrier=False, readers="all"))
    (race,) = report.races
    assert race.storage == "value" and race.write.thread == (0, 0, 0) and race.other.thread == (32, 0, 0)
    assert race.locations == 1 and "no __syncthreads() between them" in race.sentence()
    assert lines[race.write.line - 1].strip() == "value_ptr[0] = A_ptr[0];"
    assert not checked(copied_by_one_thread(barrier=True, readers="all"))[0].races
    assert not checked(copied_by_one_thread(barrier=False, readers="thread 0"))[0].races  # its own write


def test_a_barrier_only_some_threads_reach_is_not_modelled():
    @T.prim_func
    def main(A: T.Buffer((64,), "float32")):
        with T.launch_thread("blockIdx.x", 1):
            tx = T.launch_thread("threadIdx.x", 64)
            value = T.alloc_buffer((64,), "float32", scope="shared")
            value[tx] = A[tx]
            if tx < 32:
                T.tvm_storage_sync("shared")
            A[tx] = value[63 - tx]

    report, _ = checked(main)
    (kernel,) = report.kernels
    assert not kernel.races and kernel.checked == 0
    assert kernel.notes == ("Races not checked: this kernel has a __syncthreads() under a condition, which not every "
                            "thread may reach.",)


def harris_last_warp(between: str, volatile: bool = False):
    """Harris's kernel 5 for one block of 64 sums: the first warp adds them in six steps of
    ``sdata[tid] += sdata[tid + s]`` (s = 32 … 1) with no __syncthreads() (``between`` = "nothing").
    reduce_tree's way ("__syncwarp") keeps the running sum in a register with a __syncwarp() between
    each read and write; "a shuffle" puts a warp shuffle (of the sum, by 0 lanes) there instead."""
    annotations = {"tirx.volatile": True} if volatile else {}

    @T.prim_func
    def main(A: T.Buffer((256,), "float32"), B: T.Buffer((4,), "float32")):
        with T.launch_thread("blockIdx.x", 4) as bx:
            tx = T.launch_thread("threadIdx.x", 64)
            sdata = T.alloc_buffer((64,), "float32", scope="shared", annotations=annotations)
            total = T.alloc_buffer((1,), "float32", scope="local")
            sdata[tx] = A[bx * 64 + tx]
            T.tvm_storage_sync("shared")
            if tx < 32:
                for j in T.unroll(6):
                    if between == "nothing":
                        sdata[tx] = sdata[tx] + sdata[tx + (32 >> j)]
                    else:
                        total[0] = sdata[tx] + sdata[tx + (32 >> j)]
                        if between == "__syncwarp":
                            T.call_extern("void", "__syncwarp")
                        else:
                            total[0] = T.tvm_warp_shuffle_down(T.uint32(FULL_MASK), total[0], 0, 32, 32)
                        sdata[tx] = total[0]
                        if between == "__syncwarp":
                            T.call_extern("void", "__syncwarp")
                if tx == 0:
                    B[bx] = sdata[0]

    return main


@pytest.mark.parametrize(("between", "volatile"), [("nothing", False), ("nothing", True), ("a shuffle", False)])
def test_harris_warp_synchronous_last_warp_races_without_syncwarp(between, volatile):
    report, lines = checked(harris_last_warp(between, volatile))
    name = "((volatile float*)sdata_ptr)" if volatile else "sdata_ptr"
    races = report.races
    assert races and all(r.within_warp and r.storage == "sdata" for r in races)
    # Each step s reads sdata[tid + s], which lane tid + s writes in the same warp phase.
    for r in races:
        assert r.write.op == "store" and r.other.op == "load" and r.write.thread[0] == r.element
        assert r.other.thread[0] < 32 and r.write.thread[0] < 32 and r.other.thread != r.write.thread
        assert lines[r.write.line - 1].strip().startswith(f"{name}[((int)threadIdx.x)] = ")
    sentence = races[0].sentence()
    assert "lanes of one warp with no __syncwarp() (nor __syncthreads()) between them" in sentence
    assert ("without volatile" in sentence) is not volatile


def test_reduce_trees_last_warp_with_syncwarp_has_no_race():
    report, _ = checked(harris_last_warp("__syncwarp"))
    assert not report.races and report.kernels[0].checked == 20


def test_the_warp_barriers_of_the_last_warp_are_counted_per_step():
    host, devices = lower(tvm.IRModule({"main": harris_last_warp("__syncwarp")}), H100, "tirx")
    (kernel,) = kernel_accesses(next(iter(devices.values())))
    # The store before the barrier: phase 0; then one __syncthreads() and two __syncwarp() per step, unrolled.
    assert [(a.op, a.phase, a.warp_phase) for a in kernel.accesses[:6]] == [
        ("store", 0, 0), ("load", 1, 1), ("load", 1, 1), ("store", 1, 2), ("load", 1, 3), ("load", 1, 3)]


def without_barrier(monkeypatch, built, dropped: int):
    """The shared accesses of ``built`` collected as if its block barrier number ``dropped`` (from 0, in
    program order) were not there, and how many block barriers it has."""
    barrier_kind, seen = accesses.barrier_kind, []

    def without_one(call):
        kind = barrier_kind(call)
        if kind == "block":
            seen.append(call)
            return None if len(seen) - 1 == dropped else kind
        return kind

    with monkeypatch.context() as patched:
        patched.setattr(accesses, "barrier_kind", without_one)
        return kernel_accesses(built.device_mod), len(seen)


def test_each_barrier_of_the_tiled_matmul_is_needed(monkeypatch):
    """matmul-tiled-1024 stages A and B tiles: a barrier after the copy (the reads wait for it) and one
    before it (the next step's copy waits for this step's reads). Without either: races."""
    built = build(get_preset("matmul-tiled-1024").spec, "h100")
    assert not analyze_races(built).races
    for dropped in range(2):
        (kernel,), barriers = without_barrier(monkeypatch, built, dropped)
        assert barriers == 2
        races = find_races(kernel).races
        assert {r.storage for r in races} == {"A_shared", "B_shared"}
        assert {(r.write.op, r.other.op) for r in races} == {("store", "load")}


def test_async_copies_into_dynamic_shared_memory_wait_for_the_reads_of_the_step_before(monkeypatch):
    """best-matmul-async-1024 copies the next step's tiles with cp.async into the stage the step before
    read, in one dynamic shared allocation (buf_dyn_shmem) that both tiles are views of: without the
    barrier at the top of the loop, the copies race with those reads."""
    built = build(get_preset("best-matmul-async-1024").spec, "h100")
    (kernel,) = shared_accesses(built)
    assert [s.name for s in kernel.storages] == ["buf_dyn_shmem"] and len(kernel.copies) == 20
    assert not analyze_races(built).races
    (kernel,), _ = without_barrier(monkeypatch, built, 1)
    races = find_races(kernel).races
    assert {r.storage for r in races} == {"buf_dyn_shmem"}
    assert {(r.write.op, r.other.op) for r in races} == {("copy", "load")}
    assert {r.write.buffer for r in races} == {"A_shared.dyn", "B_shared.dyn"}
    assert all(r.write.iteration["ax2_0"] == r.other.iteration["ax2_0"] + 1 for r in races)


# -- the row-wise kernels as they were ----------------------------------------------------------


class _RowStatisticsShared:
    """A schedule that keeps each row statistic in shared memory, as the row-wise template did
    before 6e8f0d9: a copy written by thread x = 0 of each row and read by every thread of the row."""

    def __init__(self, sch):
        self._sch = sch

    def __getattr__(self, name):
        return getattr(self._sch, name)

    def set_scope(self, block, index, scope):
        return self._sch.set_scope(block, index, "shared" if scope == "local" else scope)


def old_rowwise(monkeypatch, preset, **knobs):
    """The build of ``preset`` with ``knobs`` scheduled the old way (not kept in the build cache)."""
    passes = rowwise.schedule_passes
    spec = get_preset(preset).spec.with_knobs(**knobs)
    with monkeypatch.context() as patched:
        patched.setattr(rowwise, "schedule_passes", lambda sch, *a, **k: passes(_RowStatisticsShared(sch), *a, **k))
        return builds._build_cached.__wrapped__(spec, str(builds.resolve_target("h100")))


@pytest.mark.parametrize(("preset", "statistics"), [
    ("rowwise-softmax-fused", ["row_max_shared", "exp_sum_shared"]),
    ("rowwise-softmax-on-chip", ["row_max_shared", "exp_sum_shared"]),
    ("rowwise-layernorm-on-chip", ["row_sum_shared", "centered_sq_sum_shared"]),  # float16 rows, float4 output
    ("rowwise-rmsnorm-on-chip", ["sq_sum_shared"]),
])
def test_the_old_rowwise_statistics_race_with_two_rows_per_block(monkeypatch, preset, statistics):
    built = old_rowwise(monkeypatch, preset, rows_per_block=2, threads=64)
    report = races_of(built.device_mod, built.cuda)
    lines = built.cuda.splitlines()
    assert [r.storage for r in report.races] == statistics
    for race in report.races:
        name = f"{race.storage}_ptr[((int)threadIdx.y)]"
        # Thread x = 0 of row y copies the statistic; a thread of the row in the other warp reads it next.
        assert race.write.thread == (0, 0, 0) and race.other.thread == (32, 0, 0) and not race.within_warp
        assert race.locations == 2  # one per row of the block
        assert lines[race.write.line - 1].strip().startswith(f"{name} = ")
        assert name in lines[race.other.line - 1] and race.other.line > race.write.line
    assert f"{len(statistics)} shared-memory race(s): the result is wrong" in format_races(report)
    fixed = build(get_preset(preset).spec.with_knobs(rows_per_block=2, threads=64), "h100")
    assert not analyze_races(fixed).races  # the template as it is now


def test_the_old_rowwise_race_leads_the_diagnosis(monkeypatch):
    built = old_rowwise(monkeypatch, "rowwise-softmax-fused", rows_per_block=2, threads=64)
    f = facts_of(built)
    lines = sorted({line for race in f.races for line in race.lines})
    assert [race.storage for race in f.races] == ["row_max_shared", "exp_sum_shared"] and len(lines) == 4
    found = dx.findings_of(f)["race"]
    assert found.wrong and found.title == (f"Shared-memory race on row_max_shared, exp_sum_shared at CUDA lines "
                                           f"{', '.join(map(str, lines))}: the result is wrong.")
    assert dx.ranked(dx.findings_of(f).values(), f.bound_us)[0] == found

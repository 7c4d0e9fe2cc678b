"""Property: the settings a template accepts compute the right result, for every template, without a GPU.

Seeded draws from each template's whole knob space (``Grid.whole``) at two small shapes of its workload
(bench/knob_space_check.py's SMALL, where its sanitizer sample runs too); a setting the template refuses
(InvalidKnobs, ExplorerError) is drawn again. Each accepted setting's CUDA runs on the CPU
(tests/cuda_on_cpu.py; the Hopper kernels tests/hopper_on_cpu.py) with the threads of each block run one
after another between barriers, first in forward and then in reverse order, and its output goes through the
measuring gate (``explorer.measure.gate.compare``) against the workload's NumPy reference. A missing
barrier, a missed tile or an access outside a buffer fails here every run, as it would on a GPU only some of
the time. bench/knob_space_check.py checks the same spaces on a GPU at the lessons' shapes
(docs/knob-space.md).
"""
import os

import pytest
from cuda_on_cpu import ORDERS, run_on_cpu, scratch_buffers
from hopper_on_cpu import run_hopper_on_cpu
from knob_space_check import old_row_statistics, small_workloads  # bench/ (pytest's pythonpath)

from explorer import build as building
from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_path
from explorer.errors import ExplorerError
from explorer.measure.gate import compare
from explorer.schedules import TEMPLATES, rowwise
from explorer.search.grid import Grid
from explorer.targets import resolve_target
from explorer.workloads import RMSNorm, Softmax

pytestmark = pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")

# Another seed draws other settings: EXPLORER_KNOB_SPACE_SEED=N python -m pytest -q -n0 tests/test_knob_space.py
SEED = int(os.environ.get("EXPLORER_KNOB_SPACE_SEED", "47"))
TARGET = "h100"
# Knob values the CPU emulation cannot run, with why: bench/knob_space_check.py checks them on the GPU.
NOT_EMULATED = {
    "matmul_hopper": ({"swizzle": ("128B",), "cluster": (1,)},
                      "tests/hopper_on_cpu.py emulates 128-byte swizzles and no thread-block clusters"),
}
# Accepted settings drawn per template: each costs 0.1-0.3 CPU-s to build and 0.2-3 to compile for the CPU (an
# unrolled matmul is 300 kB of C++). The row-wise templates, cheap to emulate, get more: their knobs combine in
# more ways that matter (a race needs two rows per block and a fused pass).
DRAWS = {"softmax": 6, "layer_norm": 3, "rms_norm": 3, "reduce_tree": 2, "reduce_rfactor": 2}
DEFAULT_DRAWS = 1
MAX_TRIES = 3000  # refused draws per template before it gives up (matmul_async accepts 1 in 100 or fewer)


def accepted_settings(name: str, count: int, seed: int = SEED) -> list:
    """``count`` builds of settings ``name`` accepts, drawn at random from its knob space at each of its small
    shapes in turn (NOT_EMULATED's values only, where it has some)."""
    template = TEMPLATES[name]
    only = NOT_EMULATED.get(name, ({}, ""))[0]
    grids = []
    for workload in small_workloads(name):
        whole = Grid.whole(Spec(name, workload, template.knobs()))
        grids.append(Grid(whole.base, tuple((knob, only.get(knob, values)) for knob, values in whole.axes)))
    draws = [iter(grid.draws(seed + number)) for number, grid in enumerate(grids)]  # not one order for both
    builds, tries = [], 0
    while len(builds) < count and tries < MAX_TRIES:
        grid, points = grids[tries % len(grids)], draws[tries % len(grids)]
        tries += 1
        point = next(points, None)
        if point is None:
            continue
        try:
            builds.append(build(Spec(name, grid.base.workload, grid.knobs_at(point)), TARGET))
        except ExplorerError:
            continue  # refused: drawn again
    assert builds, f"{name}: none of {tries} settings drawn at {[g.base.workload for g in grids]} was accepted"
    return builds


def wrong_results(builds: list) -> list[str]:
    """What the gate says of every build's output in each thread order, where it is wrong (or the run fails)."""
    hopper = TEMPLATES[builds[0].spec.template].archs == ("sm_90a",)
    together = None if hopper else [(built, scratch_buffers(built)) for built in builds]
    found = []
    for built in builds:
        workload = built.spec.workload
        inputs = workload.random_inputs(seed=SEED)
        reference = workload.reference(*inputs)
        for order in ORDERS:
            try:
                got = (run_hopper_on_cpu(built, inputs, order=order) if hopper
                       else run_on_cpu(built, inputs, together=together, order=order))
            except RuntimeError as error:
                found.append(f"{workload.label()} {built.spec.knobs} ({order}): {str(error).strip()}")
                break
            check = compare(got, reference, workload.reduction_length(), workload.tolerance_floor)
            if not check.correct:
                found.append(f"{workload.label()} {built.spec.knobs} ({order}): {check.describe()}")
    return found


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_accepted_settings_compute_the_right_result_in_both_thread_orders(name):
    builds = accepted_settings(name, DRAWS.get(name, DEFAULT_DRAWS))
    wrong = wrong_results(builds)
    assert not wrong, f"{len(wrong)} of {len(builds)} accepted {name} settings are wrong:\n" + "\n".join(wrong)


def _built_anew(spec: Spec):
    """``spec`` built past the build cache, which keeps what the template makes today."""
    return building._build_cached.__wrapped__(spec, str(resolve_target(TARGET)))


def test_a_missing_barrier_is_wrong_in_one_order_every_time():
    """The row-wise kernels as they were before the fix (each row statistic copied into shared memory by
    thread x = 0, read by the row's other threads with no barrier between): right with the threads forward,
    thread 0 first; wrong in reverse, where the row's other warp reads the copy before it is made."""
    spec = Spec("softmax", Softmax(rows=8, cols=256), rowwise.RowWiseKnobs(threads=64, rows_per_block=2,
                                                                            fusion="fused"))
    with old_row_statistics():
        racy = _built_anew(spec)
    assert "row_max_shared" in racy.cuda and "row_max_shared" not in build(spec, TARGET).cuda
    inputs = spec.workload.random_inputs(seed=1)
    reference = spec.workload.reference(*inputs)
    check = {order: compare(run_on_cpu(racy, inputs, order=order), reference, spec.workload.reduction_length(),
                            spec.workload.tolerance_floor) for order in ORDERS}
    assert check["forward"].correct and not check["reverse"].correct
    assert check["reverse"].wrong_count == spec.workload.rows * spec.workload.cols  # every element: NaN statistics


def test_separate_kernels_of_a_partial_last_block_wrote_past_the_statistics(monkeypatch):
    """Why the row-wise template refuses fusion = separate where rows_per_block does not divide rows: the
    statistics kernel's threads of the last block's missing rows write past the statistics' buffer, which
    the emulation's guard pages stop at once."""
    workload, knobs = RMSNorm(rows=5, cols=768, dtype="float32"), dict(threads=64, rows_per_block=8,
                                                                       fusion="separate")
    spec = Spec("rms_norm", workload, rowwise.RowWiseKnobs(**knobs))
    with pytest.raises(ExplorerError, match="write past the end of the statistics' buffer"):
        build(spec, TARGET)
    monkeypatch.setattr(rowwise, "check_knobs", lambda workload, k: None)
    with pytest.raises(RuntimeError, match=r"out of bounds: a thread read or wrote sq_sum at byte 20, past its end"):
        run_on_cpu(_built_anew(spec), workload.random_inputs(seed=1))


# The settings that raced on an H200 before 6e8f0d9 (rows_per_block ≥ 2 with a fused pass), at the lessons' shapes.
RACED = [(name, dict(threads=threads, rows_per_block=rows, fusion=fusion))
         for name in ("softmax", "layer_norm", "rms_norm") for threads, rows in ((64, 2), (256, 4))
         for fusion in ("fused", "on_chip")]


@pytest.mark.gpu
@pytest.mark.parametrize("name,knobs", RACED, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_the_row_wise_settings_that_raced_are_right_on_the_gpu(name, knobs, run_on_gpu):
    spec = Spec(name, TEMPLATES[name].default_workload(), rowwise.RowWiseKnobs(**knobs))
    got, expected = run_on_gpu(build(spec))
    check = compare(got, expected, spec.workload.reduction_length(), spec.workload.tolerance_floor)
    assert check.correct, check.describe()

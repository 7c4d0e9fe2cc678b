"""The workloads' data where the kernels run (explorer.measure.data): made once per workload and
kept, each run given fresh copies, kept inputs a kernel wrote into made again, the least recently
used workload dropped first within the budget; with PyTorch, the inputs drawn and the reference
computed where the kernels run (here on the CPU, where PyTorch is installed). The worker's own
count through its process is in tests/test_measure_worker.py."""
import os
from types import SimpleNamespace

import numpy as np
import pytest
import tvm

from explorer.measure import data
from explorer.measure.data import COUNTS, KeptData, kept_bytes, kept_from_host
from explorer.measure.worker import RUN_LOG_PATH, RunLine, Trial, _log_run, read_run_line
from explorer.workloads import Matmul, Softmax

CPU = tvm.cpu(0)


def counts(workload) -> dict:
    label = workload.label()
    return {what: n for (what, of), n in COUNTS.items() if of == label}


def test_a_workloads_data_is_made_once_and_each_run_gets_fresh_copies():
    workload = Matmul(m=8, n=8, k=6)
    kept_data = KeptData()
    kept, made = kept_data.get(workload, 0, CPU)
    again, made_again = kept_data.get(workload, 0, CPU)
    assert made and not made_again and again is kept and len(kept_data) == 1
    assert counts(workload) == {"inputs": 1, "uploads": 1, "references": 1}

    inputs = workload.random_inputs(0)
    args = kept.fresh_args()
    args[0].copyfrom(np.zeros((8, 6), "float32"))  # a kernel that wrote its input and its output
    args[-1].copyfrom(np.ones((8, 8), "float32"))
    args = kept.fresh_args()
    np.testing.assert_array_equal(args[0].numpy(), inputs[0])
    assert np.isnan(args[-1].numpy()).all()
    assert all(a is not p for a, p in zip(args, kept.pristine, strict=True))
    np.testing.assert_allclose(kept.reference, workload.reference(*inputs))
    assert counts(workload) == {"inputs": 1, "uploads": 1, "references": 1}


def test_kept_inputs_a_kernel_wrote_into_are_made_again():
    workload = Matmul(m=8, n=8, k=5)
    kept, _ = KeptData().get(workload, 0, CPU)
    kept.pristine[1].copyfrom(np.zeros((5, 8), "float32"))  # a store far past a kernel's own buffers
    args = kept.fresh_args()
    np.testing.assert_array_equal(args[1].numpy(), workload.random_inputs(0)[1])
    assert counts(workload)["remade"] == 1


def test_the_least_recently_used_workload_goes_first_within_the_budget():
    a, b, c = (Matmul(m=8, n=8, k=k) for k in (9, 10, 11))
    kept_data = KeptData(budget=lambda device: kept_bytes(a) + kept_bytes(b) + kept_bytes(c) - 1)
    for workload in (a, b, a, c):  # a used again before c comes: b is the oldest
        kept_data.get(workload, 0, CPU)
    assert len(kept_data) == 2 and counts(b)["evicted"] == 1 and "evicted" not in counts(a)
    assert not kept_data.get(a, 0, CPU)[1] and kept_data.get(b, 0, CPU)[1]
    assert counts(b)["inputs"] == 2


def test_a_gpus_budget_is_a_share_of_its_memory():
    gpu = SimpleNamespace(dlpack_device_type=lambda: 2, total_global_memory=80 << 30)
    assert data.keep_budget(gpu) == 20 << 30 and data.keep_budget(CPU) == data.CPU_KEEP_BYTES


def test_a_kernel_never_gets_the_kept_inputs_on_a_gpu_without_pytorch_they_are_checked_after_a_wrong_result(
        monkeypatch):
    """Where the digest costs a download (a GPU without PyTorch) it is taken after a wrong result
    only; on the CPU before every run."""
    workload = Matmul(m=8, n=8, k=7)
    kept = kept_from_host(workload, 0, CPU)
    assert kept.check_each_run
    kept.check_each_run = False  # as on a GPU without PyTorch
    kept.pristine[0].copyfrom(np.zeros((8, 7), "float32"))
    kept.fresh_args()
    assert "remade" not in counts(workload)
    kept.after_wrong()
    assert counts(workload)["remade"] == 1
    np.testing.assert_array_equal(kept.fresh_args()[0].numpy(), workload.random_inputs(0)[0])


def test_the_run_log_says_each_phase_and_fact_and_reads_back(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    monkeypatch.setattr("explorer.measure.worker.RUN_LOG_PATH", log)
    workload = Softmax(rows=4, cols=8)
    trial = Trial(tvm.IRModule(), workload, "llvm", None)
    _log_run(100, trial, {"load": 1.25, "data": 0.5, "copy": 0.1, "check": 0.4, "time": 2.0},
             {"data": "kept", "budget": "quick", "kernel_us": "50.00"})
    line = read_run_line(log.read_text().strip())
    assert line == RunLine(os.getpid(), 100, line.end_ns, "module", workload.label(), "",
                           {"load": 1.25, "data": 0.5, "copy": 0.1, "check": 0.4, "time": 2.0},
                           {"data": "kept", "budget": "quick", "kernel_us": "50.00"})
    assert line.held_ms == pytest.approx(4.25) and line.end_ns >= 100
    # An older line: no facts; a server of several GPUs names the worker's.
    old = read_run_line("7 100 200 softmax softmax 4x8 float32 gpu=1 | load=2.0 upload=1.0")
    assert (old.workload, old.gpu, old.phases_ms, old.facts) == ("softmax 4x8 float32", "1",
                                                                  {"load": 2.0, "upload": 1.0}, {})
    assert str(RUN_LOG_PATH).endswith(".log")


def test_the_stand_in_gpu_keeps_each_workloads_data_once(tmp_path, monkeypatch):
    """The class-server tests' stand-in GPU goes through the worker's keeping: one upload of each
    workload's inputs and one reference, however many settings of it a class measures."""
    import stand_in_gpu

    from explorer.presets import get_preset

    monkeypatch.setattr(stand_in_gpu, "MEASURE_S", 0.0)
    monkeypatch.setenv("EXPLORER_RUN_LOG", str(tmp_path / "runs.log"))
    spec = get_preset("dw-blog-final-96").spec
    other = get_preset("matmul-tiled-1024").spec
    settings = [spec.with_knobs(num_thread_x=x) for x in (8, 16, 32)] + [other, spec]
    for setting in settings:
        stand_in_gpu.measure(SimpleNamespace(spec=setting))
    assert counts(spec.workload) == counts(other.workload) == {"inputs": 1, "uploads": 1, "references": 1}
    facts = [read_run_line(line).facts["data"] for line in (tmp_path / "runs.log").read_text().splitlines()]
    assert facts == ["made", "kept", "kept", "made", "kept"]


# -- with PyTorch (the GPU's path; here on the CPU where PyTorch is installed) ----------------------

try:
    import torch
except ImportError:  # CI: NumPy's path only
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed here")


@needs_torch
def test_inputs_drawn_with_pytorch_are_seeded_uniform_in_the_input_types():
    workload = Matmul(m=64, n=32, k=48, dtype="float16")
    first, again = (data.drawn_inputs(workload, 3, torch.device("cpu")) for _ in range(2))
    assert [x.dtype for x in first] == [torch.float16] * 2 and [tuple(x.shape) for x in first] == [(64, 48), (48, 32)]
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not torch.equal(first[0], data.drawn_inputs(workload, 4, torch.device("cpu"))[0])
    assert all(-1 <= float(x.min()) and float(x.max()) <= 1 for x in first)


@needs_torch
def test_data_drawn_with_pytorch_has_a_float64_reference_and_checks_every_element():
    workload = Matmul(m=16, n=8, k=32)
    kept = data.kept_on_device(workload, 0, CPU)
    assert kept.on_device and counts(workload) == {"inputs": 1, "references": 1}
    inputs = [torch.from_dlpack(x).numpy() for x in kept.pristine[:-1]]
    np.testing.assert_allclose(kept.reference.numpy(), workload.reference(*inputs), rtol=1e-6, atol=1e-6)
    args = kept.fresh_args()
    assert torch.from_dlpack(args[-1]).isnan().all()
    right = (inputs[0].astype(np.float64) @ inputs[1]).astype(np.float32)
    args[-1].copyfrom(right)
    assert kept.check(args[-1]).correct
    right[3, 5] += 0.5
    args[-1].copyfrom(right)
    wrong = kept.check(args[-1])
    assert not wrong.correct and wrong.first_wrong_index == (3, 5) and wrong.wrong_count == 1
    torch.from_dlpack(kept.pristine[0]).zero_()  # written far past a kernel's buffers
    kept.fresh_args()
    assert counts(workload)["remade"] == 1
    np.testing.assert_array_equal(torch.from_dlpack(kept.pristine[0]).numpy(), inputs[0])


@needs_torch
def test_a_nan_output_is_wrong_on_the_device_check():
    workload = Softmax(rows=4, cols=16)
    kept = data.kept_on_device(workload, 0, CPU)
    args = kept.fresh_args()  # never written: NaN
    assert not kept.check(args[-1]).correct

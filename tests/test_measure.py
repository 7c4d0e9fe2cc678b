"""explorer.measure, the parts without a process or a device: the correctness gate, timing
statistics, launches per repeat, the device queue, settings, remote addresses, the CUDA
environment for a toolkit-less machine, the record's derived figures (roofline placement)."""
import base64
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tvm

from explorer.analysis.roofline import Ceilings
from explorer.build import build
from explorer.cuda_env import (
    PCH_OPTIONS,
    SOURCE_ONLY,
    binary_process_init,
    is_pip_cuda_root,
    kernel_environment,
    pip_cuda_root,
)
from explorer.measure import (
    InvalidMeasureSettings,
    Measurement,
    MeasureSettings,
    Remote,
    RemoteError,
    Timing,
    WrongResult,
    latency_us,
)
from explorer.measure import measurement as measurement_module
from explorer.measure.gate import EPSILON32, SAFETY, compare, tolerance
from explorer.measure.measurement import LocalGPU
from explorer.measure.timing import KernelRun, device_args, launches_for
from explorer.presets import get_preset
from explorer.workloads import Matmul

# -- gate ------------------------------------------------------------------------------


def test_tolerance_scales_with_reduction_length_and_output_magnitude():
    reference = np.array([[0.5, -30.0], [2.0, 1.0]], dtype=np.float32)
    assert tolerance(reference, 1024) == pytest.approx(SAFETY * EPSILON32 * 1024 * 30.0)
    # Small outputs are measured against 1, not against their own (tiny) size.
    assert tolerance(np.full((3,), 1e-3, np.float32), 9) == pytest.approx(SAFETY * EPSILON32 * 9)


def test_gate_accepts_float32_rounding():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (64, 256)), rng.uniform(-1, 1, (256, 64))
    reference = (a @ b).astype(np.float32)
    float32 = (a.astype(np.float32) @ b.astype(np.float32))
    check = compare(float32, reference, 256)
    assert check.correct and check.first_wrong_index is None and 0 < check.max_error < check.tolerance


def test_gate_reports_the_first_wrong_index_in_row_major_order():
    reference = np.zeros((4, 5), np.float32)
    output = reference.copy()
    output[3, 0] = 0.5
    output[2, 4] = -0.25  # comes first in row-major order
    check = compare(output, reference, 1)
    assert not check.correct
    assert check.first_wrong_index == (2, 4)
    assert (check.expected, check.got) == (0.0, -0.25)
    assert check.wrong_count == 2 and check.max_error == 0.5
    assert "index (2, 4)" in check.describe()


def test_gate_treats_nan_and_unwritten_elements_as_wrong():
    reference = np.ones((3,), np.float32)
    output = np.array([1.0, np.nan, 1.0], np.float32)
    check = compare(output, reference, 1)
    assert not check.correct and check.first_wrong_index == (1,) and check.max_error == np.inf


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_output_buffer_has_the_workloads_type_and_starts_unwritten(dtype):
    workload = Matmul(m=4, n=6, k=8, dtype=dtype, out_dtype=dtype)
    inputs = workload.random_inputs()
    reference = workload.reference(*inputs)
    *_, output = device_args(inputs, reference, workload.output_dtype(), tvm.cpu(0))
    assert output.dtype == dtype and output.shape == (4, 6)
    assert np.isnan(output.numpy().astype(np.float32)).all()
    # A kernel that wrote nothing is caught; the reference, rounded as the kernel rounds it, passes.
    assert not compare(output.numpy(), reference, workload.reduction_length()).correct
    assert compare(reference.astype(output.numpy().dtype), reference, workload.reduction_length()).correct


# -- timing ----------------------------------------------------------------------------


def test_timing_statistics_in_microseconds():
    timing = Timing.from_seconds([3e-6, 1e-6, 2e-6, 6e-6], launches_per_repeat=50)
    assert timing.samples_us == pytest.approx((3.0, 1.0, 2.0, 6.0))
    assert timing.median_us == pytest.approx(2.5)
    assert (timing.min_us, timing.max_us) == pytest.approx((1.0, 6.0))
    assert timing.std_us == pytest.approx(np.std([3, 1, 2, 6]))
    assert timing.launches == 200
    assert timing.to_dict()["repeats"] == 4


def test_launches_per_repeat_fill_the_minimum_repeat_time():
    assert launches_for(5e-6, 1e-3) == 200  # 200 × 5 µs = 1 ms
    assert launches_for(3e-6, 1e-3) == 334  # rounded up: at least 1 ms
    assert launches_for(2e-3, 1e-3) == 1  # one launch already lasts longer
    assert launches_for(0.0, 1e-3) == 100_000  # an empty kernel: capped


# -- record ----------------------------------------------------------------------------


# matmul 100³: 2e6 FLOPs and (3 × 10⁴ floats) × 4 B = 120 kB compulsory. On these ceilings the
# bytes take 120 000 / 60 GB/s = 2 µs (no L2 roof), the FLOPs 2e6 / 4000 GFLOP/s = 0.5 µs.
MEMORY_BOUND = Ceilings(4000.0, 60.0, None, 0, "measured on a test device")


def _measurement(median_us=None, ceilings=MEMORY_BOUND, correct=True, graph_us=None):
    from explorer.measure.gate import Check

    check = Check(correct, 0.0 if correct else 1.0, 1e-5, 0 if correct else 1, None if correct else (0, 1), 0.0, 1.0)
    timing, graph = (Timing((us,), 1) if us else None for us in (median_us, graph_us))
    workload = Matmul(m=100, n=100, k=100)
    return Measurement.of(workload, KernelRun("llvm", "CPU", check, timing, ceilings, 1.0, graph))


def test_measurement_rates_and_roofline_placement():
    m = _measurement(median_us=8.0)
    assert m.gflops == pytest.approx(2e6 / 8e-6 / 1e9)
    assert m.gbps == pytest.approx(120_000 / 8e-6 / 1e9)
    # The roofline bound is 2 µs: 8 µs reaches 25% of the attainable 1000 GFLOP/s.
    assert m.roofline_us == pytest.approx(2.0)
    assert m.percent_of_roofline == pytest.approx(25.0)
    assert "25% of the roofline (bound 2.00 µs at 60 GB/s HBM" in m.summary()
    assert m.to_dict()["median_us"] == 8.0 and m.to_dict()["ceilings"]["hbm_gbps"] == 60.0
    # Compute-bound on a slow FP32 unit: 2e6 FLOPs at 500 GFLOP/s take 4 µs.
    slow = _measurement(median_us=8.0, ceilings=Ceilings(500.0, 60.0, None, 0, "published figures for a test"))
    assert slow.roofline_us == pytest.approx(4.0) and slow.percent_of_roofline == pytest.approx(50.0)
    none = _measurement(median_us=8.0, ceilings=None)
    assert none.percent_of_roofline is None and "roofline" not in none.summary()


def test_pytorch_is_compared_with_the_graph_timing_when_there_is_one():
    # Back to back 3.6 µs, from a graph 1.6 µs: PyTorch (timed from graphs) is set beside 1.6.
    both = _measurement(median_us=3.6, graph_us=2.5)
    assert both.versus_pytorch == (2.5, "both from CUDA graphs")
    assert both.graph_percent_of_roofline == pytest.approx(80.0)  # the 2 µs bound over 2.5 µs
    assert "From a CUDA graph (as PyTorch is timed): median 2.50 µs, 80% of the roofline." in both.summary()
    assert both.to_dict()["cuda_graph"]["median_us"] == 2.5
    # No PyTorch where it ran (e.g. a remote server): the back-to-back figure, and it says so.
    alone = _measurement(median_us=3.6)
    assert alone.versus_pytorch == (3.6, "TVM launched back to back, PyTorch from CUDA graphs")
    assert alone.graph_percent_of_roofline is None and "CUDA graph" not in alone.summary()
    assert alone.to_dict()["cuda_graph"] is None


def test_a_wrong_kernel_has_no_latency(monkeypatch):
    wrong = _measurement(correct=False)
    assert wrong.median_us is None and wrong.gbps is None and wrong.percent_of_roofline is None
    assert wrong.to_dict()["first_wrong_index"] == [0, 1]
    assert "WRONG" in wrong.summary()
    monkeypatch.setattr(measurement_module, "measure", lambda spec, **options: wrong)
    with pytest.raises(WrongResult, match=r"index \(0, 1\)"):
        latency_us(None)


# -- settings and remote addresses ---------------------------------------------------------


def test_settings_are_validated():
    assert MeasureSettings().time_limit_s == 10
    with pytest.raises(InvalidMeasureSettings, match="time_limit_s"):
        MeasureSettings(time_limit_s=0)
    with pytest.raises(InvalidMeasureSettings, match="repeats"):
        MeasureSettings(repeats="many")


def test_remote_address_parsing():
    remote = Remote.parse("10.0.0.7:9190", "h100")
    assert (remote.host, remote.port, remote.key) == ("10.0.0.7", 9190, "h100")
    assert remote.name == "rpc://10.0.0.7:9190/h100"
    assert Remote.parse("gpu-box.example:9190", "a100").host == "gpu-box.example"
    for address in ("localhost", "host:0", "host:70000", ":9190", "a b:1"):
        with pytest.raises(RemoteError, match="HOST:PORT"):
            Remote.parse(address, "k")
    with pytest.raises(RemoteError, match="--key"):
        Remote.parse("host:9190", None)


# -- CUDA environment ------------------------------------------------------------------


def test_toolkit_less_machine_gets_the_pip_cuda_paths(tmp_path):
    env = kernel_environment(environ={"LD_LIBRARY_PATH": "/opt/lib"}, root=tmp_path, nvcc=None, nvrtc=(12, 6))
    assert env["LD_LIBRARY_PATH"] == f"/opt/lib:{tmp_path / 'lib'}"
    assert env["CUDA_PATH"] == str(tmp_path)
    assert env["TVM_CUDA_NVRTC_EXTRA_OPTS"] == f"-I{tmp_path / 'include' / 'cccl'}"  # no PCH before NVRTC 12.8


def test_a_cuda_toolkit_keeps_its_paths_and_nvrtc_gets_precompiled_headers(tmp_path):
    assert kernel_environment(environ={}, root=tmp_path, nvcc="/usr/local/cuda/bin/nvcc", nvrtc=None) == {}
    env = kernel_environment(environ={"CUDA_PATH": "/usr/local/cuda", "TVM_CUDA_NVRTC_EXTRA_OPTS": "-lineinfo"},
                             root=tmp_path, nvcc=None, nvrtc=(13, 0))
    assert env == {"TVM_CUDA_NVRTC_EXTRA_OPTS": "-lineinfo " + " ".join(PCH_OPTIONS)}


def test_a_process_that_compiles_binaries_undoes_the_apps_source_only_setting(tmp_path, monkeypatch):
    monkeypatch.setenv(SOURCE_ONLY, "1")
    monkeypatch.setattr(sys, "path", list(sys.path))
    binary_process_init(str(tmp_path))
    assert SOURCE_ONLY not in os.environ and str(tmp_path) in sys.path


def test_kernel_environment_adds_nothing_twice(tmp_path):
    environ = {}
    environ.update(kernel_environment(environ=environ, root=tmp_path, nvcc=None, nvrtc=(13, 0)))
    assert kernel_environment(environ=environ, root=tmp_path, nvcc=None, nvrtc=(13, 0)) == {}


def test_the_nvrtc_options_are_spelt_alike_whatever_order_a_process_came_by_them(tmp_path):
    """A process that first took the toolkit's environment (precompiled headers only), then the pip
    headers' (the CUDA library path too), spells the options as a process that took the second at once:
    the disk cache of binaries is keyed by them."""
    at_once = kernel_environment(environ={}, root=tmp_path, nvcc=None, nvrtc=(13, 0))
    environ = {"CUDA_PATH": "/usr/local/cuda"}  # a toolkit's machine: its own paths, only the headers
    environ.update(kernel_environment(environ=environ, root=tmp_path, nvcc="/usr/local/cuda/bin/nvcc", nvrtc=(13, 0)))
    assert environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] == " ".join(PCH_OPTIONS)
    del environ["CUDA_PATH"]  # the pip headers wanted now (cuda_compile's NVRTC environment)
    environ.update(kernel_environment(environ=environ, root=tmp_path, nvcc=None, nvrtc=(13, 0)))
    assert environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] == at_once["TVM_CUDA_NVRTC_EXTRA_OPTS"]
    assert at_once["TVM_CUDA_NVRTC_EXTRA_OPTS"] == f"-I{tmp_path / 'include' / 'cccl'} " + " ".join(PCH_OPTIONS)


def _nvrtc(jobs: list[tuple[str, str, str]], env: dict) -> list[bytes]:
    """Compile (source, "cubin" or "ptx", TVM_CUDA_NVRTC_EXTRA_OPTS) in order in one process started with
    ``env`` (so that a later one can use the precompiled header of an earlier one); their binaries. TVM reads
    the extra options at each compile, so one process compiles with several (a second process cost one more
    import of TVM)."""
    script = ("import base64, json, os, sys; from tvm.support import nvcc; out = []\n"
              "for s, f, options in json.load(sys.stdin):\n"
              "    os.environ['TVM_CUDA_NVRTC_EXTRA_OPTS'] = options\n"
              "    out.append(nvcc.compile_cuda(s, target_format=f, arch='sm_90a', compiler='nvrtc'))\n"
              "json.dump([base64.b64encode(bytes(o)).decode() for o in out], sys.stdout)")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], input=json.dumps(jobs).encode(), env=env,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return [base64.b64decode(binary) for binary in json.loads(proc.stdout)]


def test_pip_nvrtc_compiles_the_generated_cuda_without_a_toolkit():
    """What a GPU machine with a driver but no toolkit does at load time: NVRTC from pip,
    with the environment kernel_environment gives it, turns TVM's CUDA into a cubin; the
    precompiled header (made by a first compile, used by the next) leaves the kernel code
    as it was."""
    root = pip_cuda_root()
    if root is None:
        pytest.skip("the pip NVRTC packages (requirements.txt) are not installed")
    first, second = (build(get_preset(p).spec, "h100").cuda for p in ("dw-blog-final-96", "matmul-tiled-1024"))
    machine = {name: value for name, value in os.environ.items()
               if name not in ("CUDA_PATH", "LD_LIBRARY_PATH", "TVM_CUDA_NVRTC_EXTRA_OPTS")}
    plain = {**machine, **kernel_environment(environ=machine, root=root, nvcc=None, nvrtc=None)}
    fast = {**machine, **kernel_environment(environ=machine, root=root, nvcc=None, nvrtc=(13, 0))}
    # The two environments differ in the NVRTC options only; the plain compile comes first, so that the first
    # fast one (the cubin) makes the precompiled header (NVRTC keeps it in the process) and the second uses it.
    assert {k for k in plain.keys() | fast.keys() if plain.get(k) != fast.get(k)} == {"TVM_CUDA_NVRTC_EXTRA_OPTS"}
    plain_options, fast_options = plain["TVM_CUDA_NVRTC_EXTRA_OPTS"], fast["TVM_CUDA_NVRTC_EXTRA_OPTS"]
    assert "-pch" not in plain_options.split() and "-pch" in fast_options.split()
    plain_ptx, cubin, fast_ptx = _nvrtc([(second, "ptx", plain_options), (first, "cubin", fast_options),
                                         (second, "ptx", fast_options)], plain)
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF file
    kernel_code = [[line for line in ptx.decode().splitlines() if not line.startswith(".global")]
                   for ptx in (plain_ptx, fast_ptx)]
    assert kernel_code[0] == kernel_code[1]  # the headers' constants (.global) may come in another order


# -- queue -----------------------------------------------------------------------------


def _wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_gpu_takes_one_caller_at_a_time_and_tells_a_waiting_one_how_many_are_ahead():
    gpu = LocalGPU("test")  # its worker starts only when called: none here
    release = {name: threading.Event() for name in "ABC"}
    seen = {name: [] for name in "ABC"}
    inside = []
    entered = []

    def user(name):
        with gpu.turn(on_wait=seen[name].append):
            inside.append(name)
            assert len(inside) == 1, "two kernels on the GPU at once"
            entered.append(name)
            release[name].wait(5)
            inside.remove(name)

    threads = {}
    for count, name in enumerate("ABC"):
        threads[name] = threading.Thread(target=user, args=(name,))
        threads[name].start()
        _wait_until(lambda name=name, count=count: seen[name] == ([count] if count else []))
    assert entered == ["A"] and seen == {"A": [], "B": [1], "C": [2]}
    for name in "ABC":
        release[name].set()
    for name in "ABC":
        threads[name].join(5)
    assert sorted(entered) == ["A", "B", "C"]
    with gpu.turn(on_wait=seen["A"].append):
        pass
    assert seen["A"] == []  # nobody ahead any more


def test_a_gpu_passes_its_turn_on_when_the_holder_fails():
    gpu = LocalGPU("test")
    with pytest.raises(RuntimeError):
        with gpu.turn():
            raise RuntimeError("kernel failed")
    heard = []
    with gpu.turn(on_wait=heard.append):
        assert heard == []


def test_without_an_nvidia_driver_the_gpu_name_is_none_without_starting_the_worker(monkeypatch, tmp_path):
    class Worker:  # what the GPU's worker would be asked
        def __init__(self):
            self.asked = []

        def call(self, function, *args, **kwargs):
            self.asked.append(function.__name__)
            return "Stand-in GPU"

    devices = [tmp_path / "nvidiactl", tmp_path / "dxg"]  # this machine's, as a test describes it
    monkeypatch.setattr(measurement_module, "PLATFORM", "linux")
    monkeypatch.setattr(measurement_module, "DRIVER_DEVICES", tuple(map(str, devices)))
    gpu = LocalGPU("test")
    gpu.worker = Worker()
    assert gpu.name() is None and gpu.worker.asked == []
    for device in devices:  # a driver's device (WSL's): the worker is asked, once
        device.touch()
        gpu = LocalGPU("test")
        gpu.worker = Worker()
        assert gpu.name() == "Stand-in GPU" and gpu.name() == "Stand-in GPU" and gpu.worker.asked == ["gpu_name"]
        device.unlink()
    monkeypatch.setattr(measurement_module, "PLATFORM", "win32")  # no device files to look at: asked
    gpu = LocalGPU("test")
    gpu.worker = Worker()
    assert gpu.name() == "Stand-in GPU" and gpu.worker.asked == ["gpu_name"]


def test_without_an_nvidia_driver_a_cuda_measurement_or_warm_up_says_so_without_starting_the_worker(monkeypatch,
                                                                                                   tmp_path):
    from explorer.measure import NoDevice
    from explorer.measure.worker import NO_GPU, Trial

    asked = []

    class Worker:
        def call(self, function, *args, **kwargs):
            asked.append(function.__name__)
            raise NoDevice(NO_GPU)  # what the worker answers here

    spec = get_preset("dw-blog-final-96").spec
    monkeypatch.setattr(measurement_module, "PLATFORM", "linux")
    monkeypatch.setattr(measurement_module, "DRIVER_DEVICES", (str(tmp_path / "nvidiactl"),))
    gpu = LocalGPU("test")
    gpu.worker = Worker()
    for target in (None, "auto", "h100"):
        with pytest.raises(NoDevice, match=f"^{NO_GPU}$"):
            gpu.measure(Trial(spec, spec.workload, target, MeasureSettings()))
        with pytest.raises(NoDevice, match=f"^{NO_GPU}$"):
            gpu.warm_up(spec, target)
    assert asked == []
    with pytest.raises(NoDevice):  # a CPU target is measured by the worker
        gpu.measure(Trial(spec, spec.workload, "llvm", MeasureSettings()))
    assert asked == ["prepare"]
    (tmp_path / "nvidiactl").touch()  # a driver: the worker says whether there is a GPU
    with pytest.raises(NoDevice):
        gpu.warm_up(spec, "auto")
    assert asked == ["prepare", "warm_up"]


def test_remote_cuda_target_comes_from_the_device_attributes():
    """A remote device's type carries TVM's RPC tag, which Target.from_device rejects."""
    from types import SimpleNamespace

    from explorer.measure.remote import remote_cuda_target

    h100 = SimpleNamespace(compute_version="9.0", max_shared_memory_per_block=49152, max_threads_per_block=1024,
                           warp_size=32)
    target = remote_cuda_target(h100)
    assert target.kind.name == "cuda" and target.arch == "sm_90"
    assert int(target.attrs["max_shared_memory_per_block"]) == 49152
    assert int(target.attrs["thread_warp_size"]) == 32


def test_a_pip_cuda_root_without_libcudacxx_is_not_one(tmp_path):
    # PyTorch's wheels bring nvidia/cu13 with NVRTC and the runtime but not libcu++, which
    # TVM's generated source includes: such a root must not replace a toolkit.
    root = tmp_path / "cu13"
    (root / "include").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "lib" / "libnvrtc.so.13").write_text("")
    assert not is_pip_cuda_root(root)
    (root / "include" / "cccl" / "cuda" / "std").mkdir(parents=True)
    (root / "include" / "cccl" / "cuda" / "std" / "cstdint").write_text("")
    assert is_pip_cuda_root(root)


def test_the_timed_repeats_fit_the_timing_budget():
    from explorer.measure.settings import QUICK_SETTINGS, repeats_within

    full = MeasureSettings()  # 20 repeats within 100 ms
    assert repeats_within(0.001, full) == 20  # a 1 ms repeat: all twenty
    assert repeats_within(0.03, full) == 3  # 100 ms / 30 ms
    assert repeats_within(1.0, full) == repeats_within(10.0, full) == 2  # never fewer than two
    assert repeats_within(10.0, MeasureSettings(repeats=1)) == 1  # nor more than asked for
    # The short budget: 3 repeats of 0.5 ms within 2 ms, two of a kernel of a millisecond or more.
    assert repeats_within(0.0005, QUICK_SETTINGS) == 3
    assert repeats_within(0.001, QUICK_SETTINGS) == repeats_within(0.1, QUICK_SETTINGS) == 2


def test_a_cold_l2_flush_writes_four_l2s_or_256_mib_where_the_l2_is_unknown():
    from explorer.measure.timing import flush_bytes

    assert flush_bytes(50 << 20) == 200 << 20  # an H100's 50 MiB L2
    assert flush_bytes(None) == flush_bytes(0) == 256 << 20


class _StandInEvaluated:
    """A module whose evaluator records how it was asked to time and answers ``per_launch_s``
    (1 ms) per launch."""

    def __init__(self, per_launch_s: float = 1e-3):
        self.asked, self.per_launch_s = [], per_launch_s

    def time_evaluator(self, name, device, **options):
        self.asked.append(options)
        return lambda *args: type("Result", (), {"results": (self.per_launch_s,) * options["repeat"]})()


def test_a_slow_kernel_is_timed_after_its_check_with_nothing_else():
    """A kernel whose check took 2.1 ms (the launch and the wait for it) is a slow one: one launch a
    repeat, two within the short budget, no probe. With a timer of single launches (the GPU's, with
    PyTorch) it is not even given the evaluator's warm-up launch; without the check's time (the
    ceilings' kernels) a probe of one launch is its first repeat."""
    from explorer.measure.settings import QUICK_SETTINGS
    from explorer.measure.timing import time_function

    module = _StandInEvaluated(2e-3)
    quick = time_function(module, _StandInH100(), [], QUICK_SETTINGS, first_s=2.1e-3)
    assert module.asked == [{"number": 1, "repeat": 2}]
    assert quick.launches_per_repeat == 1 and quick.samples_us == (2000.0,) * 2

    module, asked = _StandInEvaluated(2e-3), []
    timed = time_function(module, _StandInH100(), [], QUICK_SETTINGS, first_s=2.1e-3,
                          time_launches=lambda repeats: asked.append(repeats) or Timing((2000.0,) * repeats, 1))
    assert module.asked == [] and asked == [2] and timed.samples_us == (2000.0,) * 2

    module = _StandInEvaluated(2e-3)
    full = time_function(module, _StandInH100(), [], MeasureSettings())  # 20 repeats fit 100 ms
    assert module.asked == [{"number": 1, "repeat": 1}, {"number": 1, "repeat": 19}]
    assert full.samples_us == (2000.0,) * 20


def test_a_fast_kernel_whose_check_was_slow_is_probed_after_all():
    """10 µs a launch, but the check's launch took 3 ms (its module loaded): the two single launches
    say so, and the kernel is timed as a fast one: a probe of ten launches (PROBE_S), then three
    repeats of 50 (0.5 ms)."""
    from explorer.measure.settings import QUICK_SETTINGS
    from explorer.measure.timing import time_function

    module = _StandInEvaluated(1e-5)
    timing = time_function(module, _StandInH100(), [], QUICK_SETTINGS, first_s=3e-3)
    assert module.asked == [{"number": 1, "repeat": 2}, {"number": 10, "repeat": 1}, {"number": 50, "repeat": 3}]
    assert timing.launches_per_repeat == 50 and len(timing.samples_us) == 3


def test_a_fast_kernels_probes_go_straight_to_a_repeat_which_counts():
    """10 µs a launch: a probe of one launch (10 µs, short of PROBE_S), then one of a repeat's worth
    (50 launches, 0.5 ms: the short budget's repeat, timed already), then the other two repeats. The
    check's 30 µs bound the first probe to three launches; the full budget's repeat is 1 ms."""
    from explorer.measure.settings import QUICK_SETTINGS
    from explorer.measure.timing import time_function

    module = _StandInEvaluated(1e-5)
    timing = time_function(module, _StandInH100(), [], QUICK_SETTINGS)
    assert module.asked == [{"number": 1, "repeat": 1}, {"number": 50, "repeat": 1}, {"number": 50, "repeat": 2}]
    assert timing.launches_per_repeat == 50 and len(timing.samples_us) == 3

    module = _StandInEvaluated(1e-5)
    time_function(module, _StandInH100(), [], QUICK_SETTINGS, first_s=30e-6)
    assert module.asked == [{"number": 3, "repeat": 1}, {"number": 50, "repeat": 1}, {"number": 50, "repeat": 2}]

    module = _StandInEvaluated(1e-5)
    full = time_function(module, _StandInH100(), [], MeasureSettings())
    assert module.asked == [{"number": 1, "repeat": 1}, {"number": 100, "repeat": 1}, {"number": 100, "repeat": 19}]
    assert full.launches_per_repeat == 100 and len(full.samples_us) == 20


def test_a_probe_short_of_a_repeat_only_sizes_the_repeats():
    """300 µs a launch: its one-launch probe (300 µs) is past PROBE_S but short of the short
    budget's 0.5 ms repeat: repeats of two launches, all three launched."""
    from explorer.measure.settings import QUICK_SETTINGS
    from explorer.measure.timing import time_function

    module = _StandInEvaluated(3e-4)
    timing = time_function(module, _StandInH100(), [], QUICK_SETTINGS, first_s=3.5e-4)
    assert module.asked == [{"number": 1, "repeat": 1}, {"number": 2, "repeat": 3}]
    assert timing.launches_per_repeat == 2 and len(timing.samples_us) == 3


class _StandInH100:
    l2_cache_size_bytes = 50 << 20


def test_cold_l2_times_one_launch_per_repeat_after_a_flush():
    from explorer.measure.timing import time_function

    module = _StandInEvaluated()
    timing = time_function(module, _StandInH100(), [], MeasureSettings(cold_l2=True, repeats=4))
    probe, timed = module.asked
    assert probe == {"number": 1, "repeat": 2}  # sizes nothing: a cold repeat is one launch
    assert timed == {"number": 1, "repeat": 4, "cache_flush_bytes": 200 << 20}
    assert timing.launches_per_repeat == 1 and timing.samples_us == (1000.0,) * 4


def test_cold_l2_timing_runs_a_real_kernel(monkeypatch):
    import tvm
    from tvm import te

    from explorer.measure import timing as timing_module

    monkeypatch.setattr(timing_module, "FLUSH_UNKNOWN_L2_BYTES", 1 << 20)  # a CPU's L2 is not known to TVM
    a = te.placeholder((1 << 16,), "float32", name="a")
    b = te.compute(a.shape, lambda i: a[i] * 2.0, name="b")
    module = tvm.compile(te.create_prim_func([a, b]), target="llvm").jit()
    args = [tvm.runtime.tensor(np.ones(1 << 16, "float32")), tvm.runtime.empty((1 << 16,), "float32")]
    cold = timing_module.time_function(module, tvm.cpu(0), args, MeasureSettings(cold_l2=True, repeats=3))
    assert cold.launches_per_repeat == 1 and len(cold.samples_us) == 3 and cold.min_us > 0


def test_no_collection_runs_while_a_cuda_graph_is_captured(monkeypatch):
    """Python's collector frees TVM tensors and modules held in reference cycles, and a free of
    device memory during a capture ends the measuring process: during a capture the collector
    is off (stand-in torch, no GPU)."""
    import gc
    import types

    from explorer.measure import graphs

    during = []

    class Garbage:  # a reference cycle, as a TVM module held by a traceback's frame would be
        def __init__(self):
            self.me = self

        def __del__(self):
            during.append("freed")

    class Capture:
        def __init__(self, graph):
            pass

        def __enter__(self):
            during.append("capture")

        def __exit__(self, *exc):
            during.append("end")

    class Graph:
        def replay(self):
            pass

    cuda = types.SimpleNamespace(CUDAGraph=Graph, graph=Capture, synchronize=lambda: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))

    def op():
        during.append(gc.isenabled())
        Garbage()
        [[] for _ in range(50_000)]  # allocations enough to start the collector, were it on

    graphs._capture(op, 2)
    assert during == ["capture", False, False, "end"]
    assert gc.isenabled()
    gc.collect()
    assert during[-2:] == ["freed", "freed"]  # collected once the capture is over


def test_a_slow_kernels_launches_are_timed_back_to_back_between_events(monkeypatch):
    """time_launches (stand-in torch, no GPU): the GPU kept busy, then an event, and a launch and an
    event for each repeat, all on PyTorch's stream with TVM launching there; one wait at the end;
    each repeat the time between two events."""
    import contextlib
    import types

    from explorer.measure import graphs

    done, clock = [], iter(range(0, 100, 3))  # each event recorded 3 ms after the one before

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            self.at = next(clock)
            done.append("event")

        def synchronize(self):
            done.append("wait")

        def elapsed_time(self, end):
            return end.at - self.at

    @contextlib.contextmanager
    def torch_stream():
        done.append("torch stream")
        yield
        done.append("own stream")

    cuda = types.SimpleNamespace(Event=Event, is_available=lambda: True, _sleep=lambda cycles: done.append("busy"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "tvm_ffi", types.SimpleNamespace(use_torch_stream=torch_stream))
    timing = graphs.time_launches(lambda: done.append("launch"), 2)
    assert done == ["torch stream", "busy", "event", "launch", "event", "launch", "event", "own stream", "wait"]
    assert timing.samples_us == (3000.0, 3000.0) and timing.launches_per_repeat == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the process's memory maps (Linux)")
def test_a_library_the_worker_loaded_is_unloaded_once_it_drops_it(tmp_path):
    import gc

    from tvm import te

    from explorer.measure import worker

    a = te.placeholder((8,), name="a")
    b = te.compute((8,), lambda i: a[i] + 1.0, name="b")
    path = str(tmp_path / "kernel.so")
    tvm.compile(te.create_prim_func([a, b]), target="llvm").export_library(path)
    module = worker.load_library(path)
    x, y = tvm.runtime.tensor(np.zeros(8, "float32")), tvm.runtime.tensor(np.zeros(8, "float32"))
    module["main"](x, y)
    assert y.numpy().tolist() == [1.0] * 8
    assert path in open("/proc/self/maps").read()
    del module
    gc.collect()
    # A class loads a library per setting: one kept for the process's life would never give back its memory.
    assert path not in open("/proc/self/maps").read()

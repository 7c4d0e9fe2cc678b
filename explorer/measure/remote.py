"""Remote GPUs through TVM's RPC tracker: the way to grow past one machine.

The kernel is built here, exported as a shared library, uploaded to a server that the
tracker hands out for ``key``, loaded there and timed there with the same functions as the
local worker (``timing.run_checked``). TVM's server runs each session in a child process
with a time limit (``session_timeout``), so a remote kernel that crashes or hangs ends
only that session.

A module built on a machine without a GPU carries CUDA *source* only; the server compiles
it when it loads the module, through TVM's ``tvm_callback_cuda_compile`` (NVRTC via
``cuda-bindings``, or nvcc with ``TVM_CUDA_COMPILE_MODE=nvcc``). Start servers with
``python -m explorer.measure.server`` so that the pip NVRTC is found (see cuda_env.py).
Exporting needs a C compiler (``cc``) here to link the host code; the ``llvm`` target is
only for a server of the same CPU architecture (the tests use one on loopback).
"""
from __future__ import annotations

import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import rpc
from tvm.backend.cuda import _detect_target_from_device as detect_cuda_target

from ..analysis.roofline import Ceilings
from ..build import Spec, build
from ..targets import resolve_target
from ..errors import ExplorerError
from .errors import KernelCrashed, KernelTimeout, MeasureError, NoDevice, RemoteError, error_summary
from .ceilings import CEILING_SETTINGS, measure_ceilings
from .timing import KernelRun, device_args, run_checked
from .worker import Job, workload_data

# Upload, NVRTC at load and the ceilings' kernels, on top of the kernel's own time limit: a
# hung remote kernel is given up after time_limit_s + this.
SESSION_ALLOWANCE_S = 30
CONNECT_TIMEOUT_S = 5
# The roofline's ceilings by (remote, target): measured once per remote device.
_ceilings: dict[tuple, Ceilings] = {}


@dataclass(frozen=True)
class Remote:
    """A tracker address and the key its GPU servers registered with."""

    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, address: str, key: str | None) -> "Remote":
        match = re.fullmatch(r"\[?([\w.:-]+?)\]?:(\d{1,5})", (address or "").strip())
        if not match or not 0 < int(match.group(2)) < 65536:
            raise RemoteError(f"--rpc expects the tracker as HOST:PORT (e.g. 127.0.0.1:9190), got '{address}'.")
        if not key or not re.fullmatch(r"[\w.-]+", key):
            raise RemoteError("--rpc needs --key KEY: the key the GPU servers registered with at the tracker.")
        return cls(match.group(1), int(match.group(2)), key)

    @property
    def name(self) -> str:
        return f"rpc://{self.host}:{self.port}/{self.key}"

    def __str__(self) -> str:
        return f"{self.host}:{self.port} key {self.key}"


def run_remote(job: Job, remote: Remote) -> KernelRun:
    session = _session(remote, job.settings.time_limit_s + SESSION_ALLOWANCE_S)
    try:
        outcome = _run_in_session(session, job, remote)
    except ExplorerError as error:  # the kernel does not build (InvalidKnobs), no GPU there
        outcome = error.with_traceback(None)
    # The server takes its next session only once this one is closed, which happens when the
    # last reference to it goes: no traceback may keep it alive.
    session = None
    if isinstance(outcome, ExplorerError):
        raise outcome
    return outcome


def _run_in_session(session, job: Job, remote: Remote) -> KernelRun | MeasureError:
    """Build here, run there; a failure there comes back as a (not raised) MeasureError."""
    target = _target(session, job.target)
    device = session.cuda(0) if target.kind.name == "cuda" else session.cpu(0)
    host_module = _host_module(job.kernel, target)
    inputs, reference = workload_data(job.workload, job.settings.seed)
    start = time.perf_counter()
    try:
        module = _upload(session, host_module, "kernel.so")
        compile_ms = (time.perf_counter() - start) * 1e3
        args = device_args(inputs, reference, device)
        check, timing = run_checked(module, device, args, reference, job.workload.reduction_length(), job.settings)
        ceilings = None
        name = device.device_name if target.kind.name == "cuda" else "CPU"
        if timing is not None and job.settings.floor:
            key = (remote, str(target))
            if key not in _ceilings:
                _ceilings[key] = _measure_ceilings(session, device, target, f"{name} ({remote})")
            ceilings = _ceilings[key]
    except Exception as error:  # the session broke off (its process died or timed out) or a CUDA error
        if time.perf_counter() - start >= job.settings.time_limit_s:
            return KernelTimeout(
                f"The kernel did not finish within the remote session's time limit on {remote}; the session was ended."
            )
        return KernelCrashed(f"The kernel failed on the remote server {remote} ({error_summary(error)}).")
    return KernelRun(str(target), f"{name} ({remote})", check, timing, ceilings, compile_ms)


def _session(remote: Remote, timeout_s: float):
    try:
        # TVM's own connect retries for a minute; an unreachable tracker should fail at once.
        socket.create_connection((remote.host, remote.port), timeout=CONNECT_TIMEOUT_S).close()
        tracker = rpc.connect_tracker(remote.host, remote.port)
        servers = {item["key"] for item in tracker.summary()["server_info"]}
    except (OSError, RuntimeError) as error:
        raise RemoteError(f"Cannot reach the RPC tracker at {remote.host}:{remote.port} ({error_summary(error)}).") from None
    if f"server:{remote.key}" not in servers:
        raise NoDevice(
            f"No server with key '{remote.key}' is registered at the tracker {remote.host}:{remote.port}; start one "
            f"on the GPU machine: python -m explorer.measure.server --tracker {remote.host}:{remote.port} --key {remote.key}"
        )
    try:
        # The tracker queues requests per key: this waits while the servers are busy.
        return tracker.request(remote.key, priority=1, session_timeout=timeout_s)
    except (OSError, RuntimeError) as error:
        raise RemoteError(f"The tracker at {remote.host}:{remote.port} gave no session ({error_summary(error)}).") from None


def _target(session, name: str | None) -> tvm.target.Target:
    """"auto" means the remote GPU itself, whatever this machine has."""
    if name in (None, "", "auto"):
        device = session.cuda(0)
        if not device.exist:
            raise NoDevice("The remote server has no CUDA device; give --target llvm for a CPU server.")
        return remote_cuda_target(device)
    return resolve_target(name)


def remote_cuda_target(device) -> tvm.target.Target:
    """The CUDA target of a (remote) device from its attributes (arch, shared memory,
    threads, warp size), by TVM's own CUDA detector: ``Target.from_device`` dispatches on
    the device type and does not know the RPC-tagged types of a remote device."""
    return detect_cuda_target(device)


def _host_module(kernel: Spec | tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
    if isinstance(kernel, Spec):
        return build(kernel, target).runtime_module
    host_target = tvm.target.Target(target, host="llvm") if target.kind.name == "cuda" else target
    return tvm.compile(kernel, target=host_target).mod


def _upload(session, host_module: tvm.runtime.Module, name: str):
    """Export, upload and load as ``name``: one name per library in a session, since
    overwriting a loaded shared library crashes the server."""
    with tempfile.TemporaryDirectory(prefix="explorer-rpc-") as tmp:
        path = Path(tmp) / name
        tvm.runtime.Executable(host_module).export_library(str(path))
        session.upload(str(path))
    return session.load_module(name)


def _measure_ceilings(session, device, target: tvm.target.Target, device_name: str) -> Ceilings:
    def load(module: tvm.IRModule, name: str):
        return _upload(session, _host_module(module, target), f"{name}.so")

    return measure_ceilings(load, device, target, device_name, CEILING_SETTINGS)

"""Timing with CUDA graphs: the same method for the PyTorch baseline and for TVM kernels.

``time_evaluator`` launches a TVM kernel back to back from C++, but each launch still adds
1-2 µs of host launch cost, most of a small kernel's time (measured on the H100: the 21×21
depthwise preset best-dw-21-flat takes 3.3 µs per launch back to back and 1.6 µs replayed
from a graph). PyTorch is timed by replaying a captured CUDA graph, which has no
per-launch host cost. So that a ratio compares kernels and not launch paths, a TVM
kernel is also timed that way: ``tvm_ffi.use_torch_stream`` makes TVM launch on PyTorch's
current stream, which inside ``torch.cuda.graph`` is the capturing one, so TVM's launches
are captured like PyTorch's.

A slow kernel (a millisecond or more) is timed there too, one launch a repeat with CUDA events
between back-to-back launches (:func:`time_launches`): no warm-up launch and no wait between
repeats, so the GPU holds it for little more than its launches.

Runs in the measuring worker; imports torch only when called.
"""
from __future__ import annotations

import gc
import math
from collections.abc import Callable

from .errors import BaselineUnavailable, MeasureError
from .settings import MeasureSettings, repeats_within
from .timing import Timing, flush_bytes, launches_for

# Ops captured in one graph; a repeat replays the graph as often as it needs.
MAX_OPS_PER_GRAPH = 100
PROBE_OPS = 10
# Cycles the GPU spins before the first timed launch of time_launches (~50 µs at 2 GHz): the host's
# first launch reaches it while it still spins.
BUSY_CYCLES = 100_000


def cuda_torch():
    """PyTorch, when it is importable and sees a CUDA GPU; else BaselineUnavailable."""
    try:
        import torch
    except ImportError:
        raise BaselineUnavailable("PyTorch is not installed where the kernels run, so there is no CUDA-graph "
                                  "timing and no baseline.") from None
    if not torch.cuda.is_available():
        raise BaselineUnavailable("PyTorch cannot see a CUDA GPU where the kernels run, so there is no CUDA-graph "
                                  "timing and no baseline.")
    return torch


def torch_tensor(array):
    """A CPU tensor of a NumPy array; bfloat16 (ml_dtypes, which torch does not read) goes
    through its 16-bit pattern."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("uint16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def time_tvm_graph(module, args, settings: MeasureSettings | None = None, check=None) -> Timing:
    """``module["main"](*args)`` (TVM tensors on the local GPU) timed by :func:`time_cuda_graph`.

    With ``check`` (the output, a PyTorch tensor -> its Check), the output is first set to NaN and
    one captured launch replayed and checked, so a capture that recorded nothing (a launch on
    another stream) cannot pass as a fast kernel."""
    settings = settings or MeasureSettings()
    import tvm_ffi

    torch = cuda_torch()
    main = module["main"]
    tensors = [torch.from_dlpack(a) for a in args]  # the same device memory, seen by PyTorch

    def launch():
        with tvm_ffi.use_torch_stream():
            main(*tensors)

    if check is not None:
        tensors[-1].fill_(float("nan"))
        _capture(launch, 1)  # replays once
        checked = check(tensors[-1])
        if not checked.correct:
            raise MeasureError(f"Replayed from a CUDA graph, the kernel's output is {checked.describe()}; "
                               "the graph timing is not trusted.")
    return time_cuda_graph(launch, settings)


def time_launches(launch: Callable, repeats: int) -> Timing:
    """``repeats`` single launches on PyTorch's stream (TVM launches there inside
    ``tvm_ffi.use_torch_stream``), back to back with CUDA events between them, and no warm-up:
    for a kernel of a millisecond or more whose check's launch was one (timing.time_function). The
    GPU is kept busy while the first event is recorded, so the first repeat does not time the
    host's first launch either."""
    import tvm_ffi

    torch = cuda_torch()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
    with tvm_ffi.use_torch_stream():
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(BUSY_CYCLES)
        events[0].record()
        for event in events[1:]:
            launch()
            event.record()
    events[-1].synchronize()
    return Timing(tuple(start.elapsed_time(end) * 1e3 for start, end in zip(events, events[1:], strict=False)), 1)


def time_cuda_graph(op: Callable, settings: MeasureSettings) -> Timing:
    """Per-op device time: ops captured back to back in one CUDA graph, the graph replayed
    until a repeat lasts ``settings.min_repeat_us``; CUDA events around each repeat (with
    ``settings.cold_l2``, :func:`time_cold_graph`)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if settings.cold_l2:
        return time_cold_graph(op, settings)
    probe_ms = _time_graph(_capture(op, PROBE_OPS), 1)[0] / PROBE_OPS
    per_repeat = launches_for(probe_ms * 1e-3, settings.min_repeat_s)
    ops_per_graph = min(per_repeat, MAX_OPS_PER_GRAPH)
    replays = math.ceil(per_repeat / ops_per_graph)
    graph = _capture(op, ops_per_graph)
    launches = ops_per_graph * replays
    repeats = repeats_within(probe_ms * 1e-3 * launches, settings)
    samples_ms = [elapsed / launches for elapsed in _time_graph(graph, replays, repeats)]
    return Timing(tuple(ms * 1e3 for ms in samples_ms), launches)


def time_cold_graph(op: Callable, settings: MeasureSettings) -> Timing:
    """(After :func:`time_cuda_graph`'s warm-up.) One op per repeat, replayed from a graph
    after the device writes a buffer of ``flush_bytes`` (the L2 then holds none of the op's
    inputs); CUDA events around the replay alone. The replay is queued while the write
    runs, so no host time is timed."""
    import torch

    graph = _capture(op, 1)
    probe_ms = _time_graph(graph, 1)[0]
    flush = torch.empty(flush_bytes(torch.cuda.get_device_properties(0).L2_cache_size) // 4, dtype=torch.int32,
                        device="cuda")
    samples_ms = []
    for _ in range(repeats_within(probe_ms * 1e-3, settings)):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples_ms.append(start.elapsed_time(end))
    return Timing(tuple(ms * 1e3 for ms in samples_ms), 1)


def _capture(op: Callable, count: int):
    import torch

    graph = torch.cuda.CUDAGraph()
    # No device memory may be freed while a graph is captured: TVM's free of a tensor or a
    # module then fails inside its destructor and ends the process. Python's collector frees
    # such objects (held in reference cycles) whenever it runs, so it is off during the capture
    # and collects them after it. PyTorch no longer collects before a capture (it did, and
    # made it opt-in, torch.compiler.config.force_cudagraph_gc, for its cost per capture).
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph):
            for _ in range(count):
                op()
    finally:
        if collecting:
            gc.enable()
    graph.replay()  # the first replay uploads the graph; not timed
    torch.cuda.synchronize()
    return graph


def _time_graph(graph, replays: int, repeats: int = 1) -> list[float]:
    """Milliseconds of each repeat of ``replays`` back-to-back replays."""
    import torch

    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out

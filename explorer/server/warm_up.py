"""The GPU's warm-up (the measuring worker, CUDA, PyTorch, NVRTC's precompiled header) and
the record of its steps that a page shows until the GPU is ready."""
from __future__ import annotations

import copy
import logging
import time

from .. import measure
from ..build import Spec
from ..errors import ExplorerError
from ..targets import local_gpu_target

log = logging.getLogger(__name__)  # the server's log says when each warm-up step ended


class WarmUp:
    """What the GPU's warm-up has done so far: shown as "warming up the GPU…" until ready."""

    def __init__(self):
        self.steps: list[tuple[str, float]] = []
        self.started = time.time()
        self.device: str | None = None
        self.error: str | None = None
        self.done = False

    @property
    def gpu(self) -> bool:
        return self.done and self.error is None

    def step(self, name: str) -> None:
        self.steps.append((name, round(time.time() - self.started, 2)))
        log.info("warm-up: %s (at %.1f s)", name, self.steps[-1][1])

    def finish(self, device: str) -> None:
        self.device, self.done = device, True
        self.step("ready")

    def fail(self, reason: str) -> None:
        self.error, self.done = reason, True
        self.step("no GPU")

    def with_steps_of(self, other: WarmUp) -> WarmUp:
        """A copy of this record with ``other``'s steps among its own, in time order (the pages' steps,
        such as the build processes' start, beside the measuring's)."""
        if not other.steps:
            return self
        merged = copy.copy(self)
        shift = other.started - self.started
        merged.steps = sorted([*self.steps, *((name, round(at + shift, 2)) for name, at in other.steps)],
                              key=lambda step: step[1])
        return merged


def warm_up_gpu_early(first: Spec | None, target: str = "auto") -> None:
    """Start the measuring worker and warm the GPU before any page asks (a class server's
    launcher calls this before its port opens). The server warms up through the same worker
    when the first page arrives and finds it warm; it reports the outcome, so a failure here
    is left for it to say."""
    try:
        warm_up_local_gpu(first, target, WarmUp())
    except ExplorerError:
        pass


def warm_up_local_gpu(first: Spec | None, target: str, warm: WarmUp) -> str:
    if local_gpu_target() is None:  # no measuring worker to start on a machine without a GPU
        raise measure.NoDevice("No GPU on this machine: code and diagrams only.")
    report = measure.warm_up(first, target)
    for name, seconds in report.steps:
        warm.step(f"{name} {seconds:.1f} s")
    return report.device

"""The leaderboard: a student's display name and the current setting in, the kernel checked
against NumPy and timed on the server's GPU, the result recorded; each student's best per
workload and device out, beside PyTorch's time on that device."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..build import Spec
from ..errors import ExplorerError
from ..measure import MeasureError, Remote, baseline, measure
from ..measure.remote import last_server
from ..urlstate import to_query
from ..workloads import Workload
from .store import Entry, Store

NAME_MAX = 32
NAME_SYMBOLS = " -_."


class InvalidName(ExplorerError):
    """A display name that the board does not take."""


class SubmissionRefused(ExplorerError):
    """A submission whose kernel computed a wrong result: it gets no place on the board."""


@dataclass(frozen=True)
class Place:
    """One line of a board: a student's best entry on one device."""

    rank: int  # 1 = fastest on this device
    entry: Entry
    pytorch_us: float | None  # PyTorch on the same device and workload, when measured

    @property
    def versus_pytorch(self) -> float | None:
        """PyTorch's time over this entry's: above 1, the student's kernel is faster."""
        return self.pytorch_us / self.entry.score_us if self.pytorch_us else None


def validate_name(name: str) -> str:
    """The display name without surrounding spaces, or InvalidName saying what is wrong."""
    name = (name or "").strip()
    if not name:
        raise InvalidName(f"Give a display name of 1 to {NAME_MAX} characters.")
    if len(name) > NAME_MAX:
        raise InvalidName(f"A display name has at most {NAME_MAX} characters; this one has {len(name)}.")
    bad = next((c for c in name if not (c.isalnum() or c in NAME_SYMBOLS)), None)
    if bad is not None:
        raise InvalidName(f"A display name may use letters, digits, spaces, '-', '_' and '.' only, not {bad!r}.")
    return name


def measure_for_board(spec: Spec, *, target: str = "auto", remote=None, on_wait=None):
    """The one call through which the board measures outside a server (a server's board
    measures through its ``Server``). On this machine's GPU in its turn, ``on_wait(ahead)``
    told how many of this process's calls are ahead; through a tracker, on a GPU server it
    hands out (waiting there while every one is busy), retried on another if one dies."""
    return measure(spec, target=target, remote=remote, on_wait=on_wait)


def pytorch_for_board(workload: Workload) -> float | None:
    """PyTorch's median µs for ``workload`` on this machine's GPU (CUDA graphs), or None
    where PyTorch cannot run it."""
    try:
        result = baseline(workload)
    except MeasureError:
        return None
    return result.median_us if result.check.correct else None


Measure = Callable[..., object]  # (spec, target=, remote=) -> explorer.measure.Measurement


def submit(store: Store, name: str, spec: Spec, *, target: str = "auto", remote=None,
           measure: Measure | None = None, pytorch: Callable[[Workload], float | None] | None = None,
           with_pytorch: bool = True, on_wait: Callable[[int], None] | None = None) -> Entry:
    """Check and time ``spec`` and record it under ``name``. Raises InvalidName before
    measuring anything, and SubmissionRefused (with the first wrong element) for a kernel
    whose output is wrong. PyTorch is measured once per workload and device (local GPU
    only, unless ``with_pytorch`` is False). ``measure`` and ``pytorch`` default to
    :func:`measure_for_board` and :func:`pytorch_for_board`, looked up at each call;
    ``on_wait(ahead)`` hears of the measurement queue while the submission waits in it."""
    name = validate_name(name)
    result = (measure or measure_for_board)(spec, target=target, remote=remote, on_wait=on_wait)
    if not result.correct:
        raise SubmissionRefused(f"Not on the board: the kernel's output is {result.check.describe()}.")
    server = None
    if remote is not None:
        server = last_server()
    workload = spec.workload.label()
    entry = store.add_entry(name=name, workload=workload, template=spec.template, knobs=spec.knobs.to_strings(),
                            query=to_query(spec), target=result.target, device=result.device, server=server,
                            graph_us=result.graph_us, median_us=result.median_us)
    if with_pytorch and remote is None and store.pytorch_us(workload, result.device) is None:
        pytorch_us = (pytorch or pytorch_for_board)(spec.workload)
        if pytorch_us is not None:
            store.set_pytorch_us(workload, result.device, pytorch_us)
    return entry


CLASS_TRACKER = "tracker"  # class setting: "HOST:PORT KEY" of the class's GPU servers


def class_remote(store: Store):
    """The class's GPUs (an ``explorer.measure.Remote``) as the teacher set them, or None."""
    value = store.setting(CLASS_TRACKER)
    if not value:
        return None

    address, key = value.split(" ", 1)
    return Remote.parse(address, key)


def set_class_remote(store: Store, address: str, key: str) -> None:
    """Check and keep the class's tracker; an empty address clears it."""
    if not address.strip():
        store.set_setting(CLASS_TRACKER, None)
        return

    remote = Remote.parse(address, key)  # RemoteError (one sentence) for a bad address or key
    store.set_setting(CLASS_TRACKER, f"{remote.host}:{remote.port} {remote.key}")


def board(store: Store, workload: str) -> list[Place]:
    """Each student's best on ``workload``, ranked per device (like is compared with like)."""
    places, rank, device = [], 0, None
    for entry in store.best(workload):
        rank = rank + 1 if entry.device == device else 1
        device = entry.device
        places.append(Place(rank, entry, store.pytorch_us(workload, entry.device)))
    return places

"""One queue per device: two kernels are never timed on it at the same time.

A class shares one server process (Streamlit runs each browser session in a thread of it),
so measurements for a device wait their turn here, first come first served, and a caller
can see how many are ahead of it (``on_wait`` callback, or :meth:`DeviceQueue.position`).
"""
from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_registry_lock = threading.Lock()
_QUEUES: dict[str, DeviceQueue] = {}


class DeviceQueue:
    def __init__(self, name: str):
        self.name = name
        self._changed = threading.Condition()
        self._tickets: deque[int] = deque()  # the head holds the device
        self._numbers = itertools.count()

    def __len__(self) -> int:
        """Measurements running or waiting."""
        with self._changed:
            return len(self._tickets)

    def position(self, ticket: int) -> int | None:
        """How many are ahead of ``ticket`` (0: it holds the device; None: not queued)."""
        with self._changed:
            return self._tickets.index(ticket) if ticket in self._tickets else None

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] | None = None, capacity: Callable[[], int] | None = None,
             poll_s: float = 1.0) -> Iterator[int]:
        """Wait for a place on the device, hold it for the ``with`` body, then pass it on.
        ``on_wait(ahead)`` is called (outside the lock) whenever the number ahead changes.
        ``capacity()`` places (default one; a tracker key with several GPU servers has one per
        server) are asked again every ``poll_s`` while waiting, outside the lock: it may be a
        network call."""
        with self._changed:
            ticket = next(self._numbers)
            self._tickets.append(ticket)
        try:
            reported = None
            while True:
                places = max(1, capacity()) if capacity is not None else 1
                with self._changed:
                    ahead = self._tickets.index(ticket) - places + 1  # the tickets before it run or wait
                    if ahead <= 0:
                        break
                    if ahead == reported:
                        self._changed.wait(poll_s if capacity is not None else None)
                        continue
                if on_wait is not None:
                    on_wait(ahead)
                reported = ahead
            yield ticket
        finally:
            with self._changed:
                self._tickets.remove(ticket)
                self._changed.notify_all()


def queue_for(device: str) -> DeviceQueue:
    """The process-wide queue of ``device`` (a name such as ``local`` or an RPC address)."""
    with _registry_lock:
        if device not in _QUEUES:
            _QUEUES[device] = DeviceQueue(device)
        return _QUEUES[device]

"""What a page run costs an app process."""
from __future__ import annotations

import threading
from collections import deque


class PageRuns:
    """What a page run costs the server: the CPU time of each run's script thread (the
    latest ``window`` runs), which bounds how many students one app process carries."""

    def __init__(self, window: int = 1024):
        self._lock = threading.Lock()
        self._recent: deque[float] = deque(maxlen=window)
        self.count = 0

    def record(self, cpu_s: float) -> None:
        with self._lock:
            self._recent.append(cpu_s)
            self.count += 1

    def stats(self) -> dict:
        """Runs so far, and the median and 95th percentile of the recent ones' CPU (ms)."""
        with self._lock:
            recent = sorted(self._recent)
        if not recent:
            return {"runs": self.count, "p50_ms": None, "p95_ms": None}
        def at(q: float) -> float:
            return recent[min(len(recent) - 1, round(q * (len(recent) - 1)))] * 1000

        return {"runs": self.count, "p50_ms": at(0.5), "p95_ms": at(0.95)}

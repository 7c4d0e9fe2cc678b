"""Results by key computed once however many ask at the same time."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

from ..errors import ExplorerError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Results by key, least recently used dropped beyond ``maxsize``; a key in flight is
    computed once and its callers share the result (or the ExplorerError it raised)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._done: OrderedDict[K, tuple[bool, object]] = OrderedDict()
        self._flying: dict[K, Future] = {}
        self.hits = self.misses = self.shared = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def clear(self) -> None:
        """Forget every result (those in flight still reach their callers)."""
        with self._lock:
            self._done.clear()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The result for ``key``: cached, or the one being computed, or ``compute()``."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                self.hits += 1
                return self._unwrap(self._done[key])
            future = self._flying.get(key)
            owner = future is None
            if owner:
                future = self._flying[key] = Future()
                self.misses += 1
            else:
                self.shared += 1
        if not owner:
            return self._unwrap(future.result())
        try:
            outcome = (True, compute())
        except ExplorerError as error:  # a setting that cannot be built stays unbuildable
            outcome = (False, error)
        except BaseException as error:
            with self._lock:
                del self._flying[key]
            future.set_exception(error)
            raise
        with self._lock:
            self._done[key] = outcome
            while len(self._done) > self.maxsize:
                self._done.popitem(last=False)
            del self._flying[key]
        future.set_result(outcome)
        return self._unwrap(outcome)

    def peek(self, key: K) -> V | None:
        """The cached result, without computing or counting (None when absent or an error)."""
        with self._lock:
            ok, value = self._done.get(key, (False, None))
        return value if ok else None

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._done), "capacity": self.maxsize, "computing": len(self._flying),
                    "hits": self.hits, "misses": self.misses, "shared": self.shared}

    @staticmethod
    def _unwrap(outcome: tuple[bool, object]):
        ok, value = outcome
        if not ok:
            raise value
        return value

"""Who is connected and where: each browser session reports itself every few seconds, and
the teacher counts those seen recently. Kept in this process only (the server's), since it
means nothing after a restart."""
from __future__ import annotations

import threading
import time
from collections import Counter

RECENT_S = 10.0  # a session not heard from for this long has left

_lock = threading.Lock()
_seen: dict[str, tuple[float, str, bool]] = {}  # session id -> (last seen, where, teacher)


def beat(session: str, where: str, *, teacher: bool = False, now: float | None = None) -> None:
    """Session ``session`` is here now, at ``where`` (e.g. "depthwise_blog · step 5")."""
    with _lock:
        _seen[session] = (time.monotonic() if now is None else now, where, teacher)


def students(within_s: float = RECENT_S, now: float | None = None) -> Counter[str]:
    """How many student sessions (not the teacher's) were seen in the last ``within_s``
    seconds, by where they are."""
    now = time.monotonic() if now is None else now
    with _lock:
        for session in [s for s, (seen, _, _) in _seen.items() if now - seen > 3 * within_s]:
            del _seen[session]  # forget sessions long gone
        return Counter(where for seen, where, teacher in _seen.values() if now - seen <= within_s and not teacher)

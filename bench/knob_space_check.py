"""placeholder, rewritten below"""
from __future__ import annotations

import contextlib
import sys

from tvm.s_tir import Schedule

from explorer.schedules import rowwise


@contextlib.contextmanager
def old_row_statistics():
    """The row-wise template as it was before its row statistics were made local (commit 6e8f0d9): each
    statistic of the fused and on_chip passes copied into a "shared" buffer that thread x = 0 writes and every
    thread of the row reads, with no barrier between them where rows_per_block > 1. Only the template's own
    call is changed (the caller's code is rowwise.schedule_passes), and only inside the ``with``."""
    set_scope = Schedule.set_scope

    def old(sch, block, buffer_index, storage_scope):
        if storage_scope == "local" and sys._getframe(1).f_code is rowwise.schedule_passes.__code__:
            storage_scope = "shared"
        return set_scope(sch, block, buffer_index, storage_scope)

    Schedule.set_scope = old
    try:
        yield
    finally:
        Schedule.set_scope = set_scope

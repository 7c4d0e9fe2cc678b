"""TVMScript parsed quickly: the frames its parser asks ``inspect`` for, without the scan."""
from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import sys
import threading

_SWAPPED = threading.RLock()  # one thread at a time parses with the stand-ins (and puts inspect's own back)


def parsed_once_per_plan(kernel):
    """``kernel(plan)`` (a template's hand-written TVMScript, written for a frozen plan) parsed once per plan,
    inside tvmscript_frames(): a process schedules a setting again after its build (its export schedules it
    for the script) and the text, so the PrimFunc, is the same (0.1-0.3 s a parse). A PrimFunc is immutable:
    each Schedule puts it in a module of its own."""

    @functools.lru_cache(maxsize=32)
    def parsed(plan):
        with tvmscript_frames():
            return kernel(plan)

    return parsed


@contextlib.contextmanager
def tvmscript_frames():
    """TVMScript parsed quickly inside this block.

    TVMScript's parser calls ``inspect.stack()`` for each function it parses and
    ``inspect.getouterframes()`` for each ``T.inline`` call, and ``inspect`` finds each frame's
    module by scanning ``sys.modules`` (for the frames of the import machinery or of source
    given as text, every time) and stats each frame's file: most of a parse's time, the more so
    the more modules are loaded and the deeper the stack (a page run in a server's thread).
    The parser only uses the frames and their current source line, which the stand-ins give
    without the scan. They are in place only inside the block, one thread at a time."""
    with _SWAPPED:
        stack, outer_frames = inspect.stack, inspect.getouterframes
        inspect.stack, inspect.getouterframes = _frames_and_lines, _outer_frames_and_lines
        try:
            yield
        finally:
            inspect.stack, inspect.getouterframes = stack, outer_frames


def _frames_and_lines(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()``: the caller's frame and those that called it, with their current lines."""
    return _outer_frames_and_lines(sys._getframe(1))


def _outer_frames_and_lines(frame, context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.getouterframes(frame)``: ``frame`` and those that called it, with their current lines."""
    stack = []
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno, frame.f_globals)
        stack.append(inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name, [line] if line else None,
                                       0 if line else None))
        frame = frame.f_back
    return stack

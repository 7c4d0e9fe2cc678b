"""Typed errors. Each carries one sentence a student can act on.

Everything the library raises on purpose derives from ExplorerError, so the app and
the CLI can show ``str(error)`` and keep running; anything else is a bug.
"""
from __future__ import annotations


class ExplorerError(Exception):
    """Base class: ``str(error)`` is a complete, one-line explanation."""


# The exit status of a command (python -m explorer) refused for its input, said in one line on stderr.
EXIT_INVALID = 2


class InvalidKnobs(ExplorerError):
    """A knob value (or a combination of knobs) cannot make a correct, legal CUDA kernel.

    ``knobs`` names the knobs at fault so a UI can highlight them.
    """

    def __init__(self, message: str, knobs: tuple[str, ...] = ()):
        super().__init__(message)
        self.knobs = tuple(knobs)


class InvalidWorkload(ExplorerError):
    """A workload shape parameter is out of range or inconsistent."""


class PresetError(ExplorerError):
    """A preset file or preset name is wrong (unknown key, wrong type, unknown preset)."""


def summary_line(error: BaseException | str) -> str:
    """The line of an error (or of a tool's error output) to show: its last non-empty line,
    because TVM and the compilers print their traceback or notes first and the message
    last. An error without text is named by its type; empty output is "no message"."""
    text = error if isinstance(error, str) else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines:
        return lines[-1]
    return "no message" if isinstance(error, str) else type(error).__name__

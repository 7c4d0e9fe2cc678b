"""Why a measurement has no latency. Each error is one sentence a student can act on.

A kernel whose output is wrong is not an error of the measurement: ``measure`` returns a
record with ``correct=False``; only :func:`explorer.measure.latency_us`, which must return a
number, raises :class:`WrongResult` for it.
"""
from __future__ import annotations

from ..errors import ExplorerError


class MeasureError(ExplorerError):
    """Base class: the kernel could not be measured."""


class InvalidMeasureSettings(MeasureError):
    """A measurement setting (time limit, repeats, ...) is out of range."""


class NoDevice(MeasureError):
    """No device to run on: no local CUDA GPU, or no server with the key at the tracker."""


class KernelCrashed(MeasureError):
    """The kernel ended the process that ran it (segfault, illegal memory access); the
    worker was restarted."""


class KernelTimeout(MeasureError):
    """The kernel ran past the time limit and was stopped; the worker was restarted."""


class RemoteError(MeasureError):
    """The RPC tracker or server could not be reached or broke off the session."""


class BaselineUnavailable(MeasureError):
    """PyTorch with CUDA is not installed where the kernels run."""


class WrongResult(MeasureError):
    """The kernel's output does not match the NumPy reference (from ``latency_us``)."""

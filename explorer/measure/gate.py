"""The correctness gate: a kernel's output against the workload's NumPy reference.

float32 sums of many terms differ from the float64 reference by rounding that grows with
the number of terms and with the size of the values, so the tolerance is
``SAFETY × ε32 × reduction length × output scale`` (the output scale is the largest
|reference| value, at least the workload's ``tolerance_floor``: 1, the size of the terms a sum
adds, since inputs are uniform in [-1, 1]; 0 for softmax, whose outputs are far smaller than 1
and whose rounding is relative to each output, all of its terms being positive, and for attention,
whose outputs are weighted means of values in [-1, 1], far smaller than them).
A correct float32 kernel stays one to two orders of magnitude below it; a wrong index, a
missed tile or a race is off by the size of a term (~0.1 to 1 here, since inputs are uniform
in [-1, 1]; for softmax, the size of an output), far above it. NaN, ±inf or an
element the kernel never wrote (the output buffer starts as NaN) is always wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPSILON32 = float(np.finfo(np.float32).eps)
SAFETY = 4.0


@dataclass(frozen=True)
class Check:
    correct: bool
    max_error: float  # largest |output - reference| (inf when an element is NaN/inf)
    tolerance: float
    wrong_count: int
    first_wrong_index: tuple[int, ...] | None  # the first wrong element in row-major order
    expected: float | None = None  # reference and output at first_wrong_index
    got: float | None = None

    def describe(self) -> str:
        if self.correct:
            return f"correct (max error {self.max_error:.3g} ≤ tolerance {self.tolerance:.3g})"
        return (
            f"wrong at index {self.first_wrong_index}: expected {self.expected:.6g}, got {self.got:.6g} "
            f"({self.wrong_count} wrong elements; tolerance {self.tolerance:.3g})"
        )


# The rule itself: the constants above and FORMULA's functions. An exported script (explorer/export.py)
# carries their source, so that it checks as the gate does without importing the explorer.
def relative_tolerance(reduction_length: int) -> float:
    """The allowed error per unit of output scale."""
    return SAFETY * EPSILON32 * max(1, reduction_length)


def tolerance(reference: np.ndarray, reduction_length: int, floor: float = 1.0) -> float:
    return tolerance_at(float(np.max(np.abs(reference))) if reference.size else 0.0, reduction_length, floor)


def tolerance_at(largest: float, reduction_length: int, floor: float = 1.0) -> float:
    """The tolerance of a reference whose largest magnitude is ``largest``."""
    return relative_tolerance(reduction_length) * max(floor, largest)


def errors(output: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """|output - reference| per element, in float64; inf where either is NaN or ±inf (always wrong)."""
    error = np.abs(output.astype(np.float64) - reference.astype(np.float64))
    return np.where(np.isfinite(error), error, np.inf)


def wrong_elements(error: np.ndarray, tol: float) -> np.ndarray:
    """Where the errors (``errors``) refuse the output: off by more than the tolerance."""
    return ~(error <= tol)


FORMULA = (relative_tolerance, tolerance, errors, wrong_elements)


def compare(output: np.ndarray, reference: np.ndarray, reduction_length: int, floor: float = 1.0) -> Check:
    if output.shape != reference.shape:
        raise ValueError(f"output shape {output.shape} != reference shape {reference.shape}")
    tol = tolerance(reference, reduction_length, floor)
    error = errors(output, reference)
    wrong = wrong_elements(error, tol)
    wrong_count = int(np.count_nonzero(wrong))
    max_error = float(error.max()) if error.size else 0.0
    if wrong_count == 0:
        return Check(True, max_error, tol, 0, None)
    index = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(wrong)[0]), output.shape))
    return Check(False, max_error, tol, wrong_count, index, float(reference[index]), float(output[index]))


def compare_on_gpu(output, reference, tol: float, describe_wrong) -> Check:
    """The same check on the GPU (PyTorch tensors of one shape on one device): a 4096² output
    takes a millisecond there instead of a few hundred on the CPU. Only a wrong output is
    brought back, and ``describe_wrong()`` (the CPU check) says where it is wrong."""
    import torch

    # In float64, in place on a copy: four passes over the output. The largest error is NaN where an
    # element is NaN (the maximum propagates it) and inf where one is infinite: neither is <= tol.
    error = output.to(torch.float64, copy=True).sub_(reference).abs_()
    max_error = float(error.max()) if error.numel() else 0.0
    if max_error <= tol:
        return Check(True, max_error, tol, 0, None)
    return describe_wrong()

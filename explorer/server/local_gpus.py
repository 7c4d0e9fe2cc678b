"""The GPUs of this machine a server measures on: one measuring worker per GPU of this machine (``LocalGPU``), a
job on whichever is free, and a job whose worker died mid-run handed to another GPU once.

:meth:`LocalGPUs.measure` is the scheduler's measuring function (explorer/server/scheduler.py): the
scheduler decides when a job runs, this module where and with which budget.
"""
from __future__ import annotations

import dataclasses
import logging
import queue

from .. import measure
from ..measure.measurement import LOCAL_GPU, LocalGPU
from ..measure.worker import Trial

log = logging.getLogger(__name__)


def budget(job) -> measure.MeasureSettings:
    """How ``job`` is timed: the settings it was asked with (a sweep's), else the short budget while
    other students' measurements wait, else the full one."""
    if job.settings is not None:
        return job.settings
    return measure.QUICK_SETTINGS if job.quick else measure.MeasureSettings()


def measure_job(job, gpu: LocalGPU | None = None):
    """``job`` on ``gpu`` (one of this machine's), else on the first local GPU or the job's remote one."""
    settings = budget(job)
    if gpu is None:
        result = measure.measure(job.spec, target=job.target, remote=job.remote, settings=settings,
                                 library=job.compiled)
    else:
        result = gpu.measure(Trial(job.spec, job.spec.workload, job.target, settings, job.compiled))
    return dataclasses.replace(result, quick=job.quick)


class LocalGPUs:
    """This machine's GPUs as one server measures on them: the first ``count`` the server sees, each
    with its measuring worker; the first also measures the roofline's ceilings and PyTorch's baselines."""

    def __init__(self, count: int = 1):
        self.all = [LOCAL_GPU, *(LocalGPU(str(index)) for index in range(1, count))]
        self.first = self.all[0]
        self._free: queue.Queue = queue.Queue()
        for gpu in self.all:
            self._free.put(gpu)
        self.counts = [{"measured": 0, "crashed": 0} for _ in self.all]

    def __len__(self) -> int:
        return len(self.all)

    def measure(self, job):
        """``job`` on a free GPU of this machine (or on its remote device). A GPU whose worker died
        mid-run (a crashing kernel, or the process killed) hands the job to another GPU once, where
        the machine has several."""
        if job.remote is not None:
            return measure_job(job)
        for attempt in (1, 2):
            gpu = self._free.get()
            index = self.all.index(gpu)
            try:
                result = measure_job(job, gpu)
                self.counts[index]["measured"] += 1
                return dataclasses.replace(result, gpu=str(index)) if len(self.all) > 1 else result
            except measure.KernelCrashed:
                self.counts[index]["crashed"] += 1
                if attempt == 2 or len(self.all) == 1:
                    raise
                log.warning("GPU %d: the measuring worker died mid-run; the job goes to another GPU", index)
            finally:
                self._free.put(gpu)  # last in line: the retry takes another GPU where one is free

    def share_ceilings(self) -> None:
        """The first GPU's measured ceilings for the others: the machine's GPUs are one model."""
        for gpu in self.all[1:]:
            gpu.share_ceilings(self.first)

    def stop_workers(self) -> None:
        """Stop every GPU's measuring worker, ending the call it is in (it starts again on the next one)."""
        for gpu in self.all:
            gpu.close()

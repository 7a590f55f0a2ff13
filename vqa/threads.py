"""The thread budget: how many cores this process may use, and how they are shared out.

One place decides it. The cores are the fewest of the CPUs the process may run on
(``os.sched_getaffinity``) and its cgroup's CPU quota (``cpu.max``, or ``cpu.cfs_quota_us``
on cgroup v1): a container given 2 CPUs of a 64-core host gets 2, not 64.

The busy threads of a scoring run are the decode workers (one FFmpeg thread and one OpenCV
thread each) and the inference threads of the parent. Their sum never exceeds the cores,
except that there is always at least one of each, and that a GPU backend's one thread is not
counted against the decode workers (below).

    >>> plan_threads(cores=2)
    ThreadBudget(cores=2, workers=1, inference_threads=1, decode_threads=1)
    >>> plan_threads(cores=8)
    ThreadBudget(cores=8, workers=4, inference_threads=4, decode_threads=1)
    >>> plan_threads(cores=8, workers=6)
    ThreadBudget(cores=8, workers=6, inference_threads=2, decode_threads=1)
    >>> plan_threads(cores=4, workers=0)   # decoding and inference take turns in one thread
    ThreadBudget(cores=4, workers=0, inference_threads=4, decode_threads=4)

On a GPU backend (``accelerator=True``) inference needs one CPU thread, the one that copies
views in and collects outputs, and it mostly waits for the GPU, so a decode worker takes every
core: on the lent 16-core H200 machine, 16 workers scored a folder at 1,845 videos/min against
1,663 for 15, in turns in one sweep (medians 1,762 and 1,629; docs/history/performance.md, The GPU path; issue 20):

    >>> plan_threads(cores=16, accelerator=True)
    ThreadBudget(cores=16, workers=16, inference_threads=1, decode_threads=1)

With a lighter inference (``light_inference=True``: OpenVINO in bfloat16, about twice fp32's
views/s a thread) inference takes a third of the cores: on the H200's 16 cores the default plan
scored a folder at 993 videos/min with 11 workers + 5 threads, 959 with 12 + 4 and 769 with
8 + 8, in turns in one run (docs/history/performance.md; issue 18):

    >>> plan_threads(cores=16, light_inference=True)
    ThreadBudget(cores=16, workers=11, inference_threads=5, decode_threads=1)
    >>> plan_threads(cores=2, light_inference=True)
    ThreadBudget(cores=2, workers=1, inference_threads=1, decode_threads=1)
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        return os.cpu_count() or 1


def _cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the cgroup's quota allows (may be fractional), or None when there is no quota."""
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cores(root: Path = CGROUP_ROOT) -> int:
    """The cores this process may keep busy: its CPU affinity, capped by the cgroup quota."""
    cores = _affinity()
    quota = _cgroup_quota(root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


# Workers past a few per core only cost memory and start-up (1,000 on 2 cores ran out of time).
MAX_WORKERS_PER_CORE, MIN_MAX_WORKERS = 4, 16


def max_workers(cores: int | None = None) -> int:
    """The most decode workers ``ScoreOptions.resolve`` accepts on ``cores`` (default: usable).

        >>> max_workers(2), max_workers(16)
        (16, 64)
    """
    return max(MIN_MAX_WORKERS, MAX_WORKERS_PER_CORE * (usable_cores() if cores is None else cores))


@dataclass(frozen=True)
class ThreadBudget:
    cores: int  # usable_cores() when it was planned
    workers: int  # decode worker processes (0: decode in this process)
    inference_threads: int  # the inference backend's threads (OpenVINO, PyTorch)
    decode_threads: int  # FFmpeg threads per decoder; also OpenCV's threads in a worker


def plan_threads(*, workers: int | None = None, inference_threads: int | None = None,
                 cores: int | None = None, accelerator: bool = False, light_inference: bool = False) -> ThreadBudget:
    """Share ``cores`` (default: ``usable_cores()``) between decode workers and inference.

    What the caller sets is kept; the rest get what is left, at least one each. With no
    workers, decoding and inference run in turn in this process and each may use every core.
    ``accelerator``: inference runs on a GPU and needs one CPU thread, not half the cores.
    ``light_inference``: inference costs about half as much a view (bf16): a third of the cores.
    """
    cores = usable_cores() if cores is None else max(1, int(cores))
    if workers == 0:
        return ThreadBudget(cores, 0, inference_threads or cores, cores)
    if accelerator and inference_threads is None:
        inference_threads = 1
        if workers is None:
            workers = cores
    if inference_threads is None:
        if workers is None:
            # inference is the heavier stage per frame, unless it runs in bfloat16
            inference_threads = max(1, cores // 3) if light_inference else (cores + 1) // 2
            workers = max(1, cores - inference_threads)
        else:
            inference_threads = max(1, cores - workers)
    elif workers is None:
        workers = max(1, cores - inference_threads)
    return ThreadBudget(cores, workers, inference_threads, 1)


# A stage given less than this share of what ``auto`` gives it, by an explicit split, starves:
# on 16 cores `--workers 15` (1 inference thread, auto gives 8) ran at 192 videos/min against
# 316 for auto's 8 + 8 (docs/history/performance.md).
STARVING_SHARE = 0.5


def starving_split(budget: ThreadBudget, *, workers: int | None, inference_threads: int | None,
                   accelerator: bool = False, light_inference: bool = False) -> str | None:
    """A one-line warning when an explicit ``workers``/``inference_threads`` leaves decoding or
    inference far short of what ``auto`` would give it; None when the split is fine, or auto.

    >>> message = starving_split(plan_threads(cores=16, workers=15), workers=15, inference_threads=None)
    >>> message.split(": ")[0]
    '--workers 15 leaves inference 1 thread of 16 cores, where auto gives it 8'
    >>> message.split("; ")[1]
    'auto would use --workers 8 --threads 8'
    >>> starving_split(plan_threads(cores=2, workers=2), workers=2, inference_threads=None) is None
    True
    >>> starving_split(plan_threads(cores=16, workers=15, accelerator=True), workers=15, inference_threads=None,
    ...                accelerator=True) is None
    True
    """
    if (workers is None and inference_threads is None) or budget.workers == 0:
        return None
    auto = plan_threads(cores=budget.cores, accelerator=accelerator, light_inference=light_inference)
    given = " ".join(f"--{name} {value}" for name, value in (("workers", workers), ("threads", inference_threads))
                     if value is not None)
    for stage, have, want in (("inference", budget.inference_threads, auto.inference_threads),
                              ("decoding", budget.workers, auto.workers)):
        if have < want * STARVING_SHARE:
            unit = ("thread" if have == 1 else "threads") if stage == "inference" else (
                "worker" if have == 1 else "workers")
            other = "the decode workers" if stage == "inference" else "inference"
            return (f"{given} leaves {stage} {have} {unit} of {budget.cores} cores, where auto gives it {want}: "
                    f"it will hold {other} back; auto would use --workers {auto.workers} --threads "
                    f"{auto.inference_threads}")
    return None

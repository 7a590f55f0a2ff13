"""What every study of vqa.bench shares: the load average it records around its numbers, the
note that says how to read them, the decode floor it compares the engine with, and ratios."""
from __future__ import annotations

import os
import time

from ..types import SamplePlan

NOISE_NOTE = ("each number is one measurement on a shared machine (see load_avg): compare the "
              "rows side by side, not across runs")


def load_avg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on every platform
        return None


def decode_floor(path: str | os.PathLike, plan: SamplePlan, threads: int) -> tuple[float, int]:
    """Seconds and frames of PyAV with FFmpeg frame threading on ``threads`` cores (the pyav
    reader sets thread_type AUTO when threads > 1): the plan's frames decoded to RGB, nothing else."""
    from ..decode import open_video  # the decode stage, imported when a clip is read

    start = time.perf_counter()
    n = 0
    with open_video(path, backend="pyav", threads=threads) as reader:
        for _ in reader.read(plan):
            n += 1
    return time.perf_counter() - start, n


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` to three places; None where either is missing or ``b`` is not positive."""
    return None if a is None or b is None or b <= 0 else round(a / b, 3)

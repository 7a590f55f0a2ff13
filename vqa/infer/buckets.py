"""Batch buckets for replayed CUDA graphs: pure planning, no torch.

A CUDA graph replays one fixed input shape, so batches are padded up to a few fixed sizes
(buckets), one graph each. A batch larger than the largest bucket runs as several chunks.

>>> bucket_for(5), bucket_for(32), bucket_for(33), bucket_for(900)
(8, 32, 128, 512)
>>> plan_chunks(600)
[(0, 512, 512), (512, 600, 128)]
"""
from __future__ import annotations

import numpy as np

# Few sizes keep capture cheap (each graph holds its own activations); 4x apart bounds the
# padding at 75% of a batch's work. 512 is past where the H200's views/s flatten (issue 20).
BUCKETS: tuple[int, ...] = (1, 8, 32, 128, 512)


def bucket_for(n: int, buckets: tuple[int, ...] = BUCKETS) -> int:
    """The smallest bucket holding ``n`` views; the largest for more (see ``plan_chunks``)."""
    if n < 1:
        raise ValueError(f"a batch holds at least 1 view, got {n}")
    for b in sorted(buckets):
        if n <= b:
            return b
    return max(buckets)


def plan_chunks(n: int, buckets: tuple[int, ...] = BUCKETS) -> list[tuple[int, int, int]]:
    """``(start, stop, bucket)`` per chunk covering views ``0..n``: full largest buckets, then
    the rest in the smallest bucket that holds it."""
    largest, chunks, start = max(buckets), [], 0
    while start < n:
        stop = min(n, start + largest)
        chunks.append((start, stop, bucket_for(stop - start, buckets)))
        start = stop
    return chunks


def fill_bucket(dst: np.ndarray, views: np.ndarray) -> int:
    """Copy ``views`` into the first rows of the bucket-sized ``dst`` and zero the rest (the
    padding); return the real row count. Views are independent in the network (eval-mode batch
    norm), so the padding changes no real row's output, and zeros keep replays repeatable."""
    n = len(views)
    if n > len(dst):
        raise ValueError(f"{n} views do not fit a bucket of {len(dst)}")
    dst[:n] = views
    dst[n:] = 0
    return n

"""The one frame loop: a reader's frames -> fragment views in batch buffers, with their stats.

Both engines run it: the in-process engine (vqa.engine.local) with a buffer of its own that it
hands to inference at once, a decode worker (vqa.engine.worker) with ring slots that it hands
to the parent. What happens to a frame on its way to a batch is written here only.

    reader.read(plan) -> cut + frame_stats (vqa.preprocess) -> (buffer, [FrameMeta]) per batch
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from ..aggregate import FreezeChain
from ..decode import VideoReader
from ..preprocess import TRAINING, Geometry, cut, frame_stats
from ..types import SamplePlan
from .messages import FrameMeta


class Buffers(Protocol):
    """Where views go: ``take`` a buffer (a key and a (batch, V, V, 3) uint8 array, or
    (batch, bytes) rows that take mosaics too, vqa.batch.RingSpec.mosaic_side);
    ``give_back`` one taken but not handed on (an error mid-batch)."""

    def take(self) -> tuple[int, np.ndarray]: ...
    def give_back(self, key: int) -> None: ...


def batches(reader: VideoReader, plan: SamplePlan, buffers: Buffers, batch_size: int, *, run_offset: int = 0,
            open_end: bool = True, chain: FreezeChain | None = None, geometry: Geometry = TRAINING,
            max_region: int = 0) -> Iterator[tuple[int, list[FrameMeta]]]:
    """Yield ``(key, metas)`` for each batch of up to ``batch_size`` frames read from ``reader``
    along ``plan``: the views are in buffer ``key``, in the order of ``metas``. A buffer is
    taken only when a frame arrives for it, so a read that yields nothing takes none.

    ``run_offset``: index of the plan's first run in the video's whole plan (a segment of a
    split video). ``chain``: a FreezeChain fed each frame's stats as it is read, so only the
    read's first and last thumbnails stay in memory (the caller keeps the metas).
    ``geometry``: how the model cuts a frame into its view (its manifest's). ``max_region``:
    frames whose regions are larger than a patch and at most this size go into the buffer as
    mosaics, their views finished by the inferencer (vqa.preprocess.cut); 0: views only."""
    key: int | None = None
    metas: list[FrameMeta] = []
    buffer: np.ndarray | None = None
    try:
        for frame in reader.read(plan, open_end=open_end):
            if key is None or buffer is None:
                key, buffer = buffers.take()
            pixels, region = cut(frame.rgb, geometry, max_region)
            buffer[len(metas)].reshape(-1)[:pixels.size] = pixels.reshape(-1)
            stats = frame_stats(frame.rgb)
            if chain is not None:
                chain.add(stats)
            metas.append(FrameMeta(run_offset + frame.run, frame.pts_s, stats, region))
            if len(metas) == batch_size:
                full, key, out = key, None, metas
                metas = []
                yield full, out
        if metas and key is not None:
            full, key = key, None
            yield full, metas
    finally:
        if key is not None:  # taken but not handed on (an error mid-batch): keep it
            buffers.give_back(key)

"""Shared-memory batches: a bounded ring of slots that decode workers fill with fragment views.

One ``SharedMemory`` segment holds ``slots`` slots of ``batch_size`` views each. A worker
takes a free slot id from ``free`` (blocking there when every slot is in use: that is the
back-pressure), writes views straight into the slot, and sends only the slot id and the
per-frame metadata through a queue. The consumer reads the slot as a numpy view, without a
copy or a pickle, and puts the id back once inference is done with it.

The parent process creates the segment and is the only one that unlinks it (``close``). If
the parent itself is killed, multiprocessing's resource tracker unlinks it when the last
process holding it exits; workers exit when their parent is gone (vqa.workers).
"""
from __future__ import annotations

import queue
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from .preprocess import VIEW

VIEW_SHAPE = (VIEW, VIEW, 3)


@dataclass(frozen=True)
class RingSpec:
    """What a worker needs to attach to the ring (picklable)."""

    name: str
    slots: int
    batch_size: int

    @property
    def slot_shape(self) -> tuple[int, ...]:
        return (self.batch_size, *VIEW_SHAPE)


class BatchRing:
    """The consumer's side: owns the segment and the free-slot queue."""

    def __init__(self, ctx, *, slots: int, batch_size: int):
        size = slots * batch_size * int(np.prod(VIEW_SHAPE))
        self._shm = shared_memory.SharedMemory(create=True, size=size)
        self.spec = RingSpec(self._shm.name, slots, batch_size)
        self._array = np.ndarray((slots, *self.spec.slot_shape), np.uint8, buffer=self._shm.buf)
        self.free = ctx.Queue()
        for slot in range(slots):
            self.free.put(slot)

    def views(self, slot: int, count: int) -> np.ndarray:
        return self._array[slot, :count]

    def release(self, slot: int) -> None:
        self.free.put(slot)

    def close(self) -> None:
        if self._shm is None:
            return
        self._array = None  # drop the exported buffer before closing the mapping
        self._shm.close()
        self._shm.unlink()
        self._shm = None
        self.free.close()
        self.free.cancel_join_thread()

    def __enter__(self) -> BatchRing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RingWriter:
    """A worker's side: attached by name, never unlinks."""

    def __init__(self, spec: RingSpec, free):
        self.spec = spec
        self.free = free
        self._shm = shared_memory.SharedMemory(name=spec.name)
        self._array = np.ndarray((spec.slots, *spec.slot_shape), np.uint8, buffer=self._shm.buf)

    def acquire(self, alive=lambda: True, poll_s: float = 1.0) -> int:
        """A free slot id; blocks while all are in use, giving up when ``alive()`` turns false."""
        while True:
            try:
                return self.free.get(timeout=poll_s)
            except queue.Empty:
                if not alive():
                    raise SystemExit(0) from None

    def slot(self, slot: int) -> np.ndarray:
        return self._array[slot]

    def close(self) -> None:
        self._array = None
        self._shm.close()

"""Shared-memory batches: a bounded ring of slots that decode workers fill with fragment views.

One ``SharedMemory`` segment holds ``slots`` slots of ``batch_size`` views each. Each worker
owns a few slots (vqa.engine.worker): it writes views straight into a free one, and sends only the
slot id and the per-frame metadata through its pipe. The consumer reads the slot as a numpy
view, without a copy or a pickle, and hands the slot back once inference is done with it. A
worker with no free slot waits: that is the back-pressure.

The parent process creates the segment and is the only one that unlinks it (``close``). If
the parent itself is killed, multiprocessing's resource tracker unlinks it when the last
process holding it exits; workers exit when their parent is gone (vqa.engine.worker).
"""
from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from .preprocess import VIEW

VIEW_SHAPE = (VIEW, VIEW, 3)  # the training geometry's view; a ring is made for its model's (view=)


@dataclass(frozen=True)
class RingSpec:
    """What a worker needs to attach to the ring (picklable)."""

    name: str
    slots: int
    batch_size: int
    view: int = VIEW  # the model's view side (vqa.preprocess.Geometry.view)

    @property
    def slot_shape(self) -> tuple[int, ...]:
        return (self.batch_size, self.view, self.view, 3)


class BatchRing:
    """The consumer's side: owns the segment and the free-slot queue."""

    def __init__(self, *, slots: int, batch_size: int, view: int = VIEW):
        size = slots * batch_size * view * view * 3
        self._shm = shared_memory.SharedMemory(create=True, size=size)
        self.spec = RingSpec(self._shm.name, slots, batch_size, view)
        self._array = np.ndarray((slots, *self.spec.slot_shape), np.uint8, buffer=self._shm.buf)

    def views(self, slot: int, count: int) -> np.ndarray:
        return self._array[slot, :count]

    def close(self) -> None:
        if self._shm is None:
            return
        self._array = None  # drop the exported buffer before closing the mapping
        self._shm.close()
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass  # already gone: a worker that failed to attach unlinks it (CPython's SharedMemory)
        self._shm = None

    def __enter__(self) -> BatchRing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RingWriter:
    """A worker's side: attached by name, never unlinks."""

    def __init__(self, spec: RingSpec):
        self.spec = spec
        self._shm = shared_memory.SharedMemory(name=spec.name)
        self._array = np.ndarray((spec.slots, *spec.slot_shape), np.uint8, buffer=self._shm.buf)

    def slot(self, slot: int) -> np.ndarray:
        return self._array[slot]

    def close(self) -> None:
        self._array = None
        self._shm.close()

"""Shared-memory batches: a bounded ring of slots that decode workers fill with fragment views.

One ``SharedMemory`` segment holds ``slots`` slots of ``batch_size`` views each. A ring for an
inferencer that finishes views itself (vqa.infer.RESAMPLING_BACKENDS) has rows of
``mosaic_side`` squared pixels instead, each holding a view or the mosaic that
``vqa.preprocess.cut`` left, and ``FrameMeta.cut`` says which. Each worker
owns a few slots (vqa.engine.worker): it writes views straight into a free one, and sends only the
slot id and the per-frame metadata through its pipe. The consumer reads the slot as a numpy
view, without a copy or a pickle, and hands the slot back once inference is done with it. A
worker with no free slot waits: that is the back-pressure.

The segment's pages are reserved when it is made (``posix_fallocate``): a ``/dev/shm`` too full
to hold it is the run's error then (``ResourceError``), not a bus error in a worker later, which
would fail every video in turn as a crash of its own.

The parent process creates the segment and is the only one that unlinks it (``close``). If
the parent itself is killed, multiprocessing's resource tracker unlinks it when the last
process holding it exits; workers exit when their parent is gone (vqa.engine.worker).
"""
from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from .errors import ResourceError
from .preprocess import VIEW

SHM_DIR = "/dev/shm"  # where POSIX shared memory lives on Linux

VIEW_SHAPE = (VIEW, VIEW, 3)  # the training geometry's view; a ring is made for its model's (view=)


@dataclass(frozen=True)
class RingSpec:
    """What a worker needs to attach to the ring (picklable)."""

    name: str
    slots: int
    batch_size: int
    view: int = VIEW  # the model's view side (vqa.preprocess.Geometry.view)
    mosaic_side: int = 0  # > 0: rows of this many pixels squared, flat (views or mosaics)

    @property
    def slot_shape(self) -> tuple[int, ...]:
        if self.mosaic_side:
            return (self.batch_size, max(self.view, self.mosaic_side) ** 2 * 3)
        return (self.batch_size, self.view, self.view, 3)

    @property
    def slot_bytes(self) -> int:
        return math.prod(self.slot_shape)


class BatchRing:
    """The consumer's side: owns the segment and the free-slot queue."""

    def __init__(self, *, slots: int, batch_size: int, view: int = VIEW, mosaic_side: int = 0):
        spec = RingSpec("", slots, batch_size, view, mosaic_side)
        size = slots * spec.slot_bytes
        self._shm: shared_memory.SharedMemory | None
        try:
            self._shm = shm = shared_memory.SharedMemory(create=True, size=size)
        except OSError as e:
            raise ResourceError(shm_shortage(size, e)) from None
        try:
            _reserve(shm, size)
        except BaseException:
            shm.close()
            shm.unlink()
            raise
        self.spec = RingSpec(shm.name, slots, batch_size, view, mosaic_side)
        self._pid = os.getpid()  # only this process unlinks it (a forked child's copy never does)
        self._array: np.ndarray | None = np.ndarray((slots, *self.spec.slot_shape), np.uint8, buffer=shm.buf)

    @property
    def array(self) -> np.ndarray:
        """Every slot, (slots, *slot_shape): the whole segment, for ``Inferencer.pin``."""
        if self._array is None:  # closed: its memory is gone
            raise ValueError("the batch ring is closed")
        return self._array

    def views(self, slot: int, count: int) -> np.ndarray:
        """A slot's first ``count`` views, (count, V, V, 3), where rows hold views alone."""
        assert not self.spec.mosaic_side, "a ring of mosaic rows: read rows() and FrameMeta.cut"
        return self.array[slot, :count]

    def rows(self, slot: int, count: int) -> np.ndarray:
        """A slot's first ``count`` rows as flat bytes, (count, row bytes)."""
        return self.array[slot, :count].reshape(count, -1)

    def close(self) -> None:
        shm = self._shm
        if shm is None:
            return
        self._array = None  # drop the exported buffer before closing the mapping
        shm.close()
        if os.getpid() != self._pid:
            self._shm = None
            return
        try:
            shm.unlink()
        except FileNotFoundError:
            pass  # already gone: a worker that failed to attach unlinks it (CPython's SharedMemory)
        self._shm = None

    def __enter__(self) -> BatchRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_ring(*, slots: int, batch_size: int, view: int = VIEW, mosaic_side: int = 0) -> BatchRing:
    """A ring of ``mosaic_side`` rows, or where that does not fit in /dev/shm, a ring of views
    (the workers then cut views as for any backend)."""
    try:
        return BatchRing(slots=slots, batch_size=batch_size, view=view, mosaic_side=mosaic_side)
    except ResourceError:
        if not mosaic_side:
            raise
        return BatchRing(slots=slots, batch_size=batch_size, view=view)


def shm_shortage(size: int, exc: OSError | None = None) -> str:
    """The run's error when the ring does not fit: what it needs, and what /dev/shm has."""
    try:
        st = os.statvfs(SHM_DIR)
        free_mib, size_mib = st.f_bavail * st.f_frsize / 2**20, st.f_blocks * st.f_frsize / 2**20
        have = f"{SHM_DIR} has {free_mib:.0f} MiB free of {size_mib:.0f} MiB"
    except OSError:
        have = f"{SHM_DIR} cannot be read"
    why = f" ({exc.strerror})" if exc is not None and exc.strerror else ""
    return (f"the decode workers' shared memory ({size / 2**20:.0f} MiB) does not fit in {SHM_DIR}{why}: {have}; "
            "free space there or make it larger (docker run --shm-size=1g), or use fewer --workers or a "
            "smaller --batch-size (--workers 0 needs none)")


def _reserve(shm: shared_memory.SharedMemory, size: int) -> None:
    """Reserve every page of the segment now: a full /dev/shm is a ResourceError here, not a
    SIGBUS in the worker that first writes the page."""
    fd = getattr(shm, "_fd", -1)  # CPython's descriptor of the segment (POSIX)
    try:
        if fd < 0:
            raise OSError(errno.EOPNOTSUPP, "no descriptor")
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise ResourceError(shm_shortage(size, e)) from None
        # The file system cannot reserve (not Linux's tmpfs): at least there must be room now.
        try:
            st = os.statvfs(SHM_DIR)
        except OSError:
            return
        if st.f_bavail * st.f_frsize < size:
            raise ResourceError(shm_shortage(size)) from None


class RingWriter:
    """A worker's side: attached by name, never unlinks."""

    def __init__(self, spec: RingSpec):
        self.spec = spec
        self._shm = shared_memory.SharedMemory(name=spec.name)
        self._array: np.ndarray | None = np.ndarray((spec.slots, *spec.slot_shape), np.uint8,
                                                    buffer=self._shm.buf)

    def slot(self, slot: int) -> np.ndarray:
        if self._array is None:  # closed: its memory is gone
            raise ValueError("the batch ring is closed")
        return self._array[slot]

    def close(self) -> None:
        self._array = None
        self._shm.close()

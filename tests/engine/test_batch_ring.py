"""The shared-memory batch ring (vqa.batch) and a worker's slot accounting (vqa.engine.worker._Link):
round trips, back-pressure and unlinking."""
from __future__ import annotations

import multiprocessing as mp
import threading
from multiprocessing import shared_memory

import numpy as np
import pytest
from tests.support.engine import SHM_DIR, fill_slots, pattern, wait_until

from vqa.engine import worker as workers
from vqa.batch import VIEW_SHAPE, BatchRing, RingWriter


@pytest.fixture
def ctx():
    return mp.get_context("spawn")


def shm_path(ring: BatchRing):
    return SHM_DIR / ring.spec.name.lstrip("/")


def test_round_trip_in_one_process():
    with BatchRing(slots=3, batch_size=2) as ring:
        writer = RingWriter(ring.spec)
        try:
            taken = [0, 1, 2]
            for slot in taken:
                writer.slot(slot)[:2] = pattern(slot, 2, VIEW_SHAPE)
            for slot in taken:
                got = ring.views(slot, 2)
                assert got.shape == (2, *VIEW_SHAPE) and got.dtype == np.uint8
                np.testing.assert_array_equal(got, pattern(slot, 2, VIEW_SHAPE))
            assert ring.views(0, 1).shape == (1, *VIEW_SHAPE)
        finally:
            writer.close()


def test_round_trip_across_a_spawned_process(ctx):
    with BatchRing(slots=3, batch_size=2) as ring:
        done = ctx.Queue()
        child = ctx.Process(target=fill_slots, args=(ring.spec, done, 2))
        child.start()
        try:
            slots = sorted(done.get(timeout=60) for _ in range(3))
            child.join(timeout=30)
            assert child.exitcode == 0
        finally:
            if child.is_alive():
                child.kill()
                child.join()
            done.close()
            done.cancel_join_thread()
        assert slots == [0, 1, 2]
        for slot in slots:  # written in the child, read back here without a copy: byte-identical
            assert ring.views(slot, 2).tobytes() == pattern(slot, 2, VIEW_SHAPE).tobytes()


def test_worker_without_a_free_slot_waits_for_a_release():
    parent_end, child_end = mp.Pipe()
    link = workers._Link(child_end, [0, 1])
    first, second = link.acquire(), link.acquire()
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(link.acquire()), daemon=True)
    waiter.start()
    assert not wait_until(lambda: got, timeout_s=0.4), "a third acquire with 2 slots did not block"
    parent_end.send(("release", second))
    waiter.join(timeout=5)
    assert got == [second]
    assert first != second


def test_waiting_worker_stops_when_the_parent_is_gone(monkeypatch):
    monkeypatch.setattr(workers, "PARENT_CHECK_S", 0.05)
    monkeypatch.setattr(workers, "_parent_alive", lambda: False)
    _, child_end = mp.Pipe()
    link = workers._Link(child_end, [])
    with pytest.raises(workers._Stop):
        link.acquire()


def test_close_unlinks_the_segment():
    ring = BatchRing(slots=2, batch_size=1)
    name, path = ring.spec.name, shm_path(ring)
    assert path.exists()
    ring.close()
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    ring.close()  # twice is harmless
    assert not path.exists()


def test_a_closed_ring_says_it_is_closed():
    ring = BatchRing(slots=2, batch_size=1)
    writer = RingWriter(ring.spec)
    writer.close()
    ring.close()
    for read in (lambda: ring.array, lambda: ring.views(0, 1), lambda: writer.slot(0)):
        with pytest.raises(ValueError, match="closed"):  # not TypeError on None
            read()


def test_close_after_a_writer_attached_still_unlinks():
    ring = BatchRing(slots=2, batch_size=1)
    writer = RingWriter(ring.spec)
    writer.close()
    with ring:
        pass
    assert not shm_path(ring).exists()

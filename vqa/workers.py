"""Decode workers: processes that open videos, decode the planned frames and write fragment
views into the shared-memory ring (vqa.batch).

Each worker is a spawned process (no inherited decoder or thread state; FFmpeg's threads and
PyTorch's pools do not mix with fork). Decoders are opened inside the worker with one FFmpeg
thread, so N workers use N cores and never oversubscribe. Messages to the parent:

    ("info", task_id, VideoInfo, keyframes_s) answer to a probe
    ("batch", task_id, slot, [FrameMeta...])  ``len(metas)`` views are in ring slot ``slot``
    ("done", task_id, frames_decoded, decode_errors, warnings)
    ("error", task_id, code, message)         the task failed; the video gets an error record
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait

from .batch import RingSpec, RingWriter
from .decode import open_video
from .errors import VQAError
from .preprocess import FrameStats, fragments, frame_stats
from .types import SamplePlan

PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is still alive


@dataclass(frozen=True)
class ProbeTask:
    task_id: int
    path: str
    decoder: str
    want_keyframes: bool


@dataclass(frozen=True)
class DecodeTask:
    task_id: int
    path: str
    decoder: str
    plan: SamplePlan  # the runs of this segment only
    run_offset: int  # index of the segment's first run in the video's plan
    open_end: bool  # the video's last segment: its last run may read to the end of the stream
    threads: int = 1  # FFmpeg threads: more than 1 only when a video could not be split


@dataclass(frozen=True)
class FrameMeta:
    run: int
    pts_s: float
    stats: FrameStats


KEYFRAME_SCAN_PACKETS = 20_000  # about 13 min at 25 fps; longer videos are split blind


def _parent_alive(parent: int = os.getppid()) -> bool:
    # The default is taken when a spawned worker imports this module: its parent's pid.
    return os.getppid() == parent


class _Stop(Exception):
    """The parent said stop, or is gone."""


class _Link:
    """A worker's end of its private pipe, and the ring slots it may fill.

    Private pipes, not shared queues: a shared queue's lock dies with a worker killed while
    holding it and then blocks every other worker for good.
    """

    def __init__(self, conn, slots):
        self.conn = conn
        self.free = list(slots)
        self.tasks: list = []

    def _receive(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            if not _parent_alive():
                raise _Stop
            return
        msg = self.conn.recv()
        if msg is None:
            raise _Stop
        if msg[0] == "release":
            self.free.append(msg[1])
        else:
            self.tasks.append(msg[1])

    def next_task(self):
        while not self.tasks:
            self._receive(PARENT_CHECK_S)
        return self.tasks.pop(0)

    def acquire(self) -> int:
        """A free slot of this worker's; waits for the parent to release one (back-pressure)."""
        while not self.free:
            self._receive(PARENT_CHECK_S)
        return self.free.pop()

    def send(self, msg) -> None:
        self.conn.send(msg)


def _decode(task: DecodeTask, link: _Link, ring: RingWriter) -> None:
    slot, metas = None, []
    try:
        with open_video(task.path, backend=task.decoder, threads=task.threads) as reader:
            for frame in reader.read(task.plan, open_end=task.open_end):
                if slot is None:
                    slot = link.acquire()
                ring.slot(slot)[len(metas)] = fragments(frame.rgb)
                metas.append(FrameMeta(task.run_offset + frame.run, frame.pts_s, frame_stats(frame.rgb)))
                if len(metas) == ring.spec.batch_size:
                    link.send(("batch", task.task_id, slot, metas))
                    slot, metas = None, []
            if metas:
                link.send(("batch", task.task_id, slot, metas))
                slot = None
            link.send(("done", task.task_id, reader.frames_decoded, reader.decode_errors, reader.warnings))
    finally:
        if slot is not None:  # taken but not handed over (an error mid-batch): keep it
            link.free.append(slot)


def worker_main(conn, ring_spec: RingSpec, slots) -> None:
    """Loop: take a task, run it, report. ``None`` ends the loop; so does the parent's death."""
    link, ring = _Link(conn, slots), RingWriter(ring_spec)
    try:
        while True:
            task = link.next_task()
            try:
                if isinstance(task, ProbeTask):
                    with open_video(task.path, backend=task.decoder, threads=1) as reader:
                        info = reader.info
                        keyframes = reader.keyframe_times(KEYFRAME_SCAN_PACKETS) if task.want_keyframes else None
                    link.send(("info", task.task_id, info, keyframes))
                else:
                    _decode(task, link, ring)
            except (_Stop, BrokenPipeError, EOFError):
                raise
            except VQAError as e:
                link.send(("error", task.task_id, e.code, e.message))
            except Exception as e:  # a decoder fault on one file must not take the worker down
                link.send(("error", task.task_id, "E_INTERNAL", f"{type(e).__name__}: {e}"))
    except (_Stop, BrokenPipeError, EOFError, KeyboardInterrupt):
        return  # stopped, parent gone, or Ctrl-C (it reaches the whole group; the parent cleans up)
    finally:
        ring.close()
        conn.close()


@dataclass
class _Worker:
    slots: range
    process: object = None
    conn: object = None
    task_id: int | None = None  # the task it is running


class WorkerPool:
    """The parent's side: starts the workers, hands tasks to idle ones, notices deaths.

    Each worker owns ``slots_per_worker`` ring slots; a batch message hands one to the parent,
    ``release`` hands it back. ``get`` returns worker messages, plus ``("crash", task_id,
    exitcode)`` for a task whose worker died (killed, segfault, out of memory); that worker
    is replaced by a new one with the same slots.
    """

    def __init__(self, ctx, workers: int, ring_spec: RingSpec, slots_per_worker: int):
        self._ctx, self._spec, self._per = ctx, ring_spec, slots_per_worker
        self._workers = [_Worker(range(i * slots_per_worker, (i + 1) * slots_per_worker)) for i in range(workers)]
        self._waiting: deque = deque()  # tasks for the next idle worker
        self._parent_held: set[int] = set()  # slots handed over and not yet released
        for w in self._workers:
            self._spawn(w)

    def _spawn(self, w: _Worker) -> None:
        parent_end, child_end = self._ctx.Pipe()
        free = [s for s in w.slots if s not in self._parent_held]
        w.process = self._ctx.Process(target=worker_main, args=(child_end, self._spec, free), daemon=True,
                                      name="vqa-decode")
        w.process.start()
        child_end.close()
        w.conn, w.task_id = parent_end, None

    def submit(self, task) -> None:
        self._waiting.append(task)
        self._dispatch()

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.task_id is None and self._waiting and w.process.is_alive():
                task = self._waiting.popleft()
                w.task_id = task.task_id
                try:
                    w.conn.send(("task", task))
                except OSError:
                    pass  # it died; get() notices, blames this task and replaces the worker

    def release(self, slot: int) -> None:
        self._parent_held.discard(slot)
        w = self._workers[slot // self._per]
        try:
            w.conn.send(("release", slot))
        except OSError:
            pass  # a dead worker's replacement starts with its free slots

    def get(self, timeout_s: float):
        conns = {w.conn: w for w in self._workers}
        sentinels = {w.process.sentinel: w for w in self._workers}
        for ready in wait([*conns, *sentinels], timeout_s):
            if ready in conns:
                w = conns[ready]
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    continue  # the sentinel says why
                if msg[0] == "batch":
                    self._parent_held.add(msg[2])
                if msg[0] in ("info", "done", "error"):
                    w.task_id = None
                    self._dispatch()
                return msg
            w = sentinels[ready]
            w.process.join()
            task_id, code = w.task_id, w.process.exitcode
            w.conn.close()
            self._spawn(w)
            self._dispatch()
            if task_id is not None:
                return ("crash", task_id, code)
        return None

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.process.join(timeout=2.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers.clear()

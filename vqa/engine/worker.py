"""The child side of a decode worker: a spawned process that opens videos, runs the frame loop
(vqa.engine.frames) into its slots of the shared-memory ring (vqa.batch), and reports to the
parent with the messages of vqa.engine.messages.

Each worker is a spawned process (no inherited decoder or thread state; FFmpeg's threads and
PyTorch's pools do not mix with fork). Decoders are opened inside the worker with one FFmpeg
thread (and one OpenCV thread), so N workers use N cores and never oversubscribe.

A worker limits its own address space (``RLIMIT_AS``) at start-up when asked to: an allocation
beyond it raises ``MemoryError`` there, reported as ``E_MEMORY_LIMIT``, instead of letting a
runaway decoder push the machine into the kernel's OOM killer.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ..batch import RingSpec, RingWriter
from ..codes import ErrorCode, WarningCode
from ..decode import DEFAULT_BACKEND, open_video, reader_class
from ..decode.base import KEYFRAME_SCAN_PACKETS, VideoReader
from ..errors import BackendUnavailable, VQAError
from ..limits import out_of_memory
from ..preprocess import TRAINING, Geometry
from ..sample import plan_frames
from ..types import SamplePlan
from .frames import batches
from .messages import Batch, DecodeTask, Done, Failed, Probed, ProbeDecodeTask, ProbeTask, Ready

WORKER_NAME = "vqa-decode"  # every decode worker's process name (vqa.engine.prestart names its own so)
# A worker beside the CPU ones (--nvdec-workers) hands a video NVDEC cannot take back to FFmpeg
# without this warning: the user asked for FFmpeg, and got its pixels.
QUIET_BESIDE = (WarningCode.W_DECODER_FALLBACK,)
PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is still alive
# The exit status of a worker that found itself re-running the user's script: the script
# made a Scorer outside an `if __name__ == "__main__":` block (see guard_spawned_import).
EXIT_UNGUARDED_SCRIPT = 78
UNGUARDED_MESSAGE = (
    "the script that uses vqa.Scorer (or vqa.score) with decode workers must create it inside "
    "an `if __name__ == \"__main__\":` block: each worker is a spawned process that imports "
    "the script again, and there it would start workers of its own. Add the guard, or pass "
    "workers=0 to decode in this process")


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


class _RingSlots:
    """The frame loop's buffers in a worker: its own ring slots (vqa.engine.frames.Buffers)."""

    def __init__(self, link: _Link, ring: RingWriter):
        self._link, self._ring = link, ring

    def take(self) -> tuple[int, np.ndarray]:
        slot = self._link.acquire()
        return slot, self._ring.slot(slot)

    def give_back(self, key: int) -> None:
        self._link.free.append(key)


def _decode(task_id: int, reader: VideoReader, plan: SamplePlan, link: _Link, ring: RingWriter,
            geometry: Geometry, *, run_offset: int = 0, open_end: bool = True, quiet: tuple[str, ...] = ()) -> None:
    """``quiet``: warning codes left out of the record (those of a decoder that was not asked for)."""
    # Rows that hold a mosaic leave the view's last resampling to the inferencer (vqa.preprocess.cut).
    max_region = ring.spec.mosaic_side // geometry.grid
    for slot, metas in batches(reader, plan, _RingSlots(link, ring), ring.spec.batch_size,
                               run_offset=run_offset, open_end=open_end, geometry=geometry, max_region=max_region):
        link.send(Batch(task_id, slot, metas))
    warnings = [w for w in reader.warnings if w.split(":", 1)[0] not in quiet]
    link.send(Done(task_id, reader.frames_decoded, reader.decode_errors, warnings))


def _limit_memory(memory_mb: int | None, ring_spec: RingSpec) -> None:
    """Cap this process's address space at ``memory_mb`` MiB plus the ring's mapping.

    The ring is the parent's shared memory, sized by it, so it is added rather than counted
    against the worker's own budget. Only the soft limit is set, never above the hard one."""
    if not memory_mb:
        return
    import resource

    limit = (memory_mb << 20) + ring_spec.slots * ring_spec.slot_bytes  # uint8 views
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _run(task, link: _Link, ring: RingWriter, geometry: Geometry, beside: str | None = None) -> None:
    """``beside``: the decoder of a worker that decodes beside the task's (``worker_main``);
    a probe alone, which decodes one picture, stays with the task's."""
    backend = beside if beside is not None and not isinstance(task, ProbeTask) else task.decoder
    quiet = () if backend == task.decoder else QUIET_BESIDE
    if isinstance(task, DecodeTask):
        with open_video(task.path, backend=backend, threads=task.threads) as reader:
            _decode(task.task_id, reader, task.plan, link, ring, geometry, run_offset=task.run_offset,
                    open_end=task.open_end, quiet=quiet)
        return
    with open_video(task.path, backend=backend, threads=1) as reader:
        info = reader.info
        # A sampled plan's runs are placed by the keyframes (vqa.sample); a split plan is cut there.
        want = task.want_keyframes if isinstance(task, ProbeTask) else task.frames != "all"
        keyframes = reader.keyframe_times(KEYFRAME_SCAN_PACKETS) if want else None
        decoding = isinstance(task, ProbeDecodeTask)
        link.send(Probed(task.task_id, info, keyframes, decoding=decoding))
        if decoding:  # the same reader goes on: the file is opened and checked once
            _decode(task.task_id, reader, plan_frames(info, task.frames, keyframes_s=keyframes), link, ring, geometry,
                    quiet=quiet)


def guard_spawned_import() -> None:
    """Called where a Scorer with workers is made: inside a decode worker, that means the
    user's script is being imported again by the spawn start method, with no
    ``if __name__ == "__main__":`` guard. Say so and exit with a status the parent knows."""
    import multiprocessing as mp

    # While a spawned child imports the main script, multiprocessing marks it "_inheriting"
    # (its own check for this mistake reads the same flag); the name is set just before.
    me = mp.current_process()
    if getattr(me, "_inheriting", False) and me.name == WORKER_NAME:
        print(f"vqa: error: {UNGUARDED_MESSAGE}", file=sys.stderr)
        sys.exit(EXIT_UNGUARDED_SCRIPT)


def ignore_ctrl_c() -> None:
    """Ctrl-C at a terminal reaches the whole process group, workers too. Their parent decides
    what it means: the command stops (and stops its workers), a host that handles SIGINT itself
    may finish what is in hand. A worker that stopped on it cost its video a retry, and a second
    Ctrl-C an E_WORKER_CRASH record for a good video. A worker's life is its parent's: its pipe,
    its death (checked every PARENT_CHECK_S), or a kill."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _address_space_mb() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) >> 10
    except (OSError, ValueError, IndexError):
        pass
    return None


def preload() -> None:
    """Import what a worker of the default settings needs (a worker started before its
    settings are known, vqa.engine.prestart): OpenCV and the default decoder. A decoder that
    fails to import here is reported by ``worker_main``, for the decoder the settings name."""
    import cv2  # noqa: F401 - imported now, used by the frame loop

    try:
        reader_class(DEFAULT_BACKEND)
    except BackendUnavailable:
        pass


def worker_main(conn, ring_spec: RingSpec, slots, memory_mb: int | None = None,
                opencv_threads: int = 1, geometry: Geometry = TRAINING, decoder: str | None = None,
                beside: bool = False) -> None:
    """Loop: take a task, run it, report. ``None`` ends the loop; so does the parent's death.
    ``decoder``: the backend the tasks will name, imported now (while the parent loads its
    model, not on the first video); if it fails to import, ``Ready`` says why.
    ``beside``: an NVDEC worker beside CPU ones (``--nvdec-workers``): ``decoder`` decodes
    every video whatever its task names, and a video it hands back to FFmpeg gets no warning,
    so that the record is the one a CPU worker would have made."""
    ignore_ctrl_c()
    import cv2  # the preprocess stage's; its own pool would take every core

    cv2.setNumThreads(opencv_threads)
    decoder_error = None
    if decoder is not None:
        try:
            reader_class(decoder)
        except BackendUnavailable as e:
            decoder_error = e.message
    link, ring = _Link(conn, slots), RingWriter(ring_spec)
    # After the ring is mapped: a failed attach would unlink the parent's segment (CPython's
    # SharedMemory does that on any OSError while opening it).
    _limit_memory(memory_mb, ring_spec)
    try:
        link.send(Ready(os.getpid(), _address_space_mb(), decoder_error))
        while True:
            task = link.next_task()
            error: tuple[str, str] | None = None
            try:
                _run(task, link, ring, geometry, decoder if beside else None)
            except (_Stop, ConnectionError, EOFError):  # ConnectionError: a broken or reset link
                raise
            except Exception as e:  # a decoder fault on one file must not take the worker down
                if out_of_memory(e):
                    limit = memory_mb or "no limit"
                    error = (ErrorCode.E_MEMORY_LIMIT, f"the decode worker ran out of memory on it "
                                                       f"(worker_memory_mb={limit}): {type(e).__name__}")
                elif isinstance(e, VQAError):
                    error = (e.code, e.message)
                else:
                    error = (ErrorCode.E_INTERNAL, f"{type(e).__name__}: {e}")
            if error is not None:  # sent outside the handler: the traceback's memory is free again
                link.send(Failed(task.task_id, *error))
    except (_Stop, ConnectionError, EOFError, KeyboardInterrupt):
        pass  # stopped, or parent gone (a KeyboardInterrupt only from a SIGINT sent before ignore_ctrl_c)
    finally:
        ring.close()
        conn.close()
    _exit_now()


def _exit_now() -> None:
    """End a worker that stopped cleanly without tearing the interpreter down: finalizing
    NumPy, OpenCV and PyAV's modules took 0.1 to 0.2 s on 2 cores, and the parent's ``close``
    waits for it (issue 18). Nothing is left to finalize: the ring and the pipe are closed,
    the worker writes no files and starts no threads or processes of its own."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)

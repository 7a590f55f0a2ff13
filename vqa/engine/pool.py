"""The pool engine (``workers >= 1``): one dispatcher thread that alone talks to the decode
workers (vqa.engine.processes), the shared-memory ring (vqa.batch) and the inferencer.

    probe (a worker) -> plan (vqa.sample) -> decode tasks (workers: the frame loop, into the
        ring) -> inference from the ring slot -> conclude (vqa.engine.conclude) -> VideoScore

A video read by one worker (not split) is probed and decoded in one task, which opens the
file once; the worker plans it as the dispatcher does (a pure function of the probe).

Requests reach the dispatcher through a queue, and a pipe wakes it when a request, a
cancellation or an inference result arrives. A future stays pending until its record is
ready, so ``future.cancel()`` works at any time: the video's tasks are stopped and its worker
replaced.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from ..aggregate import FrameResult, FreezeChain
from ..batch import BatchRing, open_ring
from ..codes import ErrorCode
from ..config import Resolved
from ..errors import InputError
from ..futures import VideoFuture
from ..infer import Inferencer, mosaic_side
from ..lifecycle import Owner, mark_engine_thread, refuse_on_engine_thread
from ..limits import AUTO_TIMEOUT_MIN_S, auto_timeout_s
from ..model import ModelSpec
from ..sample import plan_frames, split_plan
from ..types import SamplePlan, VideoInfo, VideoScore
from .base import Engine, register
from .conclude import conclude
from .messages import Batch, Crashed, DecodeTask, Done, Failed, Probed, ProbeDecodeTask, ProbeTask, TimedOut
from .processes import WorkerPool

SLOTS_PER_WORKER = 3  # one being filled, one in inference, one ready
IDLE_S = 0.5  # the dispatcher wakes on every event; this only bounds a missed wake-up


@dataclass(eq=False)
class _Video:
    path: str
    record: VideoScore
    future: Future
    parts: int = 1  # segments the video is split into (1: one worker reads it all)
    info: VideoInfo | None = None
    plan: SamplePlan | None = None  # the plan to aggregate with (split for parallel decoding)
    planned: SamplePlan | None = None  # the plan as the user's options made it
    pending: int = 0  # segments not yet done
    inflight: int = 0  # batches submitted for inference, not yet back
    frames: list[FrameResult] = field(default_factory=list)
    decoded: int = 0
    decode_errors: int = 0
    reader_warnings: list[str] = field(default_factory=list)  # from the decoders, all segments
    chains: dict[int, FreezeChain] = field(default_factory=dict)  # task id -> its frames so far
    attempt: int = 0  # a worker crash restarts the video once; older messages are stale
    tasks: set[int] = field(default_factory=set)  # this attempt's tasks not yet answered
    timeout_s: float | None = None  # each decode task's limit, set after the probe
    finished: bool = False


def start_workers(options: Resolved, spec: ModelSpec) -> tuple[WorkerPool, BatchRing]:
    """The ring and the spawned workers; they start while the caller does other work, and
    ``pool.wait_ready()`` waits for them. (PoolEngine starts its own; tools time this alone.)"""
    import multiprocessing as mp

    ring = open_ring(slots=SLOTS_PER_WORKER * (options.workers + options.nvdec_workers), batch_size=options.batch_size,
                     view=spec.preprocessing.view, mosaic_side=mosaic_side(options.options.backend, spec.preprocessing))
    try:
        pool = WorkerPool(mp.get_context("spawn"), options.workers, ring.spec, SLOTS_PER_WORKER,
                          memory_mb=options.worker_memory_mb, geometry=spec.preprocessing,
                          decoder=options.decoder, nvdec_workers=options.nvdec_workers)
    except BaseException:
        ring.close()
        raise
    return pool, ring


class PoolEngine(Engine):
    """``workers >= 1``: the dispatcher thread owns the pool, the ring and the inferencer."""

    def __init__(self, options: Resolved, spec: ModelSpec, inferencer: Inferencer | Callable[[], Inferencer],
                 new_record: Callable[[str], VideoScore]):
        """Start the ring and the workers, then take the inferencer (a callable is called while
        the workers start: the model compiles meanwhile), then wait for every worker to be
        ready. Whatever fails on the way, what was started here is stopped and freed again."""
        self.o, self._decision, self._new_record = options, spec.decision, new_record
        self._lifecycle = Owner("Scorer")
        self.pool, self.ring = start_workers(options, spec)
        try:
            self.inferencer = inferencer() if callable(inferencer) else inferencer
            self.pool.wait_ready()  # a memory limit too low, or no main guard, fails here
            self._unpin = self.inferencer.pin(self.ring.array)  # withdrawn in close(), before the ring goes
        except BaseException:
            try:
                self.pool.close()
            finally:
                self.ring.close()
            raise
        self._requests: queue.SimpleQueue = queue.SimpleQueue()  # _Video, or a cancelled Future
        self._waiting: deque[_Video] = deque()  # taken from the queue, not yet admitted
        self._active: dict[Future, _Video] = {}  # admitted, not yet answered
        self._owner: dict[int, tuple[_Video, int]] = {}  # task id -> (video, attempt)
        self._completions: queue.SimpleQueue = queue.SimpleQueue()  # inference callbacks land here
        self._task_ids = iter(range(1 << 62))
        self.window = max(2, 2 * (options.workers + options.nvdec_workers))  # videos in flight, bounding memory
        self._wake_r, wake_w = os.pipe()
        self._wake_w: int | None = wake_w  # None once closed
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()  # no write to the pipe once its descriptors are closed
        self._stop = False
        self._submit_lock = threading.Lock()
        self._finished = False  # the dispatcher has taken its last request
        self.broken: BaseException | None = None  # why the dispatcher died, if it did
        self._thread = threading.Thread(target=self._run, name="vqa-dispatch", daemon=True)
        self._thread.start()
        register(self)

    # -- any thread ----------------------------------------------------------------------

    def submit(self, path: str, split: bool = False, shown: str | None = None) -> Future:
        self._lifecycle.check()
        future: Future = VideoFuture()
        with self._submit_lock:  # a request is either queued before the dispatcher's last look, or refused
            if self._finished:
                if self.broken is None:
                    raise RuntimeError("the Scorer is closed")
                future.set_exception(self.broken)
                return future
            self._requests.put(_Video(path, self._new_record(path if shown is None else shown), future,
                                      self.o.workers + self.o.nvdec_workers if split else 1))
        future.add_done_callback(self._on_done)
        self._wake()
        return future

    def _on_done(self, future: Future) -> None:
        if future.cancelled():
            self._requests.put(future)
            self._wake()

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_w is None:
                return  # closed
            try:
                os.write(self._wake_w, b"!")
            except OSError:
                pass  # the pipe is full (BlockingIOError): the dispatcher is due to wake anyway

    def close(self) -> None:
        if self._stop:
            return
        if not self._lifecycle.here:  # a forked child's copy: workers, ring and thread are the parent's
            self._stop = True
            return
        refuse_on_engine_thread("close()")
        self._stop = True
        self._wake()
        self._thread.join()
        try:
            self.pool.close()
        finally:
            self._unpin()  # the dispatcher has waited for the inferencer: no copy reads the ring now
            self.ring.close()
            with self._wake_lock:
                os.close(self._wake_r)
                if self._wake_w is not None:
                    os.close(self._wake_w)
                self._wake_w = None  # the dispatcher, which reads _wake_r, has stopped

    # -- the dispatcher thread -----------------------------------------------------------

    def _run(self) -> None:
        mark_engine_thread()
        try:
            while True:
                self._drain_wake()
                if self._stop:  # read after the drain: close()'s wake-up cannot be lost (it cost up to IDLE_S)
                    break
                self._take_requests()
                self._admit()
                msg = self.pool.get(IDLE_S, also=(self._wake_r,))
                if msg is not None:
                    self._handle(msg)
                self._collect()
        except BaseException as e:  # the pool or the inferencer failed: every caller hears of it
            self.broken = e
        finally:
            self._shut()

    def _shut(self) -> None:
        """Answer every request still open, and let inference give back its slots."""
        try:
            self.inferencer.wait()
        except Exception:  # noqa: BLE001 - already failing or closing
            pass
        self._collect()
        with self._submit_lock:
            self._finished = True
            while True:  # the workers are about to be stopped: no cancelling task by task
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Video):
                    self._waiting.append(item)
        for video in [*self._active.values(), *self._waiting]:
            if self.broken is not None and video.future.set_running_or_notify_cancel():
                video.future.set_exception(self.broken)
            else:
                video.future.cancel()
        self._active.clear()
        self._waiting.clear()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _take_requests(self) -> None:
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Video):
                if not item.future.cancelled():
                    self._waiting.append(item)
            elif item in self._active:  # a cancelled future: stop its video's tasks
                video = self._active.pop(item)
                self._cancel(video)
                video.finished = True

    def _admit(self) -> None:
        while self._waiting and len(self._active) < self.window:
            video = self._waiting.popleft()
            if video.future.cancelled():
                continue
            self._active[video.future] = video
            self._probe(video)

    def _submit(self, video: _Video, task, timeout_s: float | None) -> None:
        task_id = next(self._task_ids)
        self._owner[task_id] = (video, video.attempt)
        video.tasks.add(task_id)
        self.pool.submit(replace(task, task_id=task_id, timeout_s=timeout_s))

    def _probe(self, video: _Video) -> None:
        if video.parts == 1:  # one worker reads it all: probe and decode in one task, one open
            self._submit(video, ProbeDecodeTask(0, video.path, self.o.decoder, self.o.frames), self._limit(video))
            return
        # Keyframes place a sampled plan's runs, and the cuts of a split plan.
        self._submit(video, ProbeTask(0, video.path, self.o.decoder, want_keyframes=True), self._limit(video))

    def _cancel(self, video: _Video) -> None:
        """Stop the video's unanswered tasks: their workers are replaced, not left to finish."""
        for task_id in sorted(video.tasks):
            self._owner.pop(task_id, None)
            self.pool.cancel(task_id)
        video.tasks.clear()

    def _handle(self, msg) -> None:
        video, attempt = self._owner.get(msg.task_id, (None, None))
        if video is not None and (video.finished or attempt != video.attempt):
            video = None  # its answer is in, or it was restarted: this message is stale
        if isinstance(msg, Batch):
            if video is None:
                self.pool.release(msg.slot)
                return
            chain = video.chains.setdefault(msg.task_id, FreezeChain())  # a task's batches come in order
            for meta in msg.frames:
                chain.add(meta.stats)
            self._infer(video, msg.slot, msg.frames)
            return
        if isinstance(msg, Probed) and msg.decoding:  # the task goes on: its batches and Done follow
            if video is not None:
                self._plan(video, msg.info, msg.keyframes_s, decoding=msg.task_id)
            return
        self._owner.pop(msg.task_id, None)  # every other message is the task's last
        if video is None:
            return
        video.tasks.discard(msg.task_id)
        if isinstance(msg, TimedOut):  # no retry: a second try would most likely take as long again
            stage = "decoding" if video.info is not None else "opening"
            self._fail(video, ErrorCode.E_TIMEOUT, f"{stage} it went past the {self._limit(video):g} s limit "
                                           f"(timeout_s); its worker was stopped after {msg.elapsed_s:.1f} s")
        elif isinstance(msg, Crashed):
            if video.attempt == 0:  # the worker may have died of something else: once more
                self._cancel(video)
                video.attempt += 1
                video.frames, video.decoded, video.decode_errors, video.reader_warnings = [], 0, 0, []
                video.chains = {}
                video.info = video.timeout_s = None
                self._probe(video)
            else:
                self._fail(video, ErrorCode.E_WORKER_CRASH,
                           f"the decode worker died twice on it (exit code {msg.exitcode})")
        elif isinstance(msg, Probed):
            self._plan(video, msg.info, msg.keyframes_s)
        elif isinstance(msg, Failed):
            self._fail(video, msg.code, msg.message)
        elif isinstance(msg, Done):
            video.decoded += msg.frames_decoded
            video.decode_errors += msg.decode_errors
            video.reader_warnings += msg.warnings
            video.pending -= 1
            if video.pending == 0 and video.inflight == 0:
                self._finish(video)

    def _limit(self, video: _Video) -> float | None:
        """The limit of the video's tasks: the probe's until it is planned, then the decode's."""
        if video.info is None:
            return AUTO_TIMEOUT_MIN_S if self.o.timeout_s == "auto" else self._seconds()
        return video.timeout_s

    def _seconds(self) -> float | None:
        """timeout_s when it is not "auto": seconds, or None for no limit."""
        return None if isinstance(self.o.timeout_s, str) else self.o.timeout_s

    def _plan(self, video: _Video, info: VideoInfo, keyframes: list[float] | None,
              decoding: int | None = None) -> None:
        """Plan the video from its probe and start its decode tasks; ``decoding``: the id of a
        ProbeDecodeTask that decodes the same plan (made in the worker by the same function)."""
        video.info = video.record.video = info
        video.planned = plan_frames(info, self.o.frames, keyframes_s=keyframes)
        # Each segment gets the whole video's limit: it decodes no more than the whole video.
        video.timeout_s = auto_timeout_s(info, video.planned) if self.o.timeout_s == "auto" else self._seconds()
        video.record.sampling = video.planned.to_dict()
        if decoding is not None:
            video.plan, video.pending = video.planned, 1
            self.pool.restart_clock(decoding, video.timeout_s)
            return
        video.plan, segments = split_plan(video.planned, video.parts, keyframes_s=keyframes)
        video.pending = len(segments)
        # Cores the split could not use (too few keyframes) go to FFmpeg's own threads.
        threads = max(1, video.parts // len(segments))
        for k, (sub, offset) in enumerate(segments):
            self._submit(video, DecodeTask(0, video.path, self.o.decoder, sub, offset,
                                           open_end=k == len(segments) - 1, threads=threads), video.timeout_s)

    def _infer(self, video: _Video, slot: int, metas) -> None:
        """Start inference straight from the ring slot; the slot is released when it is back."""
        video.inflight += 1
        attempt = video.attempt

        def done(out) -> None:  # on an inference thread
            self._completions.put((video, attempt, slot, metas, out))
            self._wake()

        self.inferencer.submit_rows(self.ring.rows(slot, len(metas)), [m.cut for m in metas], done)

    def _collect(self) -> None:
        while True:
            try:
                video, attempt, slot, metas, out = self._completions.get_nowait()
            except queue.Empty:
                return
            self.pool.release(slot)
            video.inflight -= 1
            if video.finished or attempt != video.attempt:
                continue
            if isinstance(out, BaseException):  # an inference fault costs this video, not the job
                self._fail(video, ErrorCode.E_INTERNAL, f"inference failed: {type(out).__name__}: {out}")
                continue
            video.frames += [FrameResult(m.run, m.pts_s, row, m.stats) for m, row in zip(metas, out)]
            if video.pending == 0 and video.inflight == 0:
                self._finish(video)

    def _fail(self, video: _Video, code: str, message: str) -> None:
        self._cancel(video)
        video.record.error = {"code": str(code), "message": message}  # the bare code, not the enum member
        self._answer(video)

    def _finish(self, video: _Video) -> None:
        record = video.record
        frames = sorted(video.frames, key=lambda f: (f.run, f.pts_s))
        assert video.plan and video.planned and video.info  # planned (Probed) before any Done
        try:
            conclude(record, frames, video.plan, video.planned, video.info, video.decoded, video.decode_errors,
                     video.reader_warnings, decision=self._decision, with_timeline=self.o.timeline)
        except InputError as e:
            self._fail(video, e.code, e.message)
            return
        record.status = "ok"
        self._answer(video)

    def _answer(self, video: _Video) -> None:
        video.frames, video.chains, video.finished = [], {}, True
        self._active.pop(video.future, None)
        if video.future.set_running_or_notify_cancel():
            video.future.set_result(video.record)

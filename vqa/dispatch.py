"""The engine: one owner of the decode workers, the shared-memory ring and the inferencer.

    decode (vqa.decode, in vqa.workers) -> sample (vqa.sample) -> preprocess (vqa.preprocess)
        -> batch (vqa.batch) -> infer (vqa.infer) -> aggregate (vqa.aggregate) -> VideoScore

This is the one module that knows every stage. An engine takes requests from any number of
threads (``submit(path) -> concurrent.futures.Future``) and resolves each future with its
video's record, in the order the videos finish. Its interface is ``submit`` and ``close``:

- ``LocalEngine`` (``workers=0``) scores one video at a time in its own thread.
- ``PoolEngine`` (``workers >= 1``) runs one thread, the dispatcher, that alone talks to the
  worker pool, the ring and the inferencer. Requests reach it through a queue, and a pipe
  wakes it when a request, a cancellation or an inference result arrives.

A future stays pending until its record is ready, so ``future.cancel()`` works at any time:
the video's tasks are stopped and its worker replaced.
"""
from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import numpy as np

from .aggregate import FrameResult, FreezeChain, aggregate
from .aggregate import timeline as frame_timeline
from .batch import BatchRing
from .decode import open_video
from .errors import InputError, VQAError
from .limits import AUTO_TIMEOUT_MIN_S, auto_timeout_s, out_of_memory
from .preprocess import fragments, frame_stats
from .sample import plan_frames, split_plan
from .types import SamplePlan, VideoInfo, VideoScore
from .workers import (KEYFRAME_SCAN_PACKETS, Batch, Crashed, Done, Failed, Probed, ProbeTask, DecodeTask,
                      TimedOut, WorkerPool)

# Reading every frame, fewer frames than the container declares is truncation; this slack
# allows for edit lists and encoder delay, which can hide a frame or two.
TRUNCATED_SLACK = 0.02
SLOTS_PER_WORKER = 3  # one being filled, one in inference, one ready
IDLE_S = 0.5  # the dispatcher wakes on every event; this only bounds a missed wake-up


@dataclass(frozen=True)
class EngineOptions:
    decoder: str
    frames: int | str
    batch_size: int
    workers: int
    decode_threads: int  # FFmpeg threads of an in-process decoder (workers=0)
    timeout_s: float | str | None
    worker_memory_mb: int | None
    timeline: bool = False  # records carry their per-frame data (vqa.aggregate.timeline)


class Engine:
    """What a Scorer drives: ``submit`` from any thread, ``close`` once. ``split``: the video
    may be spread over every worker (for one video scored alone); whether it is never depends
    on what else is queued, so a record never depends on the traffic."""

    def submit(self, path: str, split: bool = False) -> Future:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# --- one video in this process -------------------------------------------------------------

def score_here(record: VideoScore, path: str, options: EngineOptions, inferencer) -> VideoScore:
    """Decode, infer and aggregate in this process: no workers, no shared memory. Never raises
    for a bad video: the record gets ``status="error"`` and a code."""
    try:
        _score_into(record, path, options, inferencer)
        record.status = "ok"
    except VQAError as e:
        record.error = {"code": e.code, "message": e.message}
    except MemoryError as e:  # the code a worker gives; here no limit applies, the machine ran out
        record.error = {"code": "E_MEMORY_LIMIT", "message": f"out of memory on it: {type(e).__name__}"}
    except Exception as e:  # a decoder or model fault on one file must not end the batch
        record.error = ({"code": "E_MEMORY_LIMIT", "message": f"out of memory on it: {type(e).__name__}: {e}"}
                        if out_of_memory(e) else {"code": "E_INTERNAL", "message": f"{type(e).__name__}: {e}"})
    return record


def _score_into(record: VideoScore, path: str, options: EngineOptions, inferencer) -> None:
    with open_video(path, backend=options.decoder, threads=options.decode_threads) as reader:
        info = record.video = reader.info
        plan = plan_frames(info, options.frames, keyframes_s=_keyframes(reader, options.frames))
        record.sampling = plan.to_dict()
        results: list[FrameResult] = []
        views: list[np.ndarray] = []

        def infer() -> None:
            if views:
                for r, row in zip(results[len(results) - len(views):], inferencer.infer(np.stack(views))):
                    r.outputs = row
                views.clear()

        for frame in reader.read(plan):
            views.append(fragments(frame.rgb))
            results.append(FrameResult(frame.run, frame.pts_s, None, frame_stats(frame.rgb)))
            if len(views) == options.batch_size:
                infer()
        infer()
        conclude(record, results, plan, plan, info, reader.frames_decoded, reader.decode_errors, reader.warnings,
                 with_timeline=options.timeline)


def _keyframes(reader, frames: int | str) -> list[float] | None:
    """The keyframe times a sampled plan is placed by (vqa.sample); a plan of every frame
    reads them all anyway."""
    return None if frames == "all" else reader.keyframe_times(KEYFRAME_SCAN_PACKETS)


class LocalEngine(Engine):
    """``workers=0``: one thread scores the requests in turn, in this process."""

    def __init__(self, options: EngineOptions, inferencer, new_record):
        self._options, self._inferencer, self._new_record = options, inferencer, new_record
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="vqa-engine", daemon=True)
        self._closed = False
        self._thread.start()
        _live.add(self)

    def submit(self, path: str, split: bool = False) -> Future:
        future: Future = Future()
        if self._closed:
            raise RuntimeError("the Scorer is closed")
        self._requests.put((path, future))
        return future

    def _run(self) -> None:
        while True:
            item = self._requests.get()
            if item is None:
                return
            path, future = item
            if self._closed:
                future.cancel()
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(score_here(self._new_record(path), path, self._options, self._inferencer))
            except BaseException as e:  # noqa: BLE001 - the caller hears of it, the thread goes on
                future.set_exception(e)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(None)
        self._thread.join()  # the video in hand finishes: a decoder thread cannot be interrupted
        while True:  # whatever was queued behind the stop is cancelled
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].cancel()


# --- many videos over the worker pool ------------------------------------------------------

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


def start_workers(options: EngineOptions) -> tuple[WorkerPool, BatchRing]:
    """The ring and the spawned workers; they start while the caller does other work (the
    model compiles), and ``pool.wait_ready()`` waits for them."""
    import multiprocessing as mp

    ring = BatchRing(slots=SLOTS_PER_WORKER * options.workers, batch_size=options.batch_size)
    try:
        pool = WorkerPool(mp.get_context("spawn"), options.workers, ring.spec, SLOTS_PER_WORKER,
                          memory_mb=options.worker_memory_mb)
    except BaseException:
        ring.close()
        raise
    return pool, ring


class PoolEngine(Engine):
    """``workers >= 1``: the dispatcher thread owns the pool, the ring and the inferencer."""

    def __init__(self, options: EngineOptions, inferencer, new_record, started=None):
        self.o, self.inferencer, self._new_record = options, inferencer, new_record
        self.pool, self.ring = started or start_workers(options)
        self._requests: queue.SimpleQueue = queue.SimpleQueue()  # _Video, or a cancelled Future
        self._waiting: deque[_Video] = deque()  # taken from the queue, not yet admitted
        self._active: dict[Future, _Video] = {}  # admitted, not yet answered
        self._owner: dict[int, tuple[_Video, int]] = {}  # task id -> (video, attempt)
        self._completions: queue.SimpleQueue = queue.SimpleQueue()  # inference callbacks land here
        self._task_ids = iter(range(1 << 62))
        self.window = max(2, 2 * options.workers)  # videos in flight, bounding memory
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()  # no write to the pipe once its descriptors are closed
        self._stop = False
        self._submit_lock = threading.Lock()
        self._finished = False  # the dispatcher has taken its last request
        self.broken: BaseException | None = None  # why the dispatcher died, if it did
        self._thread = threading.Thread(target=self._run, name="vqa-dispatch", daemon=True)
        self._thread.start()
        _live.add(self)

    # -- any thread ----------------------------------------------------------------------

    def submit(self, path: str, split: bool = False) -> Future:
        future: Future = Future()
        with self._submit_lock:  # a request is either queued before the dispatcher's last look, or refused
            if self._finished:
                if self.broken is None:
                    raise RuntimeError("the Scorer is closed")
                future.set_exception(self.broken)
                return future
            self._requests.put(_Video(path, self._new_record(path), future, self.o.workers if split else 1))
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
        self._stop = True
        self._wake()
        self._thread.join()
        try:
            self.pool.close()
        finally:
            self.ring.close()
            with self._wake_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = None

    # -- the dispatcher thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop:
                self._drain_wake()
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
        # Keyframes place a sampled plan's runs, and the cuts of a split plan.
        want = video.parts > 1 or self.o.frames != "all"
        self._submit(video, ProbeTask(0, video.path, self.o.decoder, want_keyframes=want),
                     self._limit(video))

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
        self._owner.pop(msg.task_id, None)  # every other message is the task's last
        if video is None:
            return
        video.tasks.discard(msg.task_id)
        if isinstance(msg, TimedOut):  # no retry: a second try would most likely take as long again
            stage = "decoding" if video.info is not None else "opening"
            self._fail(video, "E_TIMEOUT", f"{stage} it went past the {self._limit(video):g} s limit "
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
                self._fail(video, "E_WORKER_CRASH", f"the decode worker died twice on it (exit code {msg.exitcode})")
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
            return AUTO_TIMEOUT_MIN_S if self.o.timeout_s == "auto" else self.o.timeout_s
        return video.timeout_s

    def _plan(self, video: _Video, info: VideoInfo, keyframes: list[float] | None) -> None:
        video.info = video.record.video = info
        video.planned = plan_frames(info, self.o.frames, keyframes_s=keyframes)
        # Each segment gets the whole video's limit: it decodes no more than the whole video.
        video.timeout_s = auto_timeout_s(info, video.planned) if self.o.timeout_s == "auto" else self.o.timeout_s
        video.record.sampling = video.planned.to_dict()
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

        self.inferencer.submit(self.ring.views(slot, len(metas)), done)

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
                self._fail(video, "E_INTERNAL", f"inference failed: {type(out).__name__}: {out}")
                continue
            video.frames += [FrameResult(m.run, m.pts_s, row, m.stats) for m, row in zip(metas, out)]
            if video.pending == 0 and video.inflight == 0:
                self._finish(video)

    def _fail(self, video: _Video, code: str, message: str) -> None:
        self._cancel(video)
        video.record.error = {"code": code, "message": message}
        self._answer(video)

    def _finish(self, video: _Video) -> None:
        record = video.record
        frames = sorted(video.frames, key=lambda f: (f.run, f.pts_s))
        try:
            conclude(record, frames, video.plan, video.planned, video.info, video.decoded, video.decode_errors,
                     video.reader_warnings, with_timeline=self.o.timeline)
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


# --- from frames to a record ---------------------------------------------------------------

def conclude(record: VideoScore, frames: list[FrameResult], plan: SamplePlan, planned: SamplePlan,
             info: VideoInfo, decoded: int, decode_errors: int, reader_warnings: list[str], *,
             with_timeline: bool = False) -> None:
    """Fill a record from its frames in timeline order: counts, score, defects, warnings.
    ``plan`` is what the frames were read with, ``planned`` the plan the options made."""
    record.frames = {"sampled": len(frames), "decoded": decoded, "decode_errors": decode_errors}
    if not frames:
        raise InputError("no frame of the video could be decoded", code="E_DECODE")
    record.score, record.category, record.defects = aggregate(frames, plan, info.duration_s)
    last_run = sum(1 for f in frames if f.run == len(planned.runs) - 1)
    record.warnings = _warnings(record, planned, info, decode_errors, reader_warnings, last_run)
    if with_timeline:
        record.timeline = frame_timeline(frames, plan)


def _warnings(record: VideoScore, plan, info, decode_errors: int, reader_warnings: list[str],
              last_run: int) -> list[str]:
    """``last_run``: frames found for the plan's last run, the one that may read to the end."""
    out = []
    if decode_errors:
        out.append(f"W_CORRUPT_FRAMES: {decode_errors} packets or frames failed to decode")
    sampled, wanted = record.frames["sampled"], sum(r.count for r in plan.runs)
    # A run short of frames within its stretch is a sparse stretch of a variable-frame-rate
    # clip; only a stream that ends before the last run is filled is truncated.
    if all(r.count > 0 for r in plan.runs) and sampled < wanted and last_run < plan.runs[-1].count:
        out.append(f"W_TRUNCATED: the stream ends early: {sampled} of {wanted} planned frames were found")
    elif (plan.mode == "all" and info.frame_count_declared
          and sampled < info.frame_count * (1 - TRUNCATED_SLACK) - 1):
        out.append(f"W_TRUNCATED: {sampled} of the {info.frame_count} frames the file declares were found")
    if info.rotation:
        out.append(f"W_ROTATED: frames turned {info.rotation} degrees as the file asks")
    # Segments of one video read by several workers can each notice the same thing: keep the first.
    seen = {w.split(":", 1)[0] for w in out}
    for w in reader_warnings:
        code = w.split(":", 1)[0]
        if code not in seen:
            seen.add(code)
            out.append(w)
    return out


# Engines still open when the interpreter exits are closed first, so that their threads do
# not run on while modules are torn down (multiprocessing's own exit hook runs after this one).
_live: weakref.WeakSet[Engine] = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    for engine in list(_live):
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass

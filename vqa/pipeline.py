"""The orchestration: the one module that knows every stage.

    decode (vqa.decode) -> sample (vqa.sample) -> preprocess (vqa.preprocess)
        -> infer (vqa.infer) -> aggregate (vqa.aggregate) -> VideoScore

``Scorer`` loads the model once and scores videos one after another. A bad video never
raises: it comes back as a ``status="error"`` record with a stable code.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from .aggregate import FrameResult, FreezeChain, aggregate, timeline as frame_timeline
from .batch import BatchRing
from .decode import DEFAULT_BACKEND as DEFAULT_DECODER
from .decode import KNOWN_BACKENDS as DECODERS
from .decode import open_video
from .errors import InputError, UsageError, VQAError
from .limits import AUTO_TIMEOUT_MIN_S, auto_timeout_s, auto_worker_memory_mb, check_limits, out_of_memory
from .infer import BACKENDS, DEFAULT_BACKEND, MODES, PRECISIONS, open_inferencer
from .model import load_model_spec
from .preprocess import fragments, frame_stats
from .sample import FRAME_MODES, plan_frames, split_plan
from .types import SamplePlan, VideoInfo, VideoScore
from .workers import DecodeTask, ProbeTask, WorkerPool

DEFAULT_BATCH_SIZE = "auto"
MAX_BATCH_SIZE = 256
# batch_size="auto": measured with `vqa bench` on the 2-core machine (README, Performance).
# OpenVINO's views per second peak at batch 4 (fp32 212, int8 321) and fall beyond it, while
# the time per batch keeps climbing; batch 1 answers each request soonest (6 ms).
AUTO_BATCH_SIZE = {"latency": 1, "throughput": 4}
POLL_S = 0.05  # how long the consumer waits for a worker message before looking at inference
# Reading every frame, fewer frames than the container declares is truncation; this slack
# allows for edit lists and encoder delay, which can hide a frame or two.
TRUNCATED_SLACK = 0.02
SLOTS_PER_WORKER = 3  # one being filled, one in inference, one ready

def _check_options(backend, decoder, frames, batch_size, threads, precision, mode) -> None:
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if decoder not in DECODERS:
        raise UsageError(f"unknown decoder {decoder!r}; choose one of {', '.join(DECODERS)}")
    if not (frames in FRAME_MODES or (isinstance(frames, int) and not isinstance(frames, bool) and frames >= 1)):
        raise UsageError(f"frames must be 'default', 'all' or an integer >= 1, got {frames!r}")
    if batch_size != "auto" and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                 or not 1 <= batch_size <= MAX_BATCH_SIZE):
        raise UsageError(f"batch_size must be 'auto' or an integer in 1..{MAX_BATCH_SIZE}, got {batch_size!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"threads must be an integer >= 1, got {threads!r}")


class Scorer:
    """Scores videos with one loaded model. Use as a context manager, or call ``close()``.

    >>> with Scorer(backend="openvino") as scorer:       # doctest: +SKIP
    ...     for result in scorer.score_many(["a.mp4", "b.mkv"]):
    ...         print(result.path, result.score, result.category)

    Isolation, with decode workers (``workers >= 1``):

    - ``timeout_s``: a wall-clock limit on each decode task: the probe, and each segment of a
      video split across workers, counted from when a worker takes the task, not counting the
      time it waits for this process's inference. ``"auto"``: ``auto_timeout_s`` after the
      probe (120 s for the probe); ``None`` or 0: no limit. A task past it has its worker and
      the worker's children killed and replaced; the video gets ``E_TIMEOUT``, the job goes on.
    - ``worker_memory_mb``: each worker's address-space limit (RLIMIT_AS) in MiB, besides the
      shared ring. ``"auto"``: ``auto_worker_memory_mb(workers)``; ``None`` or 0: no limit. An
      allocation beyond it gives ``E_MEMORY_LIMIT`` (or ``E_WORKER_CRASH`` if it kills the worker).
    - A worker that dies costs its video: it is retried once, then ``E_WORKER_CRASH``.

    With ``workers=0`` videos decode in this process: nothing can stop a stuck decoder or cap
    its memory, so ``timeout_s`` and ``worker_memory_mb`` are accepted but have no effect.
    Neither enters ``config``: results do not depend on them.
    """

    def __init__(self, *, backend: str = DEFAULT_BACKEND, decoder: str = DEFAULT_DECODER,
                 frames: int | str = "default", batch_size: int | str = DEFAULT_BATCH_SIZE,
                 model_dir: str | os.PathLike | None = None, threads: int | None = None,
                 precision: str = "fp32", workers: int | None = None, mode: str = "throughput",
                 timeout_s: float | str | None = "auto", worker_memory_mb: int | str | None = "auto",
                 timeline: bool = False):
        _check_options(backend, decoder, frames, batch_size, threads, precision, mode)
        check_limits(timeout_s, worker_memory_mb)
        if batch_size == "auto":
            batch_size = AUTO_BATCH_SIZE[mode]
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
            raise UsageError(f"workers must be an integer >= 0 (0: decode in this process), got {workers!r}")
        self.frames, self.batch_size, self.decoder = frames, batch_size, decoder
        self.threads = threads or os.cpu_count() or 1
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        self.timeout_s = timeout_s or None
        self.worker_memory_mb = (auto_worker_memory_mb(self.workers) if worker_memory_mb == "auto"
                                 else worker_memory_mb or None)
        self._pool: WorkerPool | None = None
        self._ring: BatchRing | None = None
        self._task_ids = iter(range(1 << 62))
        self.spec = load_model_spec(model_dir)
        if threads is None and backend == "pytorch":
            # PyTorch's pool would take every core; leave the decode workers theirs.
            threads = max(1, (os.cpu_count() or 1) - self.workers)
        self.inferencer = open_inferencer(self.spec, backend=backend, threads=threads, precision=precision,
                                          mode=mode)
        # workers is left out on purpose: results do not depend on it (tests hold them to that).
        self.config = {"sampling": frames, "backend": backend, "batch_size": batch_size, "decoder": decoder,
                       "precision": precision, "mode": mode}
        # timeline=True adds each record's per-frame data (vqa.aggregate.timeline); it changes no
        # score, but is in config (so in the job store's key) only when on.
        self.timeline = bool(timeline)
        if self.timeline:
            self.config["timeline"] = True

    def score(self, path: str | os.PathLike) -> VideoScore:
        (record,) = self.score_many([path])  # run the generator to its end: the pool stays up
        return record

    def score_many(self, paths: Iterable[str | os.PathLike]) -> Iterator[VideoScore]:
        """Records in input order, each as soon as it and all before it are done."""
        paths = list(paths)
        if self.workers == 0:
            for path in paths:
                yield self._score_here(path)
        else:
            yield from self._score_parallel(paths)

    def _new_record(self, path) -> VideoScore:
        return VideoScore(path=os.fsdecode(path), status="error", model=self.spec.to_dict(),
                          config=dict(self.config))

    def _score_here(self, path) -> VideoScore:
        """Decode, infer and aggregate in this process: no workers, no shared memory."""
        record = self._new_record(path)
        try:
            self._score_into(record, path)
            record.status = "ok"
        except VQAError as e:
            record.error = {"code": e.code, "message": e.message}
        except MemoryError as e:  # the code a worker gives; here no limit applies, the machine ran out
            record.error = {"code": "E_MEMORY_LIMIT", "message": f"out of memory on it: {type(e).__name__}"}
        except Exception as e:  # a decoder or model fault on one file must not end the batch
            record.error = ({"code": "E_MEMORY_LIMIT", "message": f"out of memory on it: {type(e).__name__}: {e}"}
                            if out_of_memory(e) else {"code": "E_INTERNAL", "message": f"{type(e).__name__}: {e}"})
        return record

    def _score_parallel(self, paths: list) -> Iterator[VideoScore]:
        pool, ring = self._start_pool()
        job = _Job(self, pool, ring, paths)
        try:
            yield from job.run()
        finally:
            if not job.finished:  # abandoned or interrupted: tasks still in flight, start afresh
                self._stop_pool()

    def _start_pool(self) -> tuple[WorkerPool, BatchRing]:
        if self._pool is None:
            self._ring = BatchRing(slots=SLOTS_PER_WORKER * self.workers, batch_size=self.batch_size)
            self._pool = WorkerPool(mp.get_context("spawn"), self.workers, self._ring.spec, SLOTS_PER_WORKER,
                                    memory_mb=self.worker_memory_mb)
        return self._pool, self._ring

    def _stop_pool(self) -> None:
        try:
            if self._pool is not None:
                self._pool.close()
        finally:
            self._pool = None
            if self._ring is not None:
                self._ring.close()
                self._ring = None

    def _score_into(self, record: VideoScore, path) -> None:
        with open_video(path, backend=self.decoder, threads=self.threads) as reader:
            info = reader.info
            record.video = info
            plan = plan_frames(info, self.frames)
            record.sampling = plan.to_dict()
            results: list[FrameResult] = []
            views: list[np.ndarray] = []
            chain = FreezeChain()
            for frame in reader.read(plan):
                views.append(fragments(frame.rgb))
                results.append(FrameResult(frame.run, frame.pts_s, None, frame_stats(frame.rgb)))
                chain.add(results[-1].stats)
                if len(views) == self.batch_size:
                    self._infer(views, results)
            self._infer(views, results)
            _conclude(record, results, plan, plan, info, reader.frames_decoded, reader.decode_errors,
                      reader.warnings, with_timeline=self.timeline)

    def _infer(self, views: list[np.ndarray], results: list[FrameResult]) -> None:
        if not views:
            return
        out = self.inferencer.infer(np.stack(views))
        for r, row in zip(results[len(results) - len(views):], out):
            r.outputs = row
        views.clear()

    def close(self) -> None:
        try:
            self._stop_pool()
        finally:
            self.inferencer.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class _Video:
    record: VideoScore
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


class _Job:
    """One score_many call on the worker pool: probe, plan, split, infer, aggregate, in order."""

    def __init__(self, scorer: Scorer, pool: WorkerPool, ring: BatchRing, paths: list):
        self.s, self.pool, self.ring = scorer, pool, ring
        self.paths = [os.fsdecode(p) for p in paths]
        self.videos = [_Video(scorer._new_record(p)) for p in self.paths]
        self.owner: dict[int, tuple[int, int]] = {}  # task id -> (video index, attempt)
        # Few videos: split each across the workers; many: one worker per video.
        self.parts = scorer.workers if len(paths) < scorer.workers else 1
        self.window = max(2, 2 * scorer.workers)  # videos in flight, bounding memory
        self.completions: queue.SimpleQueue = queue.SimpleQueue()  # inference callbacks land here
        self.finished = False

    def run(self) -> Iterator[VideoScore]:
        admitted = emitted = 0
        while emitted < len(self.videos):
            while admitted < len(self.videos) and admitted - emitted < self.window:
                self._probe(admitted)
                admitted += 1
            msg = self.pool.get(POLL_S if self.completions.empty() else 0.001)
            if msg is not None:
                self._handle(msg)
            self._collect()
            while emitted < len(self.videos) and self.videos[emitted].finished:
                yield self.videos[emitted].record
                self.videos[emitted] = None  # release its frames
                emitted += 1
        self.s.inferencer.wait()
        self._collect()
        self.finished = True

    def _submit(self, idx: int, task, timeout_s: float | None) -> None:
        task_id = next(self.s._task_ids)
        self.owner[task_id] = (idx, self.videos[idx].attempt)
        self.videos[idx].tasks.add(task_id)
        self.pool.submit(replace(task, task_id=task_id, timeout_s=timeout_s))

    def _probe(self, idx: int) -> None:
        self._submit(idx, ProbeTask(0, self.paths[idx], self.s.decoder, want_keyframes=self.parts > 1),
                     self._limit(self.videos[idx]))

    def _cancel(self, video: _Video) -> None:
        """Stop the video's unanswered tasks: their workers are replaced, not left to finish."""
        for task_id in sorted(video.tasks):
            self.pool.cancel(task_id)
        video.tasks.clear()

    def _handle(self, msg) -> None:
        kind, task_id = msg[0], msg[1]
        idx, attempt = self.owner.get(task_id, (None, None))
        video = self.videos[idx] if idx is not None else None
        if video is not None and (video.finished or attempt != video.attempt):
            video = None  # its answer is in, or it was restarted: this message is stale
        if kind == "batch":
            if video is not None:
                chain = video.chains.setdefault(task_id, FreezeChain())  # a task's batches come in order
                for meta in msg[3]:
                    chain.add(meta.stats)
                self._infer(idx, video, msg[2], msg[3])
            else:
                self.pool.release(msg[2])
            return
        if video is None:
            return
        video.tasks.discard(task_id)
        if kind == "timeout":  # no retry: a second try would most likely take as long again
            stage = "decoding" if video.info is not None else "opening"
            self._fail(video, "E_TIMEOUT", f"{stage} it went past the {self._limit(video):g} s limit "
                                           f"(timeout_s); its worker was stopped after {msg[2]:.1f} s")
        elif kind == "crash":
            if video.attempt == 0:  # the worker may have died of something else: once more
                self._cancel(video)
                video.attempt += 1
                video.frames, video.decoded, video.decode_errors, video.reader_warnings = [], 0, 0, []
                video.chains = {}
                video.info = video.timeout_s = None
                self._probe(idx)
            else:
                self._fail(video, "E_WORKER_CRASH", f"the decode worker died twice on it (exit code {msg[2]})")
        elif kind == "info":
            self._plan(idx, video, msg[2], msg[3])
        elif kind == "error":
            self._fail(video, msg[2], msg[3])
        elif kind == "done":
            video.decoded += msg[2]
            video.decode_errors += msg[3]
            video.reader_warnings += msg[4]
            video.pending -= 1
            if video.pending == 0 and video.inflight == 0:
                self._finish(video)

    def _limit(self, video: _Video) -> float | None:
        """The limit of the video's tasks: the probe's until it is planned, then the decode's."""
        if video.info is None:
            return AUTO_TIMEOUT_MIN_S if self.s.timeout_s == "auto" else self.s.timeout_s
        return video.timeout_s

    def _plan(self, idx: int, video: _Video, info: VideoInfo, keyframes: list[float] | None) -> None:
        video.info = video.record.video = info
        video.planned = plan_frames(info, self.s.frames)
        # Each segment gets the whole video's limit: it decodes no more than the whole video.
        video.timeout_s = auto_timeout_s(info, video.planned) if self.s.timeout_s == "auto" else self.s.timeout_s
        video.record.sampling = video.planned.to_dict()
        video.plan, segments = split_plan(video.planned, self.parts, keyframes_s=keyframes)
        video.pending = len(segments)
        # Cores the split could not use (too few keyframes) go to FFmpeg's own threads.
        threads = max(1, self.parts // len(segments))
        for k, (sub, offset) in enumerate(segments):
            self._submit(idx, DecodeTask(0, self.paths[idx], self.s.decoder, sub, offset,
                                         open_end=k == len(segments) - 1, threads=threads), video.timeout_s)

    def _infer(self, idx: int, video: _Video, slot: int, metas) -> None:
        """Start inference straight from the ring slot; the slot is released when it is back."""
        video.inflight += 1
        attempt = video.attempt
        self.s.inferencer.submit(self.ring.views(slot, len(metas)),
                                 lambda out: self.completions.put((idx, attempt, slot, metas, out)))

    def _collect(self) -> None:
        while True:
            try:
                idx, attempt, slot, metas, out = self.completions.get_nowait()
            except queue.Empty:
                return
            self.pool.release(slot)
            video = self.videos[idx]
            if video is None:  # failed and already handed out
                continue
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
        video.frames = []
        video.finished = True

    def _finish(self, video: _Video) -> None:
        record = video.record
        frames = sorted(video.frames, key=lambda f: (f.run, f.pts_s))
        try:
            _conclude(record, frames, video.plan, video.planned, video.info, video.decoded, video.decode_errors,
                      video.reader_warnings, with_timeline=self.s.timeline)
        except InputError as e:
            self._fail(video, e.code, e.message)
            return
        record.status = "ok"
        video.frames = []
        video.finished = True


def _conclude(record: VideoScore, frames: list[FrameResult], plan: SamplePlan, planned: SamplePlan,
              info: VideoInfo, decoded: int, decode_errors: int, reader_warnings: list[str], *,
              with_timeline: bool = False) -> None:
    """Fill a record from its frames in timeline order: counts, score, defects, warnings.
    ``plan`` is what the frames were read with, ``planned`` the plan the options made."""
    record.frames = {"sampled": len(frames), "decoded": decoded, "decode_errors": decode_errors}
    if not frames:
        raise InputError("no frame of the video could be decoded", code="E_DECODE")
    record.score, record.category, record.defects = aggregate(frames, plan, info.duration_s)
    record.warnings = _warnings(record, planned, info, decode_errors, reader_warnings)
    if with_timeline:
        record.timeline = frame_timeline(frames, plan)


def _warnings(record: VideoScore, plan, info, decode_errors: int, reader_warnings: list[str]) -> list[str]:
    out = []
    if decode_errors:
        out.append(f"W_CORRUPT_FRAMES: {decode_errors} packets or frames failed to decode")
    sampled, wanted = record.frames["sampled"], sum(r.count for r in plan.runs)
    if all(r.count > 0 for r in plan.runs) and sampled < wanted:
        out.append(f"W_TRUNCATED: {sampled} of {wanted} planned frames were found")
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


def score(path: str | os.PathLike, **options) -> VideoScore:
    """Score one video with a Scorer made for it; for many videos keep one Scorer open."""
    with Scorer(**options) as scorer:
        return scorer.score(path)

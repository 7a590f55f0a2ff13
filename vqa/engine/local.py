"""The in-process engine (``workers=0``): one thread decodes, infers and aggregates each video
in turn, through the same frame loop as a decode worker (vqa.engine.frames). No workers and no
shared memory, so nothing can stop a stuck decoder or cap its memory."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from ..aggregate import FrameResult, FreezeChain
from ..codes import ErrorCode
from ..config import Resolved
from ..decode import VideoReader, open_video, reader_class
from ..decode.base import KEYFRAME_SCAN_PACKETS
from ..errors import VQAError
from ..futures import VideoFuture
from ..infer import Inferencer
from ..lifecycle import Owner, mark_engine_thread, refuse_on_engine_thread
from ..limits import out_of_memory
from ..model import ModelSpec
from ..sample import plan_frames
from ..types import SamplePlan, VideoInfo, VideoScore
from .base import Engine, cancel_queued, register
from .conclude import conclude
from .frames import batches


class OneBuffer:
    """The frame loop's buffers in this process: one batch, reused once inference has read it."""

    def __init__(self, batch_size: int, view: int):
        self.array = np.empty((batch_size, view, view, 3), np.uint8)

    def take(self) -> tuple[int, np.ndarray]:
        return 0, self.array

    def give_back(self, key: int) -> None:
        pass


def score_here(record: VideoScore, path: str, options: Resolved, inferencer: Inferencer, spec: ModelSpec
               ) -> VideoScore:
    """Decode, infer and aggregate ``path`` in this process. Never raises for a bad video: the
    record gets ``status="error"`` and a code."""
    return guarded(record, lambda: _score_into(record, path, options, inferencer, spec))


def guarded(record: VideoScore, work: Callable[[], None]) -> VideoScore:
    """Run ``work`` (which fills ``record``); a failure becomes the record's error and code."""
    try:
        work()
        record.status = "ok"
    except VQAError as e:
        record.error = {"code": str(e.code), "message": e.message}  # the bare code, not the enum member
    except MemoryError as e:  # the code a worker gives; here no limit applies, the machine ran out
        record.error = {"code": ErrorCode.E_MEMORY_LIMIT.value, "message": f"out of memory on it: {type(e).__name__}"}
    except Exception as e:  # a decoder or model fault on one file must not end the batch
        record.error = ({"code": ErrorCode.E_MEMORY_LIMIT.value,
                         "message": f"out of memory on it: {type(e).__name__}: {e}"} if out_of_memory(e) else
                        {"code": ErrorCode.E_INTERNAL.value, "message": f"{type(e).__name__}: {e}"})
    return record


def _score_into(record: VideoScore, path: str, options: Resolved, inferencer: Inferencer, spec: ModelSpec
                ) -> None:
    with open_video(path, backend=options.decoder, threads=options.decode_threads) as reader:
        score_read(record, reader, options, spec, lambda plan: cpu_results(reader, plan, options, inferencer, spec))


def score_read(record: VideoScore, reader: VideoReader, options: Resolved, spec: ModelSpec,
               results: Callable[[SamplePlan], list[FrameResult]],
               planned: Callable[[VideoInfo, SamplePlan], None] | None = None) -> None:
    """Plan an open video, read it (``results``: the plan's frames scored) and fill its record;
    ``planned`` hears of the plan before the read (the GPU engine sets its timeout from it)."""
    info = record.video = reader.info
    # A sampled plan is placed by the keyframes (vqa.sample); every frame needs none.
    keyframes = None if options.frames == "all" else reader.keyframe_times(KEYFRAME_SCAN_PACKETS)
    plan = plan_frames(info, options.frames, keyframes_s=keyframes)
    record.sampling = plan.to_dict()
    if planned is not None:
        planned(info, plan)
    conclude(record, results(plan), plan, plan, info, reader.frames_decoded, reader.decode_errors, reader.warnings,
             decision=spec.decision, with_timeline=options.timeline)


def cpu_results(reader: VideoReader, plan: SamplePlan, options: Resolved, inferencer: Inferencer, spec: ModelSpec
                ) -> list[FrameResult]:
    """The plan's frames of ``reader`` cut and measured on the CPU (vqa.engine.frames), then inferred."""
    buffer = OneBuffer(options.batch_size, spec.preprocessing.view)
    results: list[FrameResult] = []
    # The chain keeps a read's first and last thumbnails only: memory stays flat however
    # many frames are scored.
    for _, metas in batches(reader, plan, buffer, options.batch_size, chain=FreezeChain(),
                            geometry=spec.preprocessing):
        outputs = inferencer.infer(buffer.array[:len(metas)])
        results += [FrameResult(m.run, m.pts_s, row, m.stats) for m, row in zip(metas, outputs)]
    return results


class LocalEngine(Engine):
    """``workers=0``: one thread scores the requests in turn, in this process."""

    def __init__(self, options: Resolved, spec: ModelSpec, inferencer: Inferencer,
                 new_record: Callable[[str], VideoScore]):
        reader_class(options.decoder)  # a decoder that does not import fails here, not on every video
        self._options, self._spec, self._inferencer, self._new_record = options, spec, inferencer, new_record
        self._lifecycle = Owner("Scorer")
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="vqa-engine", daemon=True)
        self._closed = False
        self._thread.start()
        register(self)

    def submit(self, path: str, split: bool = False, shown: str | None = None) -> Future:
        self._lifecycle.check()
        future: Future = VideoFuture()
        if self._closed:
            raise RuntimeError("the Scorer is closed")
        self._requests.put((path, future, path if shown is None else shown))
        return future

    def _run(self) -> None:
        mark_engine_thread()
        while True:
            item = self._requests.get()
            if item is None:
                return
            path, future, shown = item
            if self._closed:
                future.cancel()
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                record = self._new_record(shown)
                future.set_result(score_here(record, path, self._options, self._inferencer, self._spec))
            except BaseException as e:  # noqa: BLE001 - the caller hears of it, the thread goes on
                future.set_exception(e)

    def close(self) -> None:
        if self._closed:
            return
        if not self._lifecycle.here:  # a forked child's copy: the thread is the parent's
            self._closed = True
            return
        refuse_on_engine_thread("close()")
        self._closed = True
        self._requests.put(None)
        self._thread.join()  # the video in hand finishes: a decoder thread cannot be interrupted
        cancel_queued(self._requests)  # whatever was queued behind the stop

"""The GPU engine (``--decoder nvdec --backend cuda``): one process, one CUDA context, many
NVDEC sessions, and pictures that never leave the GPU.

Each session is a thread with its own decoders (vqa.decode.nvdec_device.Session) and CUDA
stream. It takes the next video, and for it:

    PyAV opens, checks, measures and demuxes (the CPU's part, as for every backend)
    -> NVDEC decodes the frames the plan asks for, into device memory (NV12)
    -> vqa.infer.nv12 converts, cuts and measures them on the GPU (batch by batch)
    -> the network's CUDA graphs score the views (CUDAInferencer.infer_device)
    -> the frame results are aggregated into the record (vqa.engine.conclude)

A video NVDEC or the GPU preparation cannot take is decoded on the CPU by FFmpeg in the same
thread and prepared by the CPU path's code, its record warned ``W_DECODER_FALLBACK`` with the
reason. Records are the CPU path's: NVDEC decodes H.264 and HEVC exactly and the preparation is
bit for bit swscale's and OpenCV's (tests/infer/test_nv12.py), so only the precision (fp16)
moves a score.

Limits: the timeout holds (a video past it gets E_TIMEOUT and its session is replaced; the
stuck thread is left behind, as a thread cannot be killed), the address-space limit does not
(the decoders share this process). A video is never split across sessions.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import torch

from ..aggregate import FrameResult, FreezeChain
from ..codes import ErrorCode
from ..config import Resolved
from ..decode import reader_class
from ..futures import VideoFuture
from ..infer import Inferencer
from ..infer.nv12 import NV12Preparer
from ..lifecycle import Owner, mark_engine_thread, refuse_on_engine_thread
from ..limits import AUTO_TIMEOUT_MIN_S, auto_timeout_s
from ..model import ModelSpec
from ..types import SamplePlan, VideoInfo, VideoScore
from .base import Engine, cancel_queued, register
from .local import cpu_results, guarded, score_read
from .messages import FrameMeta

WATCH_EVERY_S = 0.5


class _Job:
    """A video in a session's hands: its limit in seconds and when it must be done by (None:
    no limit); ``abandoned`` once the watchdog has answered for it."""

    def __init__(self, future: Future, shown: str, limit: float | None):
        self.future, self.shown = future, shown
        self.set_limit(limit)
        self.abandoned = False

    def set_limit(self, limit: float | None) -> None:
        self.limit = limit
        self.deadline = None if limit is None else time.monotonic() + limit


class GpuEngine(Engine):
    """``sessions`` threads, each decoding whole videos with NVDEC and scoring them on the GPU."""

    def __init__(self, options: Resolved, spec: ModelSpec, inferencer: Inferencer,
                 new_record: Callable[[str], VideoScore], *, sessions: int, device: torch.device | str = "cuda"):
        reader_class("nvdec")  # PyNvVideoCodec and PyAV import, or BackendUnavailable now
        from ..decode.nvdec_device import Session  # after the check: it imports PyNvVideoCodec

        self._Session = Session
        self._options, self._spec, self._inferencer, self._new_record = options, spec, inferencer, new_record
        self._device = torch.device(device)
        self._prep = NV12Preparer(spec.preprocessing, self._device)
        self._lifecycle = Owner("Scorer")
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs: dict[threading.Thread, _Job] = {}
        self._jobs_lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._threads = [self._start_session(k) for k in range(sessions)]
        self._watchdog = threading.Thread(target=self._watch, name="vqa-gpu-watchdog", daemon=True)
        self._watchdog.start()
        register(self)

    # -- requests -------------------------------------------------------------------------
    def submit(self, path: str, split: bool = False, shown: str | None = None) -> Future:
        self._lifecycle.check()
        if self._closed:
            raise RuntimeError("the Scorer is closed")
        future: Future = VideoFuture()
        self._requests.put((path, future, path if shown is None else shown))
        return future

    def _start_session(self, k: int) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(self._Session(self._device),), name=f"vqa-nvdec-{k}",
                                  daemon=True)
        thread.start()
        return thread

    def _run(self, session) -> None:
        mark_engine_thread()
        me = threading.current_thread()
        while True:
            item = self._requests.get()
            if item is None:
                return
            path, future, shown = item
            if self._closed or not future.set_running_or_notify_cancel():
                future.cancel()
                continue
            limit = self._options.timeout_s
            job = _Job(future, shown, AUTO_TIMEOUT_MIN_S if limit == "auto" else float(limit) if limit else None)
            with self._jobs_lock:
                self._jobs[me] = job
            try:
                record = self._new_record(shown)
                network = session.network
                with torch.cuda.stream(network) if network is not None else contextlib.nullcontext():
                    record = self._score(record, path, session, job)
                outcome: VideoScore | BaseException = record
            except BaseException as e:  # noqa: BLE001 - the caller hears of it, the thread goes on
                outcome = e
            with self._jobs_lock:
                self._jobs.pop(me, None)
                if job.abandoned:  # the watchdog answered for it and started a new session
                    return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _score(self, record: VideoScore, path: str, session, job: _Job) -> VideoScore:
        """Score ``path`` into ``record`` on the GPU; never raises for a bad video (as score_here)."""
        return guarded(record, lambda: self._score_into(record, path, session, job))

    def _score_into(self, record: VideoScore, path: str, session, job: _Job) -> None:
        from ..decode.nvdec_device import NvdecDeviceReader

        options, spec = self._options, self._spec

        def planned(info: VideoInfo, plan: SamplePlan) -> None:
            if options.timeout_s == "auto":  # the decode's limit, from the plan, as the pool sets it
                job.set_limit(auto_timeout_s(info, plan))

        reader = NvdecDeviceReader(path, session=session, geometry=spec.preprocessing, threads=1)
        with reader:
            if reader.matrix is None:  # it fell back when opened: FFmpeg's frames, the CPU path's preparation
                score_read(record, reader, options, spec,
                           lambda plan: cpu_results(reader, plan, options, self._inferencer, spec), planned)
            else:
                score_read(record, reader, options, spec, lambda plan: self._device_results(reader.read(plan)), planned)

    def _device_results(self, frames: Iterator) -> list[FrameResult]:
        results: list[FrameResult] = []
        for views, metas in device_batches(frames, self._prep, self._options.batch_size, FreezeChain()):
            outputs = self._inferencer.infer_device(views)
            results += [FrameResult(m.run, m.pts_s, row, m.stats) for m, row in zip(metas, outputs)]
        return results

    # -- the timeout ----------------------------------------------------------------------
    def _watch(self) -> None:
        """Answer for a video past its limit with an E_TIMEOUT record, and put a new session in
        place of the thread that holds it (which ends, unheard, if it ever comes back)."""
        while not self._stop.wait(WATCH_EVERY_S):
            now = time.monotonic()
            with self._jobs_lock:
                late = [(t, j) for t, j in self._jobs.items() if j.deadline is not None and now > j.deadline]
                for thread, job in late:
                    job.abandoned = True
                    del self._jobs[thread]
            for thread, job in late:
                self._threads[self._threads.index(thread)] = self._start_session(len(self._threads))
                record = self._new_record(job.shown)
                record.error = {"code": ErrorCode.E_TIMEOUT.value,
                                "message": f"scoring it went past its {job.limit:g} s limit (--timeout); its NVDEC "
                                           "session was replaced"}
                job.future.set_result(record)

    def close(self) -> None:
        if self._closed:
            return
        if not self._lifecycle.here:  # a forked child's copy: the threads are the parent's
            self._closed = True
            return
        refuse_on_engine_thread("close()")
        self._closed = True
        self._stop.set()
        self._watchdog.join()
        for _ in self._threads:
            self._requests.put(None)
        for thread in self._threads:
            thread.join()  # the videos in hand finish: a decoder thread cannot be interrupted
        cancel_queued(self._requests)  # whatever was queued behind the stop


def device_batches(frames: Iterator, prep: NV12Preparer, batch_size: int, chain: FreezeChain
                   ) -> Iterator[tuple[torch.Tensor, list[FrameMeta]]]:
    """``(views, metas)`` for each batch of up to ``batch_size`` device frames
    (vqa.decode.nvdec_device.DeviceFrame) of one size, in reading order, prepared on their device
    in one pass a batch; the freeze chain sees every frame in order."""
    pending: list = []

    def flush() -> Iterator[tuple[torch.Tensor, list[FrameMeta]]]:
        if not pending:
            return
        batch, pending[:] = list(pending), []
        nv12 = torch.stack([f.nv12 for f in batch])
        stats = prep.stats(nv12, batch[0].matrix)
        metas = [FrameMeta(f.run, f.pts_s, s) for f, s in zip(batch, stats)]
        for m in metas:
            chain.add(m.stats)
        yield prep.views(nv12, batch[0].matrix), metas

    for frame in frames:
        if pending and frame.nv12.shape != pending[0].nv12.shape:  # a size change mid-stream
            yield from flush()
        pending.append(frame)
        if len(pending) == batch_size:
            yield from flush()
    yield from flush()

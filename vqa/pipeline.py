"""The orchestration: the one module that knows every stage.

    decode (vqa.decode) -> sample (vqa.sample) -> preprocess (vqa.preprocess)
        -> infer (vqa.infer) -> aggregate (vqa.aggregate) -> VideoScore

``Scorer`` loads the model once and scores videos one after another. A bad video never
raises: it comes back as a ``status="error"`` record with a stable code.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

from .aggregate import FrameResult, aggregate
from .decode import DEFAULT_BACKEND as DEFAULT_DECODER
from .decode import KNOWN_BACKENDS as DECODERS
from .decode import open_video
from .errors import InputError, UsageError, VQAError
from .infer import BACKENDS, DEFAULT_BACKEND, PRECISIONS, open_inferencer
from .model import load_model_spec
from .preprocess import fragments, frame_stats
from .sample import FRAME_MODES, plan_frames
from .types import VideoScore

DEFAULT_BATCH_SIZE = 16
MAX_BATCH_SIZE = 256


def _check_options(backend, decoder, frames, batch_size, threads, precision) -> None:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if decoder not in DECODERS:
        raise UsageError(f"unknown decoder {decoder!r}; choose one of {', '.join(DECODERS)}")
    if not (frames in FRAME_MODES or (isinstance(frames, int) and not isinstance(frames, bool) and frames >= 1)):
        raise UsageError(f"frames must be 'default', 'all' or an integer >= 1, got {frames!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise UsageError(f"batch_size must be an integer in 1..{MAX_BATCH_SIZE}, got {batch_size!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"threads must be an integer >= 1, got {threads!r}")


class Scorer:
    """Scores videos with one loaded model. Use as a context manager, or call ``close()``.

    >>> with Scorer(backend="openvino") as scorer:       # doctest: +SKIP
    ...     for result in scorer.score_many(["a.mp4", "b.mkv"]):
    ...         print(result.path, result.score, result.category)
    """

    def __init__(self, *, backend: str = DEFAULT_BACKEND, decoder: str = DEFAULT_DECODER,
                 frames: int | str = "default", batch_size: int = DEFAULT_BATCH_SIZE,
                 model_dir: str | os.PathLike | None = None, threads: int | None = None,
                 precision: str = "fp32"):
        _check_options(backend, decoder, frames, batch_size, threads, precision)
        self.frames, self.batch_size, self.decoder = frames, batch_size, decoder
        self.threads = threads or os.cpu_count() or 1
        self.spec = load_model_spec(model_dir)
        self.inferencer = open_inferencer(self.spec, backend=backend, threads=threads, precision=precision)
        self.config = {"sampling": frames, "backend": backend, "batch_size": batch_size, "decoder": decoder,
                       "precision": precision}

    def score(self, path: str | os.PathLike) -> VideoScore:
        record = VideoScore(path=os.fsdecode(path), status="error", model=self.spec.to_dict(),
                            config=dict(self.config))
        try:
            self._score_into(record, path)
            record.status = "ok"
        except VQAError as e:
            record.error = {"code": e.code, "message": e.message}
        except Exception as e:  # a decoder or model fault on one file must not end the batch
            record.error = {"code": "E_INTERNAL", "message": f"{type(e).__name__}: {e}"}
        return record

    def score_many(self, paths: Iterable[str | os.PathLike]) -> Iterator[VideoScore]:
        for path in paths:
            yield self.score(path)

    def _score_into(self, record: VideoScore, path) -> None:
        with open_video(path, backend=self.decoder, threads=self.threads) as reader:
            info = reader.info
            record.video = info
            plan = plan_frames(info, self.frames)
            record.sampling = plan.to_dict()
            results: list[FrameResult] = []
            views: list[np.ndarray] = []
            for frame in reader.read(plan):
                views.append(fragments(frame.rgb))
                results.append(FrameResult(frame.run, frame.pts_s, None, frame_stats(frame.rgb)))
                if len(views) == self.batch_size:
                    self._infer(views, results)
            self._infer(views, results)
            record.frames = {"sampled": len(results), "decoded": reader.frames_decoded,
                             "decode_errors": reader.decode_errors}
            if not results:
                raise InputError("no frame of the video could be decoded", code="E_DECODE")
            record.score, record.category, record.defects = aggregate(results, plan, info.duration_s)
            record.warnings = _warnings(record, plan, info, reader.decode_errors)

    def _infer(self, views: list[np.ndarray], results: list[FrameResult]) -> None:
        if not views:
            return
        out = self.inferencer.infer(np.stack(views))
        for r, row in zip(results[len(results) - len(views):], out):
            r.outputs = row
        views.clear()

    def close(self) -> None:
        self.inferencer.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _warnings(record: VideoScore, plan, info, decode_errors: int) -> list[str]:
    out = []
    if decode_errors:
        out.append(f"W_CORRUPT_FRAMES: {decode_errors} packets or frames failed to decode")
    wanted = sum(r.count for r in plan.runs)
    if all(r.count > 0 for r in plan.runs) and record.frames["sampled"] < wanted:
        out.append(f"W_TRUNCATED: {record.frames['sampled']} of {wanted} planned frames were found")
    if info.rotation:
        out.append(f"W_ROTATED: frames turned {info.rotation} degrees as the file asks")
    return out


def score(path: str | os.PathLike, **options) -> VideoScore:
    """Score one video with a Scorer made for it; for many videos keep one Scorer open."""
    with Scorer(**options) as scorer:
        return scorer.score(path)

"""Decode stage: open a video with a named backend and read the frames a SamplePlan asks for.

``AVAILABLE_BACKENDS`` holds the backends whose packages import here; a backend that is known
but missing is an error when asked for, never silently replaced by another.
"""
from __future__ import annotations

import os

from vqa.decode.base import MAX_DECODE_FRAMES, MAX_DURATION_S, MAX_PIXELS, VideoReader
from vqa.errors import BackendUnavailable, UsageError

DEFAULT_BACKEND = "pyav"
# Every backend this package knows, with the distribution that provides it.
KNOWN_BACKENDS = {"pyav": "av", "opencv": "opencv-python-headless"}

AVAILABLE_BACKENDS: dict[str, type[VideoReader]] = {}
_IMPORT_ERRORS: dict[str, str] = {}

try:
    from vqa.decode.pyav import PyAVReader
    AVAILABLE_BACKENDS[PyAVReader.BACKEND_NAME] = PyAVReader
except ImportError as exc:
    _IMPORT_ERRORS["pyav"] = str(exc)

try:
    from vqa.decode.opencv import OpenCVReader
    AVAILABLE_BACKENDS[OpenCVReader.BACKEND_NAME] = OpenCVReader
except ImportError as exc:
    _IMPORT_ERRORS["opencv"] = str(exc)


def open_video(path: str | bytes | os.PathLike, *, backend: str = DEFAULT_BACKEND,
               threads: int = 1, max_pixels: int = MAX_PIXELS, max_frames: int = MAX_DECODE_FRAMES,
               max_duration_s: float = MAX_DURATION_S) -> VideoReader:
    """Open ``path`` with ``backend``; use as a context manager so the file is closed.

    Keep ``threads`` at 1 when several videos decode in parallel processes. The ``max_*``
    caps bound what one untrusted video may cost (see ``vqa.decode.base``).
    """
    if backend not in KNOWN_BACKENDS:
        raise UsageError(f"unknown decode backend {backend!r}; known: {', '.join(KNOWN_BACKENDS)}")
    if backend not in AVAILABLE_BACKENDS:
        raise BackendUnavailable(
            f"decode backend {backend!r} needs the {KNOWN_BACKENDS[backend]!r} package "
            f"(pip install {KNOWN_BACKENDS[backend]}); import failed: {_IMPORT_ERRORS.get(backend)}")
    return AVAILABLE_BACKENDS[backend](path, threads=threads, max_pixels=max_pixels,
                                       max_frames=max_frames, max_duration_s=max_duration_s)


__all__ = ["AVAILABLE_BACKENDS", "DEFAULT_BACKEND", "KNOWN_BACKENDS", "MAX_DECODE_FRAMES",
           "MAX_DURATION_S", "MAX_PIXELS", "VideoReader", "open_video"]

"""Decode stage: open a video with a named backend and read the frames a SamplePlan asks for.

A backend's package (PyAV, OpenCV, PyNvVideoCodec) is imported when the backend is first opened, not with
this package: the parent of the decode workers never decodes, and importing both costs
start-up (issue 18). ``AVAILABLE_BACKENDS`` holds the backends whose packages import here,
importing every one the first time it is read; a backend that is known but missing is an
error when asked for, never silently replaced by another.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

from vqa.decode.base import MAX_DECODE_FRAMES, MAX_DURATION_S, MAX_PIXELS, VideoReader
from vqa.errors import BackendUnavailable, UsageError

DEFAULT_BACKEND = "pyav"
# Every backend this package knows, with the distribution that provides it.
KNOWN_BACKENDS = {"pyav": "av", "opencv": "opencv-python-headless", "nvdec": "PyNvVideoCodec"}
# backend -> (its module here, its class, the module its distribution installs)
_MODULES = {"pyav": ("vqa.decode.pyav", "PyAVReader", "av"),
            "opencv": ("vqa.decode.opencv", "OpenCVReader", "cv2"),
            "nvdec": ("vqa.decode.nvdec", "NvdecReader", "PyNvVideoCodec")}  # and PyAV, which demuxes

_READERS: dict[str, type[VideoReader] | None] = {}  # backends tried: the class, or None
_IMPORT_ERRORS: dict[str, str] = {}


def reader_class(backend: str) -> type[VideoReader]:
    """The reader of ``backend``, its package imported now if not yet; UsageError for a name
    no backend has, BackendUnavailable when its package does not import."""
    if backend not in KNOWN_BACKENDS:
        raise UsageError(f"unknown decode backend {backend!r}; known: {', '.join(KNOWN_BACKENDS)}")
    table = globals().get("AVAILABLE_BACKENDS")  # once read (every backend tried), it decides
    found = table.get(backend) if table is not None else _import(backend)
    if found is None:
        raise BackendUnavailable(
            f"decode backend {backend!r} needs the {KNOWN_BACKENDS[backend]!r} package "
            f"(pip install {KNOWN_BACKENDS[backend]}); import failed: {_IMPORT_ERRORS.get(backend)}")
    return found


def missing_package(backend: str) -> str | None:
    """Why ``backend`` cannot run here, without importing its package: None when its package
    is installed (or imported already). The import itself may still fail (a broken install);
    ``reader_class`` says so where the backend is first opened."""
    table = globals().get("AVAILABLE_BACKENDS")
    if table is not None:
        return None if backend in table else _IMPORT_ERRORS.get(backend, "not installed")
    if backend in _READERS:
        return None if _READERS[backend] is not None else _IMPORT_ERRORS[backend]
    try:
        spec = importlib.util.find_spec(_MODULES[backend][2])
    except (ImportError, ValueError) as exc:  # a parent package that fails, a module without a spec
        return str(exc)
    return None if spec is not None else f"No module named {_MODULES[backend][2]!r}"


def _import(backend: str) -> type[VideoReader] | None:
    if backend not in _READERS:
        module, name, _ = _MODULES[backend]
        try:
            _READERS[backend] = getattr(importlib.import_module(module), name)
        except ImportError as exc:
            _READERS[backend] = None
            _IMPORT_ERRORS[backend] = str(exc)
    return _READERS[backend]


def _available() -> dict[str, type[VideoReader]]:
    table = globals().get("AVAILABLE_BACKENDS")
    if table is None:
        table = {b: cls for b in KNOWN_BACKENDS if (cls := _import(b)) is not None}
        globals()["AVAILABLE_BACKENDS"] = table
    return table


def __getattr__(name: str) -> Any:
    if name == "AVAILABLE_BACKENDS":  # PEP 562: the first read imports every backend
        return _available()
    raise AttributeError(f"module 'vqa.decode' has no attribute {name!r}")


def open_video(path: str | bytes | os.PathLike, *, backend: str = DEFAULT_BACKEND,
               threads: int = 1, max_pixels: int = MAX_PIXELS, max_frames: int = MAX_DECODE_FRAMES,
               max_duration_s: float = MAX_DURATION_S) -> VideoReader:
    """Open ``path`` with ``backend``; use as a context manager so the file is closed.

    Keep ``threads`` at 1 when several videos decode in parallel processes. The ``max_*``
    caps bound what one untrusted video may cost (see ``vqa.decode.base``).
    """
    return reader_class(backend)(path, threads=threads, max_pixels=max_pixels,
                                 max_frames=max_frames, max_duration_s=max_duration_s)


__all__ = ["AVAILABLE_BACKENDS", "DEFAULT_BACKEND", "KNOWN_BACKENDS", "MAX_DECODE_FRAMES",
           "MAX_DURATION_S", "MAX_PIXELS", "VideoReader", "missing_package", "open_video", "reader_class"]

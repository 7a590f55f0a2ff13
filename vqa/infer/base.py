"""The inferencer interface: a uint8 batch of fragment views in, one row of outputs per view."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..model import ModelSpec

MODES = ("latency", "throughput")
DEFAULT_MODE = "throughput"  # also ScoreOptions.mode's default: one definition


class Inferencer(ABC):
    BACKEND_NAME: ClassVar[str]
    PRECISIONS: ClassVar[dict[str, str]]  # precision -> manifest file key (prefix)

    def __init__(self, spec: ModelSpec, *, threads: int | None = None, precision: str = "fp32",
                 mode: str = "latency"):
        self.spec = spec
        self.threads = threads
        self.precision = precision
        self.mode = mode

    @abstractmethod
    def infer(self, views: np.ndarray) -> np.ndarray:
        """(N, S, S, 3) uint8 RGB views -> (N, len(spec.outputs)) float32; score in column 0."""

    def submit(self, views: np.ndarray, done: Callable[[np.ndarray | BaseException], None]) -> None:
        """Start inference on ``views``; ``done`` gets the outputs (or the exception), perhaps from
        another thread. ``views`` must stay untouched until then. Synchronous unless overridden."""
        try:
            out = self.infer(views)
        except Exception as e:  # handed to the caller like an asynchronous failure would be
            done(e)
            return
        done(out)

    def submit_rows(self, rows: np.ndarray, cuts, done: Callable[[np.ndarray | BaseException], None]) -> None:
        """``submit`` for ring rows (N, bytes) as ``vqa.preprocess.cut`` left them: row i holds a
        view (``cuts[i]`` == 0) or a mosaic of ``cuts[i]``-pixel regions. Here mosaics are
        finished on the CPU (``finish_views``); a backend of RESAMPLING_BACKENDS does it on its
        device. Views alone are read in place (a ring of views: the slot itself); a backend
        that reads them after ``submit`` returns keeps what it reads (OpenVINO's copy)."""
        from ..preprocess import finish_views

        v = self.spec.preprocessing.view
        try:
            views = rows[:, :v * v * 3].reshape(len(rows), v, v, 3) if not any(cuts) else \
                finish_views(rows, cuts, self.spec.preprocessing)
        except Exception as e:
            done(e)
            return
        self.submit(views, done)

    def infer_device(self, views) -> np.ndarray:
        """``infer`` for views already in a torch tensor (the GPU engine prepares them on the
        device, vqa.engine.gpu): here they come to the host first; CUDA reads them where they are."""
        return self.infer(views.cpu().numpy())

    def pin(self, buffer: np.ndarray) -> Callable[[], None]:
        """Offer ``buffer`` (the ring) to be read straight from by the device; return the call
        that withdraws it, made once every batch submitted from it is back. On the CPU there is
        nothing to do; CUDA registers it (no staging copy)."""
        return lambda: None

    def wait(self) -> None:
        """Block until every submitted batch has called back."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The inferencer interface: a uint8 batch of fragment views in, one row of outputs per view."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..model import ModelSpec


class Inferencer(ABC):
    BACKEND_NAME: ClassVar[str]
    PRECISIONS: ClassVar[dict[str, str]]  # precision -> manifest file key (prefix)

    def __init__(self, spec: ModelSpec, *, threads: int | None = None, precision: str = "fp32"):
        self.spec = spec
        self.threads = threads
        self.precision = precision

    @abstractmethod
    def infer(self, views: np.ndarray) -> np.ndarray:
        """(N, S, S, 3) uint8 RGB views -> (N, len(spec.outputs)) float32; score in column 0."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

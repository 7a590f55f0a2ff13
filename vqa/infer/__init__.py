"""Inference stage: one interface (base.Inferencer), backends loaded by name.

Backends are imported only when asked for: importing torch costs seconds, and the OpenVINO
path must never pay it.
"""
from __future__ import annotations

import importlib

from ..errors import BackendUnavailable, UsageError
from ..model import ModelSpec
from .base import Inferencer

# name -> (module, class, pip package that provides it)
BACKENDS = {
    "openvino": ("vqa.infer.openvino", "OpenVINOInferencer", "openvino"),
    "pytorch": ("vqa.infer.pytorch", "PyTorchInferencer", "torch"),
}
DEFAULT_BACKEND = "openvino"


def available_backends() -> list[str]:
    return [name for name, (_, _, pkg) in BACKENDS.items() if importlib.util.find_spec(pkg) is not None]


def open_inferencer(spec: ModelSpec, *, backend: str = DEFAULT_BACKEND, threads: int | None = None) -> Inferencer:
    if backend not in BACKENDS:
        raise UsageError(f"unknown inference backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module, cls, package = BACKENDS[backend]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"backend {backend!r} needs the {package!r} package: pip install {package} ({e})") from None
    return getattr(mod, cls)(spec, threads=threads)


__all__ = ["BACKENDS", "DEFAULT_BACKEND", "Inferencer", "available_backends", "open_inferencer"]

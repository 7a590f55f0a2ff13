"""Inference stage: one interface (base.Inferencer), backends loaded by name.

Backends are imported only when asked for: importing torch costs seconds, and the OpenVINO
path must never pay it.
"""
from __future__ import annotations

import importlib.util

from ..errors import BackendUnavailable, UsageError
from ..model import ModelSpec
from .base import MODES, Inferencer

# name -> (module, class, pip package that provides it, precisions it runs)
BACKENDS = {
    "openvino": ("vqa.infer.openvino", "OpenVINOInferencer", "openvino", ("fp32", "int8")),
    "pytorch": ("vqa.infer.pytorch", "PyTorchInferencer", "torch", ("fp32",)),
}
DEFAULT_BACKEND = "openvino"
PRECISIONS = ("fp32", "int8")


def available_backends() -> list[str]:
    return [name for name, (_, _, pkg, _) in BACKENDS.items() if importlib.util.find_spec(pkg) is not None]


def open_inferencer(spec: ModelSpec, *, backend: str = DEFAULT_BACKEND, threads: int | None = None,
                    precision: str = "fp32", mode: str = "latency") -> Inferencer:
    if backend not in BACKENDS:
        raise UsageError(f"unknown inference backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module, cls, package, precisions = BACKENDS[backend]
    if precision not in precisions:
        raise UsageError(f"backend {backend!r} runs precision {', '.join(precisions)}, not {precision!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"backend {backend!r} needs the {package!r} package: pip install {package} ({e})") from None
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return getattr(mod, cls)(spec, threads=threads, precision=precision, mode=mode)


__all__ = ["BACKENDS", "DEFAULT_BACKEND", "MODES", "PRECISIONS", "Inferencer", "available_backends", "open_inferencer"]

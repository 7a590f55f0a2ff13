"""Inference stage: one interface (base.Inferencer), backends loaded by name.

Backends are imported only when asked for: importing torch costs seconds, and the OpenVINO
path must never pay it.
"""
from __future__ import annotations

import importlib.util

from ..errors import BackendUnavailable, UsageError
from ..model import ModelSpec
from .base import DEFAULT_MODE, MODES, Inferencer

# name -> (module, class, pip package that provides it, {precision it runs: the manifest's keys
# of the files that run it})
BACKENDS: dict[str, tuple[str, str, str, dict[str, tuple[str, ...]]]] = {
    "openvino": ("vqa.infer.openvino", "OpenVINOInferencer", "openvino",
                 {"fp32": ("openvino_xml", "openvino_bin"), "int8": ("openvino_int8_xml", "openvino_int8_bin")}),
    "pytorch": ("vqa.infer.pytorch", "PyTorchInferencer", "torch", {"fp32": ("pytorch",)}),
}
DEFAULT_BACKEND = "openvino"
PRECISIONS = ("fp32", "int8")
DEFAULT_PRECISION = "fp32"
# How to install a backend's package. A bare `pip install torch` resolves to a CUDA build of
# several GB; the CPU build is the one this package runs, pinned as in requirements-test.txt.
TORCH_VERSION = "2.13.0"
INSTALL_HINTS = {
    "torch": f"pip install torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cpu "
             f"(the CPU build; a plain `pip install torch` pulls a CUDA build of several GB)",
}


def install_hint(package: str) -> str:
    return INSTALL_HINTS.get(package, f"pip install {package}")


def model_files(backend: str, precision: str) -> tuple[str, ...]:
    """The manifest keys of the files that run ``backend`` at ``precision`` (for the record's
    model digest, vqa.model.ModelSpec.record)."""
    return BACKENDS[backend][3][precision]


def available_backends() -> list[str]:
    return [name for name, (_, _, pkg, _) in BACKENDS.items() if importlib.util.find_spec(pkg) is not None]


def open_inferencer(spec: ModelSpec, *, backend: str = DEFAULT_BACKEND, threads: int | None = None,
                    precision: str = DEFAULT_PRECISION, mode: str = DEFAULT_MODE) -> Inferencer:
    if backend not in BACKENDS:
        raise UsageError(f"unknown inference backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module, cls, package, precisions = BACKENDS[backend]
    if precision not in precisions:
        raise UsageError(f"backend {backend!r} runs precision {', '.join(precisions)}, not {precision!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"backend {backend!r} needs the {package!r} package: {install_hint(package)} "
                                 f"({e})") from None
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return getattr(mod, cls)(spec, threads=threads, precision=precision, mode=mode)


__all__ = ["BACKENDS", "DEFAULT_BACKEND", "DEFAULT_MODE", "DEFAULT_PRECISION", "INSTALL_HINTS", "MODES", "PRECISIONS",
           "Inferencer",
           "available_backends", "install_hint", "model_files", "open_inferencer"]

"""Inference stage: one interface (base.Inferencer), backends loaded by name.

Backends are imported only when asked for: importing torch costs seconds, and the OpenVINO
path must never pay it.
"""
from __future__ import annotations

import importlib.util

from ..errors import BackendUnavailable, UsageError
from ..model import ModelSpec
from ..preprocess import Geometry
from .base import DEFAULT_MODE, MODES, Inferencer

# name -> (module, class, pip package that provides it, {precision it runs: the manifest's keys
# of the files that run it})
BACKENDS: dict[str, tuple[str, str, str, dict[str, tuple[str, ...]]]] = {
    "openvino": ("vqa.infer.openvino", "OpenVINOInferencer", "openvino",
                 {"fp32": ("openvino_xml", "openvino_bin"), "int8": ("openvino_int8_xml", "openvino_int8_bin"),
                  # bf16 runs the fp32 IR with bfloat16 arithmetic (CPUs with AVX512-BF16 or AMX)
                  "bf16": ("openvino_xml", "openvino_bin")}),
    "pytorch": ("vqa.infer.pytorch", "PyTorchInferencer", "torch", {"fp32": ("pytorch",)}),
    # fp16 casts the same float32 weights when it loads them, so both precisions hash one file.
    "cuda": ("vqa.infer.cuda", "CUDAInferencer", "torch", {"fp32": ("pytorch",), "fp16": ("pytorch",)}),
}
# Backends that need a device besides their package: not test requirements, and "auto" or
# available_backends() name them only when the device answers.
DEVICE_BACKENDS = ("cuda",)
DEFAULT_BACKEND = "openvino"
AUTO_BACKEND = "auto"  # --backend auto: cuda where a GPU answers, else the default
PRECISIONS = ("fp32", "int8", "fp16", "bf16")
DEFAULT_PRECISION = "fp32"
AUTO_PRECISION = "auto"  # --precision auto: AUTO_PRECISION_BY_BACKEND's, else DEFAULT_PRECISION
# What --precision auto runs: the fastest precision within issue 20's tolerances. On cuda, fp16
# ran 2x fp32's views/s and its records agreed with the CPU's fp32 within 0.06 points on mean
# (docs/performance/results/h200-2026-12-01/). The default stays DEFAULT_PRECISION on every backend: a
# folder ran no faster with fp16 there (decoding set the pace), so fp32's exact agreement wins.
AUTO_PRECISION_BY_BACKEND = {"cuda": "fp16"}
# Precisions that need particular CPU instructions (bf16: AVX512-BF16 or AMX): run only when
# asked for by name, never by a backend's name alone (vqa bench --backend openvino).
BY_NAME_ONLY = ("bf16",)
# (backend, precision) pairs whose inference costs about half of fp32's a view on the CPU, so
# the thread budget gives it a third of the cores (vqa.threads, light_inference).
LIGHT_INFERENCE = (("openvino", "bf16"),)
# Backends that finish views from the mosaics the decode workers leave (vqa.preprocess.cut):
# the view's last area resampling, 0.4 to 0.7 ms of a worker's 4 to 5 ms a 720p frame, runs on
# the device instead (issue 20). Their rings have larger rows (vqa.batch.RingSpec.mosaic_side).
RESAMPLING_BACKENDS = ("cuda",)
MOSAIC_MAX_REGION = 48  # regions up to this side travel as mosaics (short sides of 560 to 810 px)
# How to install a backend's package. A bare `pip install torch` resolves to a CUDA build of
# several GB; the CPU build is the one this package runs, pinned as in requirements-test.txt.
TORCH_VERSION = "2.13.0"
INSTALL_HINTS = {
    "torch": f"pip install torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cpu "
             f"(the CPU build; a plain `pip install torch` pulls a CUDA build of several GB)",
}


# A backend whose package needs another build than the package's hint gives.
BACKEND_HINTS = {"cuda": "a CUDA build of torch, as https://pytorch.org/get-started/locally/ gives for your driver"}


def install_hint(package: str) -> str:
    return INSTALL_HINTS.get(package, f"pip install {package}")


def mosaic_side(backend: str, geometry: Geometry) -> int:
    """The side of a ring row for ``backend`` (vqa.batch.RingSpec.mosaic_side): room for the
    mosaics of MOSAIC_MAX_REGION-pixel regions where the backend finishes views itself, else 0
    (rows of views).

    >>> from vqa.preprocess import TRAINING
    >>> mosaic_side("cuda", TRAINING), mosaic_side("openvino", TRAINING)
    (336, 0)
    """
    return geometry.grid * MOSAIC_MAX_REGION if backend in RESAMPLING_BACKENDS else 0


def model_files(backend: str, precision: str) -> tuple[str, ...]:
    """The manifest keys of the files that run ``backend`` at ``precision`` (for the record's
    model digest, vqa.model.ModelSpec.record)."""
    return BACKENDS[backend][3][precision]


def cuda_available() -> bool:
    """True when torch is installed and a CUDA device answers (imports torch only if installed)."""
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        from .cuda import cuda_problem
    except ImportError:  # a torch that is installed but does not import
        return False
    return cuda_problem() is None


def available_backends() -> list[str]:
    return [name for name, (_, _, pkg, _) in BACKENDS.items() if importlib.util.find_spec(pkg) is not None
            and (name not in DEVICE_BACKENDS or cuda_available())]


def pick_precision(backend: str, precision: str) -> str:
    """``precision`` itself, or for ``"auto"``: ``backend``'s entry of AUTO_PRECISION_BY_BACKEND,
    else the default.

    >>> pick_precision("cuda", "auto"), pick_precision("openvino", "auto"), pick_precision("cuda", "fp32")
    ('fp16', 'fp32', 'fp32')
    """
    if precision != AUTO_PRECISION:
        return precision
    return AUTO_PRECISION_BY_BACKEND.get(backend, DEFAULT_PRECISION)


def pick_backend(backend: str) -> str:
    """``backend`` itself, or for ``"auto"``: cuda when a GPU answers, else the default."""
    if backend != AUTO_BACKEND:
        return backend
    return "cuda" if cuda_available() else DEFAULT_BACKEND


def open_inferencer(spec: ModelSpec, *, backend: str = DEFAULT_BACKEND, threads: int | None = None,
                    precision: str = DEFAULT_PRECISION, mode: str = DEFAULT_MODE) -> Inferencer:
    backend = pick_backend(backend)
    if backend not in BACKENDS:
        raise UsageError(f"unknown inference backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module, cls, package, precisions = BACKENDS[backend]
    if precision not in precisions:
        raise UsageError(f"backend {backend!r} runs precision {', '.join(precisions)}, not {precision!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        hint = BACKEND_HINTS.get(backend) or install_hint(package)
        raise BackendUnavailable(f"backend {backend!r} needs the {package!r} package: {hint} "
                                 f"({e})") from None
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return getattr(mod, cls)(spec, threads=threads, precision=precision, mode=mode)


__all__ = ["AUTO_BACKEND", "AUTO_PRECISION", "AUTO_PRECISION_BY_BACKEND", "BACKENDS", "DEFAULT_BACKEND",
           "DEVICE_BACKENDS", "DEFAULT_MODE", "DEFAULT_PRECISION", "INSTALL_HINTS", "MODES", "PRECISIONS", "Inferencer",
           "BY_NAME_ONLY", "LIGHT_INFERENCE", "MOSAIC_MAX_REGION", "RESAMPLING_BACKENDS", "mosaic_side",
           "available_backends", "cuda_available", "install_hint", "model_files", "open_inferencer", "pick_backend",
           "pick_precision"]

"""What the suite needs and must not quietly do without: a test that needs a backend the
package requires (both decoders; both inference backends with the [test] extra; Ray in CI,
where requirements-test.txt installs it) fails when it is missing instead of shrinking.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

from vqa.decode import KNOWN_BACKENDS as DECODERS
from vqa.infer import BACKENDS as INFERENCE_BACKENDS, DEVICE_BACKENDS

# Every decoder but those that need a device is an install requirement; every inference backend
# a test requirement. nvdec needs an NVIDIA GPU: tests/decode/test_nvdec.py (a stand-in, everywhere) and
# tests/decode/test_nvdec_device.py (the hardware) test it.
DEVICE_DECODERS = ("nvdec",)
REQUIRED_DECODERS = tuple(sorted(d for d in DECODERS if d not in DEVICE_DECODERS))
# A backend that needs a device (cuda) is tested where the device is: tests/infer/test_cuda.py.
REQUIRED_INFERENCE_BACKENDS = tuple(b for b in INFERENCE_BACKENDS if b not in DEVICE_BACKENDS)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def optional_module(name: str, why: str) -> ModuleType:
    """``name`` imported; outside CI a missing one skips the test (say ``why``), in CI
    (``CI=true``) it fails it, since CI installs every optional extra."""
    if in_ci():
        try:
            return importlib.import_module(name)
        except ImportError as e:
            pytest.fail(f"{name} is missing in CI, where requirements-test.txt installs it ({why}): {e}")
    return pytest.importorskip(name, reason=why)


def nvdec_missing() -> str | None:
    """Why the real NVDEC decoder cannot run here (no package, or no GPU or driver); None if it can.
    For the device tests' skip, which says why."""
    from vqa import decode

    why = decode.missing_package("nvdec")
    if why is None:
        try:
            decode.reader_class("nvdec")
        except Exception as exc:  # BackendUnavailable: the package is there, the GPU or driver is not
            why = str(exc)
    return why

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
from vqa.infer import BACKENDS as INFERENCE_BACKENDS

# Every decoder is an install requirement; every inference backend a test requirement.
REQUIRED_DECODERS = tuple(sorted(DECODERS))
REQUIRED_INFERENCE_BACKENDS = tuple(INFERENCE_BACKENDS)


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

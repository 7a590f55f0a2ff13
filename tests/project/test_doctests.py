"""The examples in vqa's docstrings run (``# doctest: +SKIP`` marks those that need files)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import vqa

MODULES = sorted(m.name for m in pkgutil.walk_packages(vqa.__path__, "vqa.") if not m.name.endswith("__main__"))
# Modules over a package only GPU machines install (their logic is tested by tests/decode/test_nvdec.py).
NEEDS = {"vqa.decode.nvdec": "PyNvVideoCodec", "vqa.decode.nvdec_device": "PyNvVideoCodec"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"{name} needs {NEEDS[name]}, a GPU machine's package")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"

"""Shared fixtures: test clips made once per session (content: tests/support/scenes.py), one loaded
Scorer per configuration, the record schema, and the fake scorer for CLI tests.

jsonschema (a test requirement) and PyAV (which encodes the clips) are imported by the
fixtures that use them: a GPU machine without them still collects tests/infer/test_cuda_device.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tests.support.scenes import CLIP_RECIPES, FPS, SCENE_FRAMES, H, W, dead_leaves_frames
from tests.support.fakes import FakeScorer

import vqa.cli
from vqa.report import CONTRACT_SCHEMA

@pytest.fixture(scope="session")
def scene() -> np.ndarray:
    return dead_leaves_frames(SCENE_FRAMES, H, W)


@pytest.fixture(scope="session")
def make_clip(tmp_path_factory, scene) -> Callable[[str], Path]:
    """``make_clip(name)`` -> path of the clip ``CLIP_RECIPES[name]``, encoded on first use."""
    from tests.support.clips import write_clip  # PyAV

    folder = tmp_path_factory.mktemp("clips")
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            impair, n, crf = CLIP_RECIPES[name]
            path = folder / f"{name}.mp4"
            write_clip(path, impair(scene[:n]), fps=FPS, options={"crf": str(crf)})
            made[name] = path
        return made[name]

    return make


@pytest.fixture(scope="session")
def scorer_for():
    """``scorer_for(backend=..., decoder=..., frames=...)`` -> a Scorer, loaded once per options."""
    from vqa import Scorer

    scorers: dict[tuple, Scorer] = {}

    def get(backend: str = "openvino", decoder: str = "pyav", frames="default") -> Scorer:
        key = (backend, decoder, frames)
        if key not in scorers:
            scorers[key] = Scorer(backend=backend, decoder=decoder, frames=frames, threads=2)
        return scorers[key]

    yield get
    for s in scorers.values():
        s.close()


@pytest.fixture(scope="session")
def validate_record():
    """Validate one record (a VideoScore or its dict) against the output contract."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(CONTRACT_SCHEMA)

    def check(record) -> dict:
        d = record if isinstance(record, dict) else record.to_dict()
        errors = sorted(validator.iter_errors(d), key=lambda e: list(e.path))
        assert not errors, "; ".join(f"{list(e.path)}: {e.message}" for e in errors)
        return d

    return check


@pytest.fixture
def fake(monkeypatch):
    """The CLI builds a FakeScorer (tests/support/fakes.py) instead of loading the model."""
    FakeScorer.instances = []
    monkeypatch.setattr(vqa.cli.score, "_make_scorer", FakeScorer)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    return FakeScorer


# --- the quick part stays quick -------------------------------------------------------------

QUICK_LIMIT_S = 5.0  # a test not marked slow that takes longer is named at the end of the run
_long_quick: list[tuple[float, str]] = []


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" and report.duration > QUICK_LIMIT_S and "slow" not in report.keywords:
        _long_quick.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter) -> None:
    if _long_quick:
        terminalreporter.section(f"tests not marked slow that took over {QUICK_LIMIT_S:g} s")
        for seconds, nodeid in sorted(_long_quick, reverse=True):
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}  (mark it slow, or make it quicker)")


@pytest.fixture
def nvdec(monkeypatch):
    """tests/support/fake_nvdec.py installed as PyNvVideoCodec, the NVDEC readers imported
    against it, its faults off and its counts at zero."""
    import vqa.decode as decode
    from tests.support import fake_nvdec

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvdec.install())
    for name in ("vqa.decode.nvdec", "vqa.decode.nvdec_device"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delitem(decode._READERS, "nvdec", raising=False)
    monkeypatch.delitem(decode._IMPORT_ERRORS, "nvdec", raising=False)
    # Once read, the table of available backends decides (made before the fake was there).
    monkeypatch.delitem(vars(decode), "AVAILABLE_BACKENDS", raising=False)
    for k in fake_nvdec.FAULTS:
        monkeypatch.setitem(fake_nvdec.FAULTS, k, False)
    fake_nvdec.STATS.update(created=0, packets=0, drained=0)
    yield fake_nvdec
    decode._READERS.pop("nvdec", None)  # the next test imports against its own fake, or none

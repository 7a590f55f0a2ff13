"""Every sample_videos/ clip scores as tests/golden/ says, per backend and precision, within
the tolerance written there (scripts/model/golden.py writes both and says why it is what it is)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.script_modules import load

from vqa.model import load_model_spec

REPO = Path(__file__).resolve().parents[2]
golden = load("model", "golden")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend, precision", golden.RUNS)
def test_sample_videos_score_as_recorded(backend, precision):
    recorded = json.loads(golden.golden_path(backend, precision).read_text())
    tolerance, want = recorded["tolerance"]["score"], recorded["clips"]
    got = golden.measure(backend, precision)
    assert sorted(got) == sorted(want)  # every clip, and only those
    bounds = [b for b, _ in load_model_spec().decision.category_thresholds]
    for clip, expected in want.items():
        g = got[clip]
        assert g["score"] == pytest.approx(expected["score"], abs=tolerance), clip
        assert g["defects"] == expected["defects"], clip
        near_a_bound = any(abs(expected["score"] - b) <= tolerance for b in bounds)
        assert g["category"] == expected["category"] or near_a_bound, clip

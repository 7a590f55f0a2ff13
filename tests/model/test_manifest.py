"""The model's contract lives in its manifest (models/vqa.json): preprocessing and decision
blocks read through vqa.model, and the decision block agrees with models/calibration.json."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vqa.aggregate import Decision
from vqa.errors import ModelError
from vqa.model import load_model_spec
from vqa.preprocess import TRAINING, fragments

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_the_decision_block_is_the_one_judgement_fitted():
    """scripts/model/decide.py fit writes both: the decision block it chose and fitted (models/judgement.json,
    with the command and the cross-validated figures) is the block the manifest ships."""
    fitted = json.loads((MODELS / "judgement.json").read_text())["decision"]
    assert json.loads((MODELS / "vqa.json").read_text())["decision"] == fitted


def test_the_decision_block_round_trips():
    block = json.loads((MODELS / "vqa.json").read_text())["decision"]
    decision = Decision.from_manifest(block)
    assert decision.to_manifest() == block
    assert Decision.from_manifest(decision.to_manifest()) == decision


def _copy(tmp_path: Path, change) -> Path:
    dst = tmp_path / "models"
    dst.mkdir()
    shutil.copy(MODELS / "vqa.json", dst / "vqa.json")
    data = json.loads((dst / "vqa.json").read_text())
    change(data)
    (dst / "vqa.json").write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize("change", [
    lambda d: d.pop("decision"),
    lambda d: d["decision"]["defect_probability"].pop("blur"),
    lambda d: d["decision"]["category_thresholds"].pop("poor"),
    lambda d: d["decision"]["category_thresholds"].update(good=95.0),  # above excellent: no longer descending
    lambda d: d["input"].update(size=200),  # not grid x patch
])
def test_an_incomplete_or_inconsistent_manifest_is_corrupt(tmp_path, change):
    with pytest.raises(ModelError) as e:
        load_model_spec(_copy(tmp_path, change))
    assert e.value.code == "E_MODEL_CORRUPT"


def test_the_preprocessing_comes_from_the_manifest(tmp_path):
    spec = load_model_spec(_copy(tmp_path, lambda d: d["input"].update(work_short_side=270)))
    assert spec.preprocessing == dataclasses.replace(TRAINING, work_short_side=270)
    frame = np.random.default_rng(0).integers(0, 256, (540, 960, 3), np.uint8)
    assert not np.array_equal(fragments(frame, geometry=spec.preprocessing), fragments(frame))
    assert load_model_spec(MODELS).preprocessing == TRAINING  # what the shipped model was trained with

"""Inference stage: every backend passes the same suite and they agree with each other.

Also the model manifest's guard: a changed byte in a model file, or no manifest, is a
ModelError with a stable code, never a quiet change in scores.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vqa.errors import ModelError, UsageError
from tests.support.required import REQUIRED_INFERENCE_BACKENDS

from vqa.infer import available_backends, open_inferencer
from vqa.model import MANIFEST, default_model_dir, load_model_spec
from vqa.preprocess import VIEW, fragments
from vqa.types import MODEL_DEFECTS

BACKEND_NAMES = sorted(REQUIRED_INFERENCE_BACKENDS)  # a missing one fails, never drops out
OUTPUTS = 1 + len(MODEL_DEFECTS)
SCORE_TOL = 0.5  # score points
LOGIT_TOL = 1e-3
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spec():
    return load_model_spec()


@pytest.fixture(scope="module")
def inferencers(spec):
    opened = {name: open_inferencer(spec, backend=name, threads=2) for name in BACKEND_NAMES}
    yield opened
    for inf in opened.values():
        inf.close()


@pytest.fixture(scope="module")
def random_views():
    return np.random.default_rng(7).integers(0, 256, (8, VIEW, VIEW, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def real_views(scene):
    """Fragment views of real frames: clean, blurred, darkened and a flat grey frame."""
    from tests.support.scenes import blur, dark

    frames = [scene[0], scene[30], blur(scene[:1])[0], dark(scene[10:11])[0],
              np.full_like(scene[0], 128)]
    return np.stack([fragments(f) for f in frames])


def test_both_backends_are_available():
    # The test extra installs torch; a missing backend would silently shrink this suite.
    assert set(available_backends()) == set(BACKEND_NAMES)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("n", [1, 5])
def test_output_shape_and_finite(inferencers, random_views, backend, n):
    out = inferencers[backend].infer(random_views[:n])
    assert out.shape == (n, OUTPUTS)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_backend_name_matches_table(inferencers, backend):
    assert inferencers[backend].BACKEND_NAME == backend


@pytest.mark.parametrize("views", ["random_views", "real_views"])
def test_backends_agree(inferencers, request, views):
    x = request.getfixturevalue(views)
    ov = inferencers["openvino"].infer(x)
    pt = inferencers["pytorch"].infer(x)
    score_diff = np.abs(ov[:, 0] - pt[:, 0])
    logit_diff = np.abs(ov[:, 1:] - pt[:, 1:])
    assert score_diff.max() <= SCORE_TOL, f"score differences {score_diff}"
    assert logit_diff.max() <= LOGIT_TOL, f"logit differences {logit_diff.max(axis=0)}"


# One view at a time through PyTorch's thread pool: seconds, and 15 s on a loaded machine.
@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) if b == "pytorch" else b
                                     for b in BACKEND_NAMES])
def test_batch_size_independence(inferencers, random_views, backend):
    inf = inferencers[backend]
    together = inf.infer(random_views)
    alone = np.concatenate([inf.infer(random_views[i:i + 1]) for i in range(len(random_views))])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-3)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_inference_is_repeatable(inferencers, real_views, backend):
    inf = inferencers[backend]
    np.testing.assert_array_equal(inf.infer(real_views), inf.infer(real_views))


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_real_views_are_told_apart(inferencers, real_views, backend):
    """Sanity of the shipped weights: a clean frame outscores its blurred copy by a wide margin."""
    out = inferencers[backend].infer(real_views)
    clean, blurred = out[0], out[2]
    assert clean[0] - blurred[0] > 20
    blur_logit = 1 + MODEL_DEFECTS.index("blur")
    assert blurred[blur_logit] > 0 > clean[blur_logit]


# --- the model manifest guards the files ----------------------------------------------------

def copy_models(tmp_path: Path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(default_model_dir(), dst)
    return dst


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# which manifest key each backend opens
WEIGHTS_KEY = {"openvino": "openvino_bin", "pytorch": "pytorch"}


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_untouched_copy_loads(tmp_path, backend):
    spec = load_model_spec(copy_models(tmp_path))
    with open_inferencer(spec, backend=backend) as inf:
        assert inf.infer(np.zeros((1, VIEW, VIEW, 3), np.uint8)).shape == (1, OUTPUTS)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_one_flipped_byte_is_corrupt(tmp_path, backend, where):
    models = copy_models(tmp_path)
    spec = load_model_spec(models)
    path = models / spec.files[WEIGHTS_KEY[backend]]
    size = path.stat().st_size
    flip_byte(path, {"start": 0, "middle": size // 2, "end": size - 1}[where])
    with pytest.raises(ModelError) as err:
        open_inferencer(spec, backend=backend)
    assert err.value.code == "E_MODEL_CORRUPT"
    assert path.name in err.value.message


def test_flipped_openvino_xml_is_corrupt(tmp_path):
    models = copy_models(tmp_path)
    spec = load_model_spec(models)
    flip_byte(models / spec.files["openvino_xml"], 100)
    with pytest.raises(ModelError) as err:
        open_inferencer(spec, backend="openvino")
    assert err.value.code == "E_MODEL_CORRUPT"


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_missing_weights_file(tmp_path, backend):
    models = copy_models(tmp_path)
    spec = load_model_spec(models)
    (models / spec.files[WEIGHTS_KEY[backend]]).unlink()
    with pytest.raises(ModelError) as err:
        open_inferencer(spec, backend=backend)
    assert err.value.code == "E_MODEL_MISSING"


def test_missing_manifest(tmp_path):
    models = copy_models(tmp_path)
    (models / MANIFEST).unlink()
    with pytest.raises(ModelError) as err:
        load_model_spec(models)
    assert err.value.code == "E_MODEL_MISSING"
    assert MANIFEST in err.value.message


def test_scorer_without_manifest_raises(tmp_path):
    from vqa import Scorer

    with pytest.raises(ModelError) as err:
        Scorer(model_dir=tmp_path)
    assert err.value.code == "E_MODEL_MISSING"


def test_unreadable_manifest_is_corrupt(tmp_path):
    models = copy_models(tmp_path)
    (models / MANIFEST).write_text("{ not json")
    with pytest.raises(ModelError) as err:
        load_model_spec(models)
    assert err.value.code == "E_MODEL_CORRUPT"


def test_manifest_sha_mismatch_is_corrupt(tmp_path):
    """A manifest that names a different digest rejects the (intact) weights."""
    models = copy_models(tmp_path)
    data = json.loads((models / MANIFEST).read_text())
    data["sha256"]["pytorch"] = "0" * 64
    (models / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ModelError) as err:
        open_inferencer(load_model_spec(models), backend="pytorch")
    assert err.value.code == "E_MODEL_CORRUPT"


def test_unknown_backend(spec):
    with pytest.raises(UsageError) as err:
        open_inferencer(spec, backend="nope")
    assert "openvino" in err.value.message and "pytorch" in err.value.message


def test_scorer_unknown_backend():
    from vqa import Scorer

    with pytest.raises(UsageError):
        Scorer(backend="nope")


def test_openvino_path_never_imports_torch():
    code = ("import sys, numpy as np, vqa\n"
            "with vqa.Scorer(backend='openvino') as s:\n"
            "    s.inferencer.infer(np.zeros((1, 224, 224, 3), np.uint8))\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_precision_the_backend_cannot_run_is_a_usage_error(spec):
    with pytest.raises(UsageError):
        open_inferencer(spec, backend="pytorch", precision="int8")


def test_new_weights_at_the_same_path_are_not_served_from_the_compile_cache(tmp_path, monkeypatch):
    # OpenVINO's compile cache keys a model read from a file on its path and size: weights
    # replaced in place by others of the same shape (a model upgrade) must still be the ones run.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models = tmp_path / "models"
    shutil.copytree(default_model_dir(), models)
    views = np.random.default_rng(0).integers(0, 256, (2, VIEW, VIEW, 3), dtype=np.uint8)
    before = open_inferencer(load_model_spec(models), backend="openvino", threads=1)
    first = before.infer(views)
    before.close()

    manifest = json.loads((models / MANIFEST).read_text())
    weights = models / manifest["files"]["openvino_bin"]
    blob = np.frombuffer(weights.read_bytes(), dtype=np.uint8).copy()
    floats = blob[: blob.size // 4 * 4].view(np.float32)
    floats *= np.float32(0.9)  # other weights, the same size and path
    weights.write_bytes(blob.tobytes())
    manifest["sha256"]["openvino_bin"] = hashlib.sha256(blob.tobytes()).hexdigest()
    (models / MANIFEST).write_text(json.dumps(manifest))

    after = open_inferencer(load_model_spec(models), backend="openvino", threads=1)
    second = after.infer(views)
    after.close()
    assert not np.allclose(first, second, atol=1e-3)


def _cpu_has_bf16() -> bool:
    import openvino as ov
    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def test_bf16_is_near_fp32_where_the_cpu_has_it_and_refused_where_not(spec, real_views):
    """--precision bf16: the fp32 IR in bfloat16. On a CPU with the instructions the scores stay
    within a point of fp32's; on one without, E_BACKEND (never fp32 under bf16's name)."""
    from vqa.errors import BackendUnavailable
    if not _cpu_has_bf16():
        with pytest.raises(BackendUnavailable) as e:
            open_inferencer(spec, backend="openvino", precision="bf16", threads=2)
        assert "bfloat16" in str(e.value)
        return
    fp32 = open_inferencer(spec, backend="openvino", precision="fp32", threads=2)
    bf16 = open_inferencer(spec, backend="openvino", precision="bf16", threads=2)
    try:
        a, b = fp32.infer(real_views), bf16.infer(real_views)
    finally:
        fp32.close()
        bf16.close()
    assert np.abs(a[:, 0] - b[:, 0]).max() <= 1.0
    assert not np.array_equal(a, b)  # bfloat16 arithmetic did run: fp32 would give the same numbers


def test_bf16_where_openvino_falls_back_to_fp32_is_refused(spec, monkeypatch):
    from vqa.errors import BackendUnavailable
    from vqa.infer import openvino as ov_backend
    monkeypatch.setattr(ov_backend, "_runs_bf16", lambda compiled: False)
    with pytest.raises(BackendUnavailable) as e:
        open_inferencer(spec, backend="openvino", precision="bf16", threads=2)
    assert e.value.code == "E_BACKEND" and "fp32 or int8" in str(e.value)


def test_openvino_submit_of_views_that_are_not_contiguous(spec, real_views):
    """submit() returns before OpenVINO reads the views; views that are a strided slice (ring
    rows wider than a view) are copied first, and that copy must live until the request is done.
    Memory freed meanwhile is taken and scribbled over here, as the next batch would."""
    with open_inferencer(spec, backend="openvino", precision="fp32", mode="throughput") as ov:
        batches = [np.roll(real_views[:4], k, axis=0) for k in range(8)]
        expect = [ov.infer(b) for b in batches]
        wide = [np.zeros((4, VIEW, VIEW, 6), np.uint8) for _ in batches]
        got: dict[int, object] = {}
        for i, (w, b) in enumerate(zip(wide, batches)):
            w[..., :3] = b
            ov.submit(w[..., :3], lambda out, i=i: got.__setitem__(i, out))
            scribble = [np.full(b.shape, 255, np.uint8) for _ in range(4)]  # noqa: F841 - takes the freed memory
        ov.wait()
    assert sorted(got) == list(range(len(batches)))
    for i, e in enumerate(expect):
        np.testing.assert_allclose(got[i], e, atol=1e-4)

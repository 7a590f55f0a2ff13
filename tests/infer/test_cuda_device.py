"""The cuda backend on a GPU. NOT RUN IN CI, and not run on the development machine either:
neither has a CUDA device, so every test here is skipped there with the reason "no CUDA
device". As of the branch that added them (issue 20) they have never run on a GPU: the
device budget was spent before they could. On a GPU machine:

    PYTHONPATH=$PWD python -m pytest -q tests/infer/test_cuda_device.py
    PYTHONPATH=$PWD python scripts/bench/gpu_check.py --out gpu_check.json   # records and views/s

Tolerances are issue 20's: fp32 within 0.1 score points of the CPU, fp16 within 1.0 on mean.
"""
from __future__ import annotations

import numpy as np
import pytest

from vqa.infer import cuda_available, open_inferencer
from vqa.model import load_model_spec

pytestmark = pytest.mark.skipif(not cuda_available(), reason="no CUDA device")

FP32_POINTS = 0.1
FP16_MEAN_POINTS = 1.0


def same_rows_tol(gpu) -> float:
    """Rows run in different buckets may get different kernels: fp32 agrees to rounding,
    fp16 to its own rounding (an assumption to confirm on the device)."""
    return 0.01 if gpu.precision == "fp32" else 0.5


@pytest.fixture(scope="module")
def spec():
    return load_model_spec()


@pytest.fixture(scope="module")
def views(scene):
    from vqa.preprocess import fragments

    return np.stack([fragments(f) for f in scene[::4]])


@pytest.fixture(scope="module")
def cpu_outputs(spec, views):
    with open_inferencer(spec, backend="pytorch", precision="fp32") as cpu:
        return cpu.infer(views)


@pytest.fixture(scope="module", params=["fp32", "fp16"])
def gpu(request, spec):
    with open_inferencer(spec, backend="cuda", precision=request.param) as inferencer:
        yield inferencer


def test_scores_match_the_cpu_within_the_precisions_tolerance(gpu, views, cpu_outputs):
    diff = np.abs(gpu.infer(views)[:, 0] - cpu_outputs[:, 0])
    if gpu.precision == "fp32":
        assert diff.max() <= FP32_POINTS
    else:
        assert diff.mean() <= FP16_MEAN_POINTS


@pytest.mark.parametrize("n", [1, 5, 33, 600])  # bucket 1, padded 8, padded 128, 512 + 128
def test_padding_and_chunking_change_no_row(gpu, views, cpu_outputs, n):
    x = np.resize(views, (n, *views.shape[1:]))
    got = gpu.infer(x)
    assert got.shape == (n, cpu_outputs.shape[1]) and got.dtype == np.float32
    one_by_one = np.concatenate([gpu.infer(x[i:i + 1]) for i in range(min(n, 12))])
    np.testing.assert_allclose(got[:len(one_by_one)], one_by_one, atol=same_rows_tol(gpu))


def test_submit_gives_each_batch_its_own_rows_in_any_interleaving(gpu, views):
    x = np.resize(views, (300, *views.shape[1:]))
    whole = gpu.infer(x)
    got: dict[int, object] = {}
    for i in range(0, 300, 30):
        batch = x[i:i + 30].copy()
        gpu.submit(batch, lambda out, i=i: got.__setitem__(i, out))
        batch[:] = 0  # submit() returned: the views are in pinned memory, the caller may reuse them
    gpu.wait()
    assert sorted(got) == list(range(0, 300, 30))
    np.testing.assert_allclose(np.concatenate([got[i] for i in sorted(got)]), whole, atol=same_rows_tol(gpu))


def test_a_bad_shape_reaches_done_as_an_error(gpu):
    errors = []
    gpu.submit(np.zeros((2, 10, 10, 3), np.uint8), errors.append)
    gpu.wait()
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


def test_submit_rows_finishes_mosaics_on_the_gpu_as_the_workers_would(gpu):
    """Ring rows as a worker leaves them for cuda (vqa.preprocess.cut): 720p and 576p mosaics
    and a 360p view in one batch. The views the GPU makes are the workers' (vqa.infer.finish
    is exact), so the outputs are those of infer() on the workers' views."""
    import cv2

    from tests.infer.test_finish_views import rows_of
    from vqa.preprocess import fragments

    base = [cv2.resize(f, (1280, 720), interpolation=cv2.INTER_AREA) for f in _frames(6)]
    frames = base[:3] + [cv2.resize(f, (1024, 576), interpolation=cv2.INTER_AREA) for f in base[3:5]]
    frames += [cv2.resize(base[5], (640, 360), interpolation=cv2.INTER_AREA)]
    rows, cuts = rows_of(frames)
    assert sorted(set(cuts)) == [0, 34, 43]
    expect = gpu.infer(np.stack([fragments(f) for f in frames]))
    got: list = []
    for _ in range(3):  # pinned buffers and device rows reused
        gpu.submit_rows(rows, cuts, got.append)
    gpu.wait()
    assert len(got) == 3 and all(not isinstance(g, BaseException) for g in got)
    for g in got:
        np.testing.assert_allclose(g, expect, atol=same_rows_tol(gpu))


@pytest.mark.parametrize("tf32", [False, True], ids=["float32", "float64"])
def test_the_gpu_finisher_gives_opencvs_views_bit_for_bit(tf32):
    """vqa.infer.finish on the GPU (cuBLAS sums, CUDA's division by a reciprocal), for every
    region of 33 to 47 px, on noise and on smooth frames: the views are OpenCV's, byte for byte.
    With TF32 allowed the finish runs in float64."""
    import cv2
    import torch

    from tests.infer.test_finish_views import rows_of
    from vqa.infer.finish import ViewFinisher
    from vqa.preprocess import TRAINING, VIEW, fragments

    rng = np.random.default_rng(8)
    frames = []
    for h in range(560, 812, 16):  # regions 33 to 48
        noise = rng.integers(0, 256, (h, h * 16 // 9, 3), dtype=np.uint8)
        frames += [noise, cv2.GaussianBlur(noise, (0, 0), 2.0)]
    rows, cuts = rows_of(frames)
    assert len(set(cuts)) >= 15
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        out = torch.zeros((len(frames), VIEW, VIEW, 3), dtype=torch.uint8, device="cuda")
        ViewFinisher(TRAINING, "cuda")(torch.from_numpy(rows).cuda(), cuts, out)
        got = out.cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    for i, f in enumerate(frames):
        assert np.array_equal(got[i], fragments(f)), f"frame {i}, region {cuts[i]}"


def test_rows_from_pinned_memory_are_read_where_they_lie(gpu):
    """``pin`` (as the pool engine pins its ring): rows are copied to the GPU from their own
    memory, with no staging; the outputs are those of staged rows. Each slot of the ring holds
    other frames, so a copy from the wrong place or a slot read after another batch's fill
    shows. Withdrawn, the same memory is staged again."""
    import cv2

    from tests.infer.test_finish_views import rows_of

    frames = [cv2.resize(f, (1280, 720), interpolation=cv2.INTER_AREA) for f in _frames(8)]
    rows, cuts = rows_of(frames)
    ring = np.zeros((4, *rows.shape), np.uint8)  # four slots of 8 rows: frames rolled per slot
    for k in range(len(ring)):
        ring[k] = np.roll(rows, k, axis=0)
    expect = []
    for k in range(len(ring)):
        got: list = []
        gpu.submit_rows(np.ascontiguousarray(ring[k]), cuts, got.append)  # a copy: staged
        gpu.wait()
        expect.append(got[0])
    unpin = gpu.pin(ring)
    try:
        assert gpu._is_pinned(ring[2]) and not gpu._is_pinned(rows)
        out: dict = {}
        for rounds in range(3):
            for k in range(len(ring)):
                gpu.submit_rows(ring[k], cuts, lambda o, k=k, r=rounds: out.setdefault((r, k), o))
        gpu.wait()
    finally:
        unpin()
    assert not gpu._is_pinned(ring[2])
    for (_, k), o in out.items():
        assert not isinstance(o, BaseException), o
        np.testing.assert_allclose(o, expect[k], atol=same_rows_tol(gpu))
    assert len(out) == 3 * len(ring)


def _frames(n):
    from tests.support.clips import textured_frames

    return list(textured_frames(n, 810, 1440, seed=4))

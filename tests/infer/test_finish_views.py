"""Views finished by the inferencer (issue 20): a decode worker may leave a frame's mosaic of
regions in its ring row (``vqa.preprocess.cut``) and the inferencer resamples it, on the GPU
for ``--backend cuda``. The views, and so the records, must be the ones the workers make."""
from __future__ import annotations

import numpy as np
import pytest

import vqa.batch
import vqa.infer
from tests.support.clips import textured_frames, write_clip
from tests.infer.test_preprocess import picture
from vqa import Scorer
from vqa.batch import BatchRing
from vqa.errors import ResourceError
from vqa.infer import MOSAIC_MAX_REGION
from vqa.preprocess import PATCH, TRAINING, VIEW, area_weights, cut, finish_views, fragments, patch_layout

SIDE = TRAINING.grid * MOSAIC_MAX_REGION


def rows_of(frames, max_region=MOSAIC_MAX_REGION):
    rows, cuts = np.zeros((len(frames), SIDE * SIDE * 3), np.uint8), []
    for i, rgb in enumerate(frames):
        pixels, region = cut(rgb, TRAINING, max_region)
        rows[i, :pixels.size] = pixels.reshape(-1)
        cuts.append(region)
    return rows, cuts


# Short sides of 560 to 810 px leave a mosaic (regions of 33 to 48 px), odd and even regions.
MOSAIC_SIZES = [(1280, 720), (720, 1280), (1024, 576), (800, 600), (1000, 700), (1366, 768), (1440, 810)]


@pytest.mark.parametrize("width,height", MOSAIC_SIZES)
def test_a_mosaic_is_left_where_its_regions_are_larger_than_a_patch(width, height):
    rgb = picture(width, height)
    pixels, region = cut(rgb, TRAINING, MOSAIC_MAX_REGION)
    assert region == patch_layout(height, width).region and PATCH < region <= MOSAIC_MAX_REGION
    assert pixels.shape == (TRAINING.grid * region, TRAINING.grid * region, 3)
    view, none = cut(rgb, TRAINING)  # the default: the view itself
    assert none == 0 and np.array_equal(view, fragments(rgb))


@pytest.mark.parametrize("width,height", [(640, 360), (960, 540), (1920, 1080), (3840, 2160), (200, 100)])
def test_other_frames_are_cut_into_their_view_as_before(width, height):
    """At or under the working scale there is nothing to resample; at 1080p and up the region
    is past MOSAIC_MAX_REGION (and 1080p's factor of 2 is OpenCV's fast path anyway)."""
    rgb = picture(width, height)
    view, region = cut(rgb, TRAINING, MOSAIC_MAX_REGION)
    assert region == 0 and np.array_equal(view, fragments(rgb))


def test_finish_views_on_the_cpu_gives_the_workers_views():
    frames = [picture(w, h) for w, h in MOSAIC_SIZES] + [picture(640, 360), picture(1920, 1080)]
    rows, cuts = rows_of(frames)
    assert cuts.count(0) == 2
    assert np.array_equal(finish_views(rows, cuts), np.stack([fragments(f) for f in frames]))


def test_area_weights_are_opencvs():
    import cv2

    for region in (33, 43, 48, 64):
        w = area_weights(region)
        assert w.shape == (PATCH, region) and np.allclose(w.sum(axis=1), 1.0)
        ramp = np.arange(region, dtype=np.float32)[None, :].repeat(4, 0)
        expect = cv2.resize(ramp, (PATCH, 4), interpolation=cv2.INTER_AREA)[0]
        assert np.allclose(w @ np.arange(region), expect, atol=1e-4)


def test_the_devices_finisher_gives_the_workers_views_bit_for_bit():
    """vqa.infer.finish is the code vqa.infer.cuda runs on the GPU; torch on the CPU here. Real
    frames (a textured clip's, at each size) and mixed batches: views and mosaics of two sizes."""
    torch = pytest.importorskip("torch")
    from vqa.infer.finish import ViewFinisher

    base = textured_frames(3, 810, 1440, seed=3)
    import cv2

    frames = [cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in base for w, h in MOSAIC_SIZES[:4]]
    frames += [picture(640, 360)]
    rows, cuts = rows_of(frames)
    out = torch.zeros((len(frames), VIEW, VIEW, 3), dtype=torch.uint8)
    ViewFinisher(TRAINING)(torch.from_numpy(rows), cuts, out)
    assert len(set(cuts)) >= 4  # mosaics of several region sizes and a view, in one batch
    assert np.array_equal(out.numpy(), np.stack([fragments(f) for f in frames]))


def _scores(paths, **options):
    with Scorer(workers=2, threads=1, **options) as scorer:
        return [r.to_dict() for r in scorer.score_many(paths)]


def _comparable(record):
    return {k: record[k] for k in ("path", "status", "score", "category", "defects", "frames", "error")}


@pytest.mark.slow
def test_records_are_the_same_when_the_inferencer_finishes_the_views(tmp_path, monkeypatch):
    """The pool engine with a ring of mosaic rows (as for cuda; here openvino, whose base
    ``submit_rows`` finishes on the CPU) gives the records of the ring of views, on a 720p clip
    (mosaics) and a 360p one (views) in one job. Then the same when the larger ring does not
    fit: it falls back to a ring of views."""
    paths = [str(tmp_path / "a720.mp4"), str(tmp_path / "b360.mp4")]
    write_clip(paths[0], textured_frames(12, 720, 1280, seed=5), fps=12)
    write_clip(paths[1], textured_frames(12, 360, 640, seed=6), fps=12)
    before = _scores(paths, frames="all", batch_size=4)
    rings = []
    real_ring = BatchRing

    def spy(**kw):
        rings.append(kw.get("mosaic_side", 0))
        return real_ring(**kw)

    monkeypatch.setattr(vqa.batch, "BatchRing", spy)
    monkeypatch.setattr(vqa.infer, "RESAMPLING_BACKENDS", ("openvino",))
    after = _scores(paths, frames="all", batch_size=4)
    assert rings == [SIDE]
    assert [_comparable(r) for r in after] == [_comparable(r) for r in before]
    assert all(r["status"] == "ok" for r in after)

    def no_room(**kw):
        rings.append(kw.get("mosaic_side", 0))
        if kw.get("mosaic_side"):
            raise ResourceError("no room")
        return real_ring(**kw)

    monkeypatch.setattr(vqa.batch, "BatchRing", no_room)
    rings.clear()
    fallback = _scores(paths, frames="all", batch_size=4)
    assert rings == [SIDE, 0]
    assert [_comparable(r) for r in fallback] == [_comparable(r) for r in before]


def test_the_pool_engine_pins_its_ring_and_withdraws_it_before_the_ring_goes(tmp_path, monkeypatch):
    """The ring is offered to the inferencer once (CUDA registers it and copies rows straight
    from it) and withdrawn after the last batch, before its memory is unmapped."""
    from vqa.infer.base import Inferencer

    events: list = []
    real_close = BatchRing.close

    def pin(self, buffer):
        events.append(("pin", buffer.nbytes))
        return lambda: events.append(("unpin",))

    def close(ring):
        if ring._shm is not None:
            events.append(("close",))
        real_close(ring)

    monkeypatch.setattr(Inferencer, "pin", pin)
    monkeypatch.setattr(BatchRing, "close", close)
    path = str(tmp_path / "a.mp4")
    write_clip(path, textured_frames(8, 360, 640, seed=7), fps=8)
    with Scorer(workers=1, threads=1, batch_size=4) as scorer:
        record = scorer.score(path)
        ring = scorer._engine.ring
        size = ring.spec.slots * ring.spec.slot_bytes
    assert record.status == "ok"
    assert events == [("pin", size), ("unpin",), ("close",)]


def test_no_region_leaves_an_output_half_way_between_two_integers():
    """vqa.infer.finish divides exact integer sums by region² and rounds: it relies on every
    quotient being an integer over an odd number, whatever the rounding of the division."""
    import math

    for region in range(PATCH + 1, MOSAIC_MAX_REGION + 1):
        k = np.rint(area_weights(region) * region)
        assert np.allclose(k, area_weights(region) * region)  # integer weights
        g = math.gcd(*k.astype(int).ravel().tolist())
        assert (region * region // math.gcd(region * region, g * g)) % 2 == 1, region

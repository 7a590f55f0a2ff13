"""Fragments at the working scale: the same picture gives the same view at any resolution,
and no frame shape makes the preprocessor allocate more than its 49 patches."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from vqa.preprocess import GRID, PATCH, THUMB, TRAINING, VIEW, WORK_SHORT_SIDE, fragments, frame_stats, working_scale


def picture(width: int, height: int) -> np.ndarray:
    """A smooth-plus-edges test picture, drawn at 2160p and area-shrunk to the size asked."""
    rng = np.random.default_rng(1)
    big = cv2.resize(rng.integers(0, 256, (27, 48, 3), dtype=np.uint8), (3840, 2160), interpolation=cv2.INTER_CUBIC)
    for _ in range(40):
        c = tuple(int(v) for v in rng.integers(0, 3840, 2) % (3840, 2160))
        cv2.circle(big, c, int(rng.integers(20, 300)), tuple(int(v) for v in rng.integers(0, 256, 3)), -1, cv2.LINE_AA)
    return big if width == 3840 else cv2.resize(big, (width, height), interpolation=cv2.INTER_AREA)


def test_working_scale_never_enlarges_a_frame_that_holds_a_view():
    assert working_scale(360, 640) == 1.0
    assert working_scale(WORK_SHORT_SIDE, 960) == 1.0
    assert working_scale(2160, 3840) == pytest.approx(WORK_SHORT_SIDE / 2160)
    assert working_scale(100, 100) == pytest.approx(VIEW / 100)  # too small for a view: enlarged


def test_same_picture_gives_the_same_view_at_720p_1080p_and_2160p():
    views = [fragments(picture(w, h)).astype(np.int16) for w, h in ((1280, 720), (1920, 1080), (3840, 2160))]
    for v in views[1:]:
        assert np.abs(v - views[0]).mean() < 3.0  # grey levels, of 255
    # at native resolution the 2160p patches would hold a quarter of the picture a 720p patch holds
    native = picture(3840, 2160)[:PATCH, :PATCH]
    assert np.abs(native.astype(np.int16) - views[0][:PATCH, :PATCH]).mean() > 3.0


@pytest.mark.parametrize("shape", [(1, 8192), (8192, 1), (1, 65535), (3, 3), (4320, 7680)])
def test_any_shape_gives_one_view(shape):
    rgb = np.random.default_rng(0).integers(0, 256, shape + (3,), dtype=np.uint8)
    view = fragments(rgb)
    assert view.shape == (VIEW, VIEW, 3) and view.dtype == np.uint8


def test_training_offsets_move_patches_inside_their_cells():
    rgb = picture(1920, 1080)
    centre = fragments(rgb)
    corner = fragments(rgb, np.zeros((7, 7, 2)))
    assert not np.array_equal(centre, corner)
    assert np.array_equal(fragments(rgb), centre)  # inference is deterministic


def fragments_one_patch_at_a_time(rgb: np.ndarray, offsets=None, geometry=TRAINING) -> np.ndarray:
    """The view as the rule states it: each patch resampled from its own region on its own."""
    grid, patch, view = geometry.grid, geometry.patch, geometry.view
    h, w = rgb.shape[:2]
    s = working_scale(h, w, geometry)
    ys, xs = np.linspace(0, h * s, grid + 1), np.linspace(0, w * s, grid + 1)
    region = max(1, round(patch / s))
    out = np.empty((view, view, 3), np.uint8)
    for i in range(grid):
        for j in range(grid):
            oy, ox = (0.5, 0.5) if offsets is None else offsets[i, j]
            y = min(max(0, int((ys[i] + (ys[i + 1] - ys[i] - patch) * oy) / s)), max(0, h - region))
            x = min(max(0, int((xs[j] + (xs[j + 1] - xs[j] - patch) * ox) / s)), max(0, w - region))
            cut = rgb[y:y + region, x:x + region]
            if cut.shape[:2] != (patch, patch):
                cut = cv2.resize(cut, (patch, patch), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
            out[i * patch:(i + 1) * patch, j * patch:(j + 1) * patch] = cut
    return out


@pytest.mark.parametrize("height, width", [
    (720, 1280), (1080, 1920), (2160, 3840), (600, 1066), (777, 1313), (1920, 1080), (544, 1280), (541, 960),
    (360, 640), (200, 300), (16, 900), (576, 720)])
def test_the_view_is_the_one_a_resize_per_patch_gives(height, width):
    # fragments() resamples all patches in one mosaic where it can (issue 18): bit for bit the same.
    rng = np.random.default_rng(height * width)
    rgb = cv2.GaussianBlur(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), (5, 5), 1.5)
    for offsets in (None, rng.uniform(0, 1, (GRID, GRID, 2))):
        assert np.array_equal(fragments(rgb, offsets), fragments_one_patch_at_a_time(rgb, offsets))


@pytest.mark.parametrize("height, width", [(720, 1280), (1078, 1918), (97, 131), (1, 5), (5, 1), (3, 3)])
def test_frame_stats_are_those_of_the_subsampled_frame(height, width):
    # frame_stats makes every fourth row grey and keeps every fourth pixel of it (issue 20):
    # the same numbers as making grey the frame subsampled first, the rule the thresholds
    # were chosen with; also for a view that is not contiguous (a crop, a rotated frame).
    rng = np.random.default_rng(height + width)
    big = rng.integers(0, 256, (height + 2, width + 3, 3), dtype=np.uint8)
    for rgb in (np.ascontiguousarray(big[1:-1, 2:-1]), big[1:-1, 2:-1], np.rot90(big)[:width, :height]):
        grey = cv2.cvtColor(np.ascontiguousarray(rgb[::4, ::4]), cv2.COLOR_RGB2GRAY)
        stats = frame_stats(rgb)
        assert stats.luma_mean == pytest.approx(float(grey.mean()), abs=1e-9)
        assert stats.luma_p98 == float(np.percentile(grey, 98, method="inverted_cdf"))
        assert stats.luma_p50 == float(np.percentile(grey, 50, method="inverted_cdf"))
        assert np.array_equal(stats.thumb, cv2.resize(grey, THUMB, interpolation=cv2.INTER_AREA))

"""Frames -> network input views ("fragments") and the cheap per-frame statistics.

Why fragments: shrinking a 1080p frame to 224 px erases exactly what technical quality is
made of (blur, noise, blocking, ringing). Following FAST-VQA and DOVER, each frame is cut
into a GRID x GRID grid of cells and one PATCH x PATCH patch is taken from every cell; the
patches are stitched into one GRID*PATCH square image. The network's stride is 32 = PATCH,
so each patch maps onto one cell of its final feature map.

Why a working scale: patches are cut from the frame as it would look with its short side at
most WORK_SHORT_SIDE pixels (area resampling), not at native resolution. A camera's 4K frame
is softer per pixel than its 720p downscale, so native 4K patches looked blurred to the
network although the picture is the same; at the working scale 720p, 1080p and 2160p of one
picture give the same view. Frames at or under the working scale are cut at native
resolution, and frames under VIEW px on their short side are enlarged so that every cell can
hold a patch. Each patch is resampled from its own region of the frame, so the work and
memory are those of 49 patches whatever the frame's size or shape.

OpenCV is imported by the functions that use it: the parent of the decode workers needs the
geometry and the stats' type from here, not OpenCV (issue 18, start-up).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

GRID = 7
PATCH = 32
VIEW = GRID * PATCH  # 224
# Frames are judged as they would look with their short side at most this many pixels.
WORK_SHORT_SIDE = 540
THUMB = (128, 72)  # width, height of the grey thumbnail used for freeze detection


@dataclass(frozen=True)
class Geometry:
    """How a frame becomes a view: a model's preprocessing, from the ``input`` block of its
    manifest (vqa.model). ``TRAINING`` is what scripts/ train with and export.py writes there."""

    grid: int = GRID
    patch: int = PATCH
    work_short_side: int = WORK_SHORT_SIDE

    @property
    def view(self) -> int:
        return self.grid * self.patch


TRAINING = Geometry()


@dataclass
class FrameStats:
    """What the frozen/black detectors need from a frame, computed where the frame is.

    ``vqa.aggregate.FreezeChain`` fills ``mad_prev`` and then drops the thumbnail of every
    frame but the first and last of a read, so memory does not grow with the frame count.
    """

    luma_mean: float  # 0..255
    luma_p98: float  # 98th percentile of luma, 0..255
    thumb: np.ndarray | None  # THUMB-sized uint8 grey image
    mad_prev: float | None = None  # thumbnail difference to the frame read just before it
    luma_p50: float | None = None  # median luma, 0..255 (None: not measured)


def working_scale(height: int, width: int, geometry: Geometry = TRAINING) -> float:
    """Factor from native pixels to working-scale pixels: at most 1, except for frames too
    small to hold a VIEW x VIEW view, which are enlarged."""
    short = min(height, width)
    return max(min(1.0, geometry.work_short_side / short), geometry.view / short)


@dataclass(frozen=True)
class PatchLayout:
    """Where a frame's patches come from: patch (i, j) is the region x region square of native
    pixels at top-left (y, x), one ``(i, j, y, x)`` in ``corners``, resampled to PATCH x PATCH.
    ``mosaic``: every region is whole and square, so all may be resampled in one mosaic."""

    corners: tuple[tuple[int, int, int, int], ...]
    region: int
    scale: float
    mosaic: bool


def patch_layout(height: int, width: int, offsets: np.ndarray | None = None,
                 geometry: Geometry = TRAINING) -> PatchLayout:
    """The patch regions of a ``height`` x ``width`` frame (see ``fragments``)."""
    if offsets is None:
        return _centred_layout(height, width, geometry)
    return _layout(height, width, offsets, geometry)


def _layout(h: int, w: int, offsets: np.ndarray | None, geometry: Geometry) -> PatchLayout:
    grid, patch = geometry.grid, geometry.patch
    s = working_scale(h, w, geometry)
    ys = np.linspace(0, h * s, grid + 1)
    xs = np.linspace(0, w * s, grid + 1)
    side = patch / s  # a patch's side in native pixels
    region = max(1, round(side))
    corners = []
    for i in range(grid):
        for j in range(grid):
            oy, ox = (0.5, 0.5) if offsets is None else offsets[i, j]
            # top-left corner in native pixels, kept inside the frame
            y = min(max(0, int((ys[i] + (ys[i + 1] - ys[i] - patch) * oy) / s)), max(0, h - region))
            x = min(max(0, int((xs[j] + (xs[j + 1] - xs[j] - patch) * ox) / s)), max(0, w - region))
            corners.append((i, j, y, x))
    mosaic = s <= 1 and region <= min(h, w) and (region == patch or patch & (patch - 1) == 0)
    return PatchLayout(tuple(corners), region, s, mosaic)


@functools.lru_cache(maxsize=32)
def _centred_layout(h: int, w: int, geometry: Geometry) -> PatchLayout:
    # Inference cuts every frame of a video the same way: worked out once, not per frame
    # (0.2 ms a frame, a fifth of cutting the view at 720p; issue 20).
    return _layout(h, w, None, geometry)


def fragments(rgb: np.ndarray, offsets: np.ndarray | None = None, geometry: Geometry = TRAINING) -> np.ndarray:
    """Assemble the VIEW x VIEW x 3 uint8 fragment view of one RGB frame.

    ``offsets`` (GRID, GRID, 2) in [0, 1] place each patch inside its cell (y, x); None puts
    every patch at its cell's centre, which is what inference uses (deterministic). Training
    draws random offsets as augmentation. ``geometry``: the model's (vqa.model.ModelSpec).
    """
    h, w = rgb.shape[:2]
    return _cut(rgb, patch_layout(h, w, offsets, geometry), geometry)


def cut(rgb: np.ndarray, geometry: Geometry = TRAINING, max_region: int = 0) -> tuple[np.ndarray, int]:
    """Inference's cut of one frame: ``(view, 0)``, or ``(mosaic, region)`` where the view's
    last step is left to the inferencer. ``max_region`` > 0 leaves it where the frame's regions
    are larger than a patch and at most ``max_region`` pixels: ``mosaic`` is the GRID*region
    square of the regions side by side, and ``finish_views`` (or its copy on the device, in
    vqa.infer.cuda) area-resamples it by region -> PATCH into the view ``fragments`` gives.

    Why: that resampling is OpenCV's general area filter (a factor of 43/32 at 720p, 0.4 to
    0.7 ms of a decode worker's 4 to 5 ms a frame), and on a GPU it costs nothing (issue 20)."""
    h, w = rgb.shape[:2]
    layout = patch_layout(h, w, None, geometry)
    if max_region and layout.mosaic and geometry.patch < layout.region <= max_region:
        return _mosaic(rgb, layout, geometry.grid), layout.region
    return _cut(rgb, layout, geometry), 0


def _mosaic(rgb: np.ndarray, layout: PatchLayout, grid: int) -> np.ndarray:
    region = layout.region
    mosaic = np.empty((grid * region, grid * region, 3), np.uint8)
    for i, j, y, x in layout.corners:
        mosaic[i * region:(i + 1) * region, j * region:(j + 1) * region] = rgb[y:y + region, x:x + region]
    return mosaic


def _cut(rgb: np.ndarray, layout: PatchLayout, geometry: Geometry) -> np.ndarray:
    import cv2

    GRID, PATCH, VIEW = geometry.grid, geometry.patch, geometry.view  # noqa: N806 - the names above
    region = layout.region
    if layout.mosaic:
        # Every region is region x region: lay them side by side and resample the mosaic once.
        # Area resampling by region/PATCH (PATCH a power of two, so the factor and every pixel's
        # footprint are exact in floating point) keeps each output pixel inside one region, so
        # the view is the one a resize per patch gave, bit for bit (tests/infer/test_preprocess.py),
        # in about two thirds of the time (issue 18).
        mosaic = _mosaic(rgb, layout, GRID)
        return mosaic if region == PATCH else cv2.resize(mosaic, (VIEW, VIEW), interpolation=cv2.INTER_AREA)
    # Enlarged (bilinear would blend neighbouring regions in a mosaic), or a frame narrower
    # than a region: each patch on its own.
    interp = cv2.INTER_AREA if layout.scale < 1 else cv2.INTER_LINEAR
    out = np.empty((VIEW, VIEW, 3), np.uint8)
    for i, j, y, x in layout.corners:
        patch = rgb[y:y + region, x:x + region]
        if patch.shape[:2] != (PATCH, PATCH):
            patch = cv2.resize(patch, (PATCH, PATCH), interpolation=interp)
        out[i * PATCH:(i + 1) * PATCH, j * PATCH:(j + 1) * PATCH] = patch
    return out


def finish_views(rows: np.ndarray, cuts, geometry: Geometry = TRAINING) -> np.ndarray:
    """Views from ring rows as ``cut`` left them: row i holds the view (``cuts[i]`` == 0) or the
    mosaic of ``cuts[i]``-pixel regions, in its first bytes. (N, bytes) uint8 -> (N, V, V, 3)."""
    import cv2

    v = geometry.view
    out = np.empty((len(rows), v, v, 3), np.uint8)
    for i, region in enumerate(cuts):
        side = geometry.grid * region if region else v
        block = rows[i, :side * side * 3].reshape(side, side, 3)
        out[i] = cv2.resize(block, (v, v), interpolation=cv2.INTER_AREA) if region else block
    return out


def area_weights(region: int, patch: int = PATCH) -> np.ndarray:
    """(patch, region) float64: the weights of area resampling ``region`` pixels to ``patch``
    (OpenCV's INTER_AREA): output pixel o averages source pixels over [o, o + 1) * region /
    patch, each by its overlap. Applied along both axes of each region, they give OpenCV's view
    (tests/infer/test_preprocess.py): every weight is k / region and a multiple of gcd(region,
    patch) / region, so an output is an integer over an odd square for regions up to 63, never
    half-way between two integers, and rounds the same from any accurate sum
    (tests/infer/test_finish_views.py)."""
    scale = region / patch
    w = np.zeros((patch, region))
    for o in range(patch):
        a, b = o * scale, (o + 1) * scale
        for i in range(int(np.floor(a)), min(region, int(np.ceil(b)))):
            w[o, i] = (min(b, i + 1) - max(a, i)) / scale
    return w


def frame_stats(rgb: np.ndarray) -> FrameStats:
    # Everything comes from a 4x-subsampled grey copy: exact enough for black, exposure and
    # freeze decisions, and 1/16th of a full-frame pass (full-frame work here cost a fifth of
    # a worker's time at 1080p). Grey is per pixel, so every fourth row is made grey whole and
    # every fourth pixel kept from it: the same bytes as subsampling first, in a sixth of the
    # time (numpy's copy of a (H/4, W/4, 3) strided view cost 0.3 ms at 720p; issue 20).
    import cv2

    if rgb.strides[1:] != (3, 1):
        rgb = np.ascontiguousarray(rgb)
    grey = np.ascontiguousarray(cv2.cvtColor(rgb[::4], cv2.COLOR_RGB2GRAY)[:, ::4])
    counts = np.bincount(grey.ravel(), minlength=256)
    cumulative = np.cumsum(counts)
    p50, p98 = np.searchsorted(cumulative, (0.5 * grey.size, 0.98 * grey.size))
    mean = float(counts @ np.arange(256) / grey.size)
    thumb = cv2.resize(grey, THUMB, interpolation=cv2.INTER_AREA)
    return FrameStats(mean, float(p98), thumb, luma_p50=float(p50))

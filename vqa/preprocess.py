"""Frames -> network input views ("fragments") and the cheap per-frame statistics.

Why fragments: shrinking a 1080p frame to 224 px erases exactly what technical quality is
made of (blur, noise, blocking, ringing). Following FAST-VQA and DOVER, each frame is cut
into a GRID x GRID grid of cells and one PATCH x PATCH patch is taken from every cell at
native resolution; the patches are stitched into one GRID*PATCH square image. The network's
stride is 32 = PATCH, so each patch maps onto one cell of its final feature map. Coverage of
the whole frame comes from the grid; pixel-level detail from the native-resolution patches.

Frames smaller than the view (under 224 px on a side) are enlarged first so every cell can
hold a patch; such frames are rare and are also reported as low resolution by the model.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

GRID = 7
PATCH = 32
VIEW = GRID * PATCH  # 224
THUMB = (128, 72)  # width, height of the grey thumbnail used for freeze detection


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


def fragments(rgb: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """Assemble the VIEW x VIEW x 3 uint8 fragment view of one RGB frame.

    ``offsets`` (GRID, GRID, 2) in [0, 1] place each patch inside its cell (y, x); None puts
    every patch at its cell's centre, which is what inference uses (deterministic). Training
    draws random offsets as augmentation.
    """
    h, w = rgb.shape[:2]
    if min(h, w) < VIEW:
        s = VIEW / min(h, w)
        rgb = cv2.resize(rgb, (max(VIEW, round(w * s)), max(VIEW, round(h * s))),
                         interpolation=cv2.INTER_LINEAR)
        h, w = rgb.shape[:2]
    ys = np.linspace(0, h, GRID + 1)
    xs = np.linspace(0, w, GRID + 1)
    out = np.empty((VIEW, VIEW, 3), np.uint8)
    for i in range(GRID):
        for j in range(GRID):
            room_y = ys[i + 1] - ys[i] - PATCH
            room_x = xs[j + 1] - xs[j] - PATCH
            oy, ox = (0.5, 0.5) if offsets is None else offsets[i, j]
            y = int(ys[i] + room_y * oy)
            x = int(xs[j] + room_x * ox)
            out[i * PATCH:(i + 1) * PATCH, j * PATCH:(j + 1) * PATCH] = rgb[y:y + PATCH, x:x + PATCH]
    return out


def frame_stats(rgb: np.ndarray) -> FrameStats:
    # Everything comes from a 4x-subsampled grey copy: exact enough for black, exposure and
    # freeze decisions, and 1/16th of a full-frame pass (full-frame work here cost a fifth of
    # a worker's time at 1080p).
    grey = cv2.cvtColor(np.ascontiguousarray(rgb[::4, ::4]), cv2.COLOR_RGB2GRAY)
    counts = np.bincount(grey.ravel(), minlength=256)
    p98 = int(np.searchsorted(np.cumsum(counts), 0.98 * grey.size))
    mean = float(counts @ np.arange(256) / grey.size)
    thumb = cv2.resize(grey, THUMB, interpolation=cv2.INTER_AREA)
    return FrameStats(mean, float(p98), thumb)

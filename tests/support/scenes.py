"""The picture content of the test clips, as functions: a "dead leaves" scene and the
impairments the clips are made with (``CLIP_RECIPES``). conftest's fixtures encode them; tests
that need the frames themselves import them from here.

The scene is overlapping discs, boxes and text at sizes drawn from a power law, as in ISO
texture-loss charts: it has the edge statistics of a photograph, so the model, trained on
photographs, scores a lightly encoded clip of it about 77 with no fidelity defect (its
overexposed head still fires on a few frames: see test_pipeline). The noise texture of
``clips.textured_frames`` is no clean reference: the model scores it about 39 and reads it as
noise, blur and low resolution, which is fair for what it is.
"""
from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

FPS = 25
H, W = 360, 640
SCENE_FRAMES = 75  # 3 s; most clips use the first 50 (2 s)


def dead_leaves_frames(T: int, H: int, W: int, *, seed: int = 0, motion_px: int = 2,
                       leaves: int = 3000, grey: tuple[float, float] = (40, 200)) -> np.ndarray:
    """Deterministic (T,H,W,3) uint8 frames of a dead-leaves scene panned right-to-left.

    Drawn at twice the size with anti-aliased edges, then shrunk with area averaging, so the
    clean picture is as sharp as a downscaled photograph and has no aliasing.
    """
    rng = np.random.default_rng(seed)
    wide = W + motion_px * max(T - 1, 0)
    s = 2
    canvas = np.full((H * s, wide * s, 3), 110, np.uint8)
    r_min, r_max = 2 * s, 60 * s
    for _ in range(leaves):
        # radius density ~ r^-3 (scale invariant), drawn by inverting its CDF
        r = int(1 / np.sqrt(rng.random() * (1 / r_min**2 - 1 / r_max**2) + 1 / r_max**2))
        level = rng.uniform(*grey)
        colour = tuple(int(v) for v in np.clip(level + rng.normal(0, 25, 3), 0, 255))
        x, y = int(rng.integers(0, wide * s)), int(rng.integers(0, H * s))
        kind = rng.random()
        if kind < 0.5:
            cv2.circle(canvas, (x, y), r, colour, -1, cv2.LINE_AA)
        elif kind < 0.9:
            cv2.rectangle(canvas, (x - r, y - r // 2), (x + r, y + r // 2), colour, -1, cv2.LINE_AA)
        else:
            cv2.putText(canvas, "vqa 42", (x, y), cv2.FONT_HERSHEY_SIMPLEX, r / 40, colour,
                        max(1, r // 20), cv2.LINE_AA)
    canvas = cv2.resize(canvas, (wide, H), interpolation=cv2.INTER_AREA)
    return np.stack([canvas[:, t * motion_px:t * motion_px + W] for t in range(T)])


# --- impairments: (T,H,W,3) uint8 -> same shape uint8 ------------------------------------

def blur(frames: np.ndarray) -> np.ndarray:
    return np.stack([cv2.GaussianBlur(f, (0, 0), 4) for f in frames])


def noise(frames: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(1)  # a new field every frame
    return np.clip(frames + rng.normal(0, 25, frames.shape), 0, 255).astype(np.uint8)


def low_resolution(frames: np.ndarray) -> np.ndarray:
    h, w = frames.shape[1:3]
    return np.stack([cv2.resize(cv2.resize(f, (w // 4, h // 4), interpolation=cv2.INTER_AREA),
                                (w, h), interpolation=cv2.INTER_LINEAR) for f in frames])


def dark(frames: np.ndarray) -> np.ndarray:
    return (frames * 0.2).round().astype(np.uint8)


def overexposed(frames: np.ndarray) -> np.ndarray:
    return np.clip(frames.astype(np.float32) * 3, 0, 255).astype(np.uint8)


def frozen_middle(frames: np.ndarray) -> np.ndarray:
    """The middle third repeats its first frame."""
    out = frames.copy()
    a, b = len(out) // 3, 2 * len(out) // 3
    out[a:b] = out[a]
    return out


def black_end(frames: np.ndarray) -> np.ndarray:
    """The last third is all zeros."""
    out = frames.copy()
    out[2 * len(out) // 3:] = 0
    return out


def _same(frames):
    return frames


# name -> (impairment, number of frames, crf). Frozen and black clips are 3 s long so that
# the impaired third holds two whole sampling runs.
CLIP_RECIPES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int, int]] = {
    "clean": (_same, 50, 16),
    "blur": (blur, 50, 16),
    "noise": (noise, 50, 18),
    "compression": (_same, 50, 48),
    "low_resolution": (low_resolution, 50, 16),
    "dark": (dark, 50, 16),
    "overexposed": (overexposed, 50, 16),
    "frozen": (frozen_middle, SCENE_FRAMES, 16),
    "black": (black_end, SCENE_FRAMES, 16),
    **{f"crf{c}": (_same, 50, c) for c in (18, 30, 40, 48)},
}

"""The benchmark clip: textured, moving, natural-looking content encoded with x264.

The picture is one large canvas made once (smoothed noise at several scales over colour
gradients, with anti-aliased discs, boxes and lines at power-law sizes, as in a dead-leaves
chart), then every frame is a pan and slow zoom over it with one cv2.warpAffine, plus a few
shapes that move on their own. So rendering costs one warp per frame and the encoder sees
what it sees in real footage: global motion, detail at every scale, occlusion edges.
Deterministic for a given seed (x264 is deterministic for fixed options and thread count).
``scripts/bench/make_bench_clip.py`` writes one from the command line; ``vqa.bench.folder`` makes
its folders with it.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction

import av
import cv2
import numpy as np

CRF = 20
PRESET = "fast"
MARGIN = 1.6  # canvas size over frame size: room to pan and zoom out


def make_canvas(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A (height, width, 3) uint8 picture with detail from a few pixels up to the whole canvas."""
    ys = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    img = 0.35 * (ys * np.array([0.9, 0.6, 0.2], np.float32) + xs * np.array([0.1, 0.4, 0.8], np.float32))
    # Smoothed noise at octaves: small random fields enlarged with cubic interpolation.
    for cells, weight in ((4, 0.35), (16, 0.22), (64, 0.14), (256, 0.08)):
        small = rng.random((max(2, cells * height // width), cells, 3), dtype=np.float32)
        img += weight * (cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC) - 0.5)
    img = np.clip(img * 255 + 40, 0, 255).astype(np.uint8)
    # Dead leaves: radius density ~ r^-3, drawn by inverting its CDF.
    r_min, r_max = 3, max(8, min(width, height) // 10)
    for _ in range(width * height // 2500):
        r = int(1 / math.sqrt(rng.random() * (1 / r_min**2 - 1 / r_max**2) + 1 / r_max**2))
        colour = tuple(int(c) for c in rng.integers(20, 236, 3))
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        kind = rng.random()
        if kind < 0.55:
            cv2.circle(img, (x, y), r, colour, -1, cv2.LINE_AA)
        elif kind < 0.9:
            cv2.rectangle(img, (x - r, y - r // 2), (x + r, y + r // 2), colour, -1, cv2.LINE_AA)
        else:
            cv2.line(img, (x - 3 * r, y), (x + 3 * r, y + r), colour, max(1, r // 6), cv2.LINE_AA)
    # Film-like grain, mild, so flat areas are not perfectly flat.
    grain = rng.normal(0, 2, img.shape[:2]).astype(np.float32)[..., None]
    return np.clip(img + grain, 0, 255).astype(np.uint8)


def render(t: int, canvas: np.ndarray, size: tuple[int, int], sprites: np.ndarray,
           n_frames: int) -> np.ndarray:
    """Frame ``t``: a pan along a slow Lissajous path with a zoom breathing in and out."""
    w, h = size
    ch, cw = canvas.shape[:2]
    phase = 2 * math.pi * t / max(n_frames, 1)
    scale = 1.0 + 0.25 * (0.5 - 0.5 * math.cos(phase))  # canvas pixels per output pixel, 1..1.25
    room_x, room_y = cw - w * scale, ch - h * scale
    x0 = room_x * (0.5 + 0.45 * math.sin(phase))
    y0 = room_y * (0.5 + 0.45 * math.sin(2 * phase + 0.7))
    # Maps output pixels to canvas pixels (WARP_INVERSE_MAP): src = scale * dst + (x0, y0).
    m = np.array([[scale, 0, x0], [0, scale, y0]], np.float32)
    frame = cv2.warpAffine(canvas, m, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                           borderMode=cv2.BORDER_REFLECT)
    for k, (fx, fy, ax, ay, r, c0, c1, c2) in enumerate(sprites):  # objects moving on their own
        x = int(w * (fx + ax * math.sin(phase * (k + 1) + k)))
        y = int(h * (fy + ay * math.cos(phase * (k + 2) + k)))
        cv2.circle(frame, (x, y), int(r * h), (int(c0), int(c1), int(c2)), -1, cv2.LINE_AA)
    return frame


def write_bench_clip(path: str, *, frames: int = 720, size: tuple[int, int] = (1920, 1080),
                     fps: float = 24, gop: int = 48, seed: int = 0,
                     threads: int | None = None) -> None:
    threads = threads or os.cpu_count() or 1
    w, h = size
    rng = np.random.default_rng(seed)
    canvas = make_canvas(int(w * MARGIN), int(h * MARGIN), rng)
    sprites = np.column_stack([rng.uniform(0.2, 0.8, 6), rng.uniform(0.2, 0.8, 6),
                               rng.uniform(0.05, 0.2, 6), rng.uniform(0.05, 0.2, 6),
                               rng.uniform(0.02, 0.08, 6), rng.integers(0, 256, (6, 3))])
    with av.open(path, mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001),
                                      options={"crf": str(CRF), "preset": PRESET, "g": str(gop)})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        # FFmpeg's default for a library caller is one encoder thread; x264 scales with more.
        stream.codec_context.thread_count = threads
        for t in range(frames):
            rgb = render(t, canvas, size, sprites, frames)
            # OpenCV's I420 is BT.601 limited range, what an untagged yuv420p H.264 stream means.
            yuv = np.asarray(cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420), np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(yuv, format="yuv420p")))
        container.mux(stream.encode())

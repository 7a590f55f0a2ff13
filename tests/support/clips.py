"""Make small test clips from numpy with PyAV, so every test case is explicit and the repo small.

    frames = textured_frames(50, 96, 160)
    write_clip(tmp_path / "a.mp4", frames, fps=25, options={"crf": "18", "g": "25"})
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction

import av
import numpy as np

# Encoder options used when none are given: near-lossless, so decoded pixels track the source.
DEFAULT_OPTIONS = {"libx264": {"crf": "18"}, "libx265": {"crf": "18", "x265-params": "log-level=error"}}
VFR_TIME_BASE = Fraction(1, 1000)  # pts_s are written at millisecond precision


def write_clip(path: str | os.PathLike[str], frames: np.ndarray, *, fps: float = 25,
               codec: str = "libx264", pix_fmt: str = "yuv420p",
               options: dict[str, str] | None = None, rotation: int = 0,
               pts_s: Sequence[float] | None = None, sample_aspect_ratio: Fraction | None = None) -> None:
    """Encode RGB uint8 ``frames`` (T,H,W,3) to ``path``; the container follows the suffix.

    ``rotation`` is the counter-clockwise turn a player applies to display the frames, as
    ffprobe reports it and ``VideoInfo.rotation`` too, written as a display matrix (mp4/mov keep it).
    ``pts_s`` gives each frame an explicit timestamp, for variable frame rate clips.
    ``options`` go to the encoder, e.g. {"crf": "18", "g": "25"} for a 25-frame GOP.
    ``sample_aspect_ratio`` is the pixels' shape (anamorphic video: 4/3 shows 1440x1080 as 1920x1080).
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (T,H,W,3) uint8, got {frames.shape} {frames.dtype}")
    if pts_s is not None and len(pts_s) != len(frames):
        raise ValueError(f"{len(pts_s)} pts_s for {len(frames)} frames")
    if options is None:
        options = DEFAULT_OPTIONS.get(codec, {})
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(os.fspath(path), mode="w") as container:
        stream = container.add_stream(codec, rate=rate, options=dict(options))
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], pix_fmt
        if pts_s is not None:
            stream.codec_context.time_base = VFR_TIME_BASE
        if sample_aspect_ratio is not None:
            stream.codec_context.sample_aspect_ratio = sample_aspect_ratio
        if rotation:
            stream.set_display_rotation(rotation)  # counter-clockwise degrees, as ffprobe's rotation
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            if pts_s is not None:
                frame.pts, frame.time_base = round(pts_s[i] / VFR_TIME_BASE), VFR_TIME_BASE
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def write_audio_clip(path: str | os.PathLike[str], *, seconds: float = 0.5,
                     codec: str = "aac", sample_rate: int = 8000) -> None:
    """An audio-only file (a quiet tone), for the no-video-stream error path."""
    with av.open(os.fspath(path), mode="w") as container:
        stream = container.add_stream(codec, rate=sample_rate, layout="mono")
        n = 1024
        for i in range(max(1, int(seconds * sample_rate) // n)):
            t = (np.arange(n) + i * n) / sample_rate
            frame = av.AudioFrame.from_ndarray(
                (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None], format="fltp",
                layout="mono")
            frame.sample_rate, frame.pts = sample_rate, i * n
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def _box_blur(a: np.ndarray, r: int) -> np.ndarray:
    """Separable box filter of radius r on HxWxC, edges replicated (numpy only)."""
    k = 2 * r + 1
    out = np.pad(a, ((r, r), (r, r), (0, 0)), mode="edge")
    for axis in (0, 1):
        c = np.cumsum(out, axis=axis)
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), c], axis=axis)
        n = c.shape[axis]
        out = (np.take(c, range(k, n), axis=axis) - np.take(c, range(0, n - k), axis=axis)) / k
    return out


def _normalise(a: np.ndarray) -> np.ndarray:
    return (a - a.min()) / max(float(a.max() - a.min()), 1e-9)


def textured_frames(T: int, H: int, W: int, *, seed: int = 0, motion_px: int = 2) -> np.ndarray:
    """Deterministic (T,H,W,3) uint8 frames: coarse and fine noise over colour gradients,
    panned right-to-left by ``motion_px`` per frame (0 gives a frozen picture)."""
    rng = np.random.default_rng(seed)
    wide = W + motion_px * max(T - 1, 0)
    coarse = _normalise(_box_blur(rng.random((H, wide, 3)), 4))
    fine = _normalise(_box_blur(rng.random((H, wide, 3)), 1))
    ys = np.linspace(0, 1, H)[:, None, None]
    xs = np.linspace(0, 1, wide)[None, :, None]
    gradient = ys * np.array([1.0, 0.5, 0.0]) + xs * np.array([0.0, 0.5, 1.0])
    canvas = (255 * (0.45 * coarse + 0.3 * fine + 0.25 * gradient)).round().astype(np.uint8)
    return np.stack([canvas[:, t * motion_px:t * motion_px + W] for t in range(T)])

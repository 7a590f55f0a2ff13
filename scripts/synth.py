"""Synthetic training clips: render stills into moving clips, distort them, encode, decode.

Used by make_dataset.py (training and validation data) and make_sample_videos.py. Every
function is a pure function of its arguments and a seeded ``numpy.random.Generator``, so a
clip can be regenerated from its spec alone.
"""
from __future__ import annotations

import io
from fractions import Fraction

import av
import cv2
import numpy as np

# Resolutions users upload, with how often each is drawn (portrait clips are made by transposing).
RESOLUTIONS = ((640, 360, 0.28), (854, 480, 0.14), (960, 540, 0.18), (1280, 720, 0.26), (1920, 1080, 0.14))


def render(images: list[np.ndarray], width: int, height: int, frames: int,
           rng: np.random.Generator) -> np.ndarray:
    """Pan (and sometimes zoom) a window over a mosaic of ``images``; returns (T,H,W,3) uint8.

    Content is only ever shrunk (scale <= 1) so the clean clip is as sharp as its source:
    a mosaic of several stills stands in for one large frame when a still is too small.
    """
    scale = rng.uniform(0.55, 1.0)
    tiles = [cv2.resize(im, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA) for im in images]
    tile_h = min(t.shape[0] for t in tiles)
    tiles = [t[:tile_h] for t in tiles]
    pan = rng.uniform(0.5, 4.0, size=2) * rng.choice([-1, 1], size=2)
    need_w, need_h = width + abs(pan[0]) * frames + 8, height + abs(pan[1]) * frames + 8
    rows, k = [], 0
    while sum(r.shape[0] for r in rows) < need_h:
        row = []
        while sum(t.shape[1] for t in row) < need_w:
            row.append(tiles[k % len(tiles)])
            k += 1
        rows.append(np.concatenate(row, axis=1))
    row_w = min(r.shape[1] for r in rows)
    canvas = np.concatenate([r[:, :row_w] for r in rows], axis=0)
    zoom = rng.uniform(-0.004, 0.004) if rng.random() < 0.3 else 0.0
    x0 = (canvas.shape[1] - width) / 2 - pan[0] * frames / 2
    y0 = (canvas.shape[0] - height) / 2 - pan[1] * frames / 2
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        z = 1.0 + zoom * t
        # affine map from output pixel to canvas, zoomed about the window centre
        cx, cy = x0 + pan[0] * t + width / 2, y0 + pan[1] * t + height / 2
        m = np.array([[1 / z, 0, cx - width / 2 / z], [0, 1 / z, cy - height / 2 / z]], np.float32)
        out[t] = cv2.warpAffine(canvas, m, (width, height), flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
                                borderMode=cv2.BORDER_REFLECT)
    return out


# --- distortions: each maps (T,H,W,3) uint8 -> same shape uint8 -------------------------------

def gaussian_blur(frames: np.ndarray, sigma: float) -> np.ndarray:
    return np.stack([cv2.GaussianBlur(f, (0, 0), sigma) for f in frames])


def motion_blur(frames: np.ndarray, length: int, angle_deg: float) -> np.ndarray:
    k = np.zeros((length, length), np.float32)
    k[length // 2, :] = 1.0
    rot = cv2.getRotationMatrix2D(((length - 1) / 2, (length - 1) / 2), angle_deg, 1.0)
    k = cv2.warpAffine(k, rot, (length, length))
    k /= k.sum()
    return np.stack([cv2.filter2D(f, -1, k, borderType=cv2.BORDER_REFLECT) for f in frames])


def sensor_noise(frames: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Signal-dependent (shot) plus constant (read) noise, partly correlated across channels."""
    x = frames.astype(np.float32)
    luma_noise = rng.standard_normal(x.shape[:3] + (1,), dtype=np.float32)
    chroma_noise = rng.standard_normal(x.shape, dtype=np.float32)
    std = sigma * (0.5 + 0.5 * np.sqrt(x / 255.0 + 1e-3))
    x += std * (0.7 * luma_noise + 0.5 * chroma_noise)
    return np.clip(x + 0.5, 0, 255).astype(np.uint8)


def rescale(frames: np.ndarray, factor: float, down: int, up: int) -> np.ndarray:
    """Downscale by ``factor`` and back up: what a low-resolution upload upscaled for delivery is."""
    h, w = frames.shape[1:3]
    sw, sh = max(8, round(w / factor)), max(8, round(h / factor))
    return np.stack([cv2.resize(cv2.resize(f, (sw, sh), interpolation=down), (w, h), interpolation=up)
                     for f in frames])


def exposure(frames: np.ndarray, gain: float, gamma: float) -> np.ndarray:
    x = (frames.astype(np.float32) / 255.0) ** gamma * gain
    return np.clip(x * 255.0 + 0.5, 0, 255).astype(np.uint8)


# --- codecs ---------------------------------------------------------------------------------------

CODECS = {  # name: (container, encoder options builder from quality in [0, 1], 1 = best)
    "h264": ("mp4", "libx264", lambda q: {"crf": str(round(51 - 43 * q)), "preset": "medium"}),
    "hevc": ("mp4", "libx265", lambda q: {"crf": str(round(51 - 43 * q)), "preset": "fast",
                                           "x265-params": "log-level=none"}),
    "vp9": ("webm", "libvpx-vp9", lambda q: {"crf": str(round(63 - 55 * q)), "b": "0",
                                              "deadline": "realtime", "cpu-used": "8"}),
    "av1": ("mp4", "libsvtav1", lambda q: {"crf": str(round(63 - 55 * q)), "preset": "10"}),
    "mpeg4": ("mp4", "mpeg4", None),  # rate-controlled: bits per pixel from quality
}


def encode(frames: np.ndarray, codec: str, quality: float, fps: int = 25) -> bytes:
    container_fmt, encoder, opts = CODECS[codec]
    buf = io.BytesIO()
    with av.open(buf, "w", format=container_fmt) as out:
        stream = out.add_stream(encoder, rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        if opts is None:
            bpp = 0.01 + 0.6 * quality ** 2
            stream.bit_rate = int(bpp * frames.shape[1] * frames.shape[2] * fps)
        else:
            stream.options = opts(quality)
        stream.codec_context.thread_count = 1
        for i, f in enumerate(frames):
            vf = av.VideoFrame.from_ndarray(f, format="rgb24")
            vf.pts = i
            out.mux(stream.encode(vf))
        out.mux(stream.encode())
    return buf.getvalue()


def decode(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as c:
        c.streams.video[0].thread_count = 1
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def luma(frames: np.ndarray) -> np.ndarray:
    """BT.601 luma in limited range, the way the encoders saw it; (T,H,W) float32."""
    x = frames.astype(np.float32)
    return 16.0 + (65.481 * x[..., 0] + 128.553 * x[..., 1] + 24.966 * x[..., 2]) / 255.0

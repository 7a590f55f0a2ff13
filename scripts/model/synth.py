"""Synthetic training clips: render pristine sources into moving clips, distort them, encode, decode.

Used by make_dataset.py (training, validation and test data) and evaluate.py. Every function is
a pure function of its arguments and a seeded ``numpy.random.Generator``, so a clip can be
regenerated from its spec alone.

One source per clip, never a mosaic (its seams are nothing a camera makes). A clip is rendered
at a display resolution from 240p to 2160p, but the network judges every frame at the working
scale (``vqa.preprocess.WORK_SHORT_SIDE``), so the one rule is that the working-scale picture
is never an enlargement of its source: a small source makes a small clip, and only a source at
least as large as the working scale makes a 720p-2160p clip (enlarged to the display size and
shrunk back by the preprocessor, the way a camera's soft 4K frame is).

References carry what a camera's normal output has and what is not a defect: shallow depth
of field (a lens blur outside a subject), fine grain, a night scene's tone curve, flat
graphics and text pages. Distortions are labelled against that reference.
"""
from __future__ import annotations

import io
from fractions import Fraction

import av
import cv2
import numpy as np

from vqa.preprocess import WORK_SHORT_SIDE, working_scale

ASPECTS = ((16 / 9, .70), (4 / 3, .12), (9 / 16, .12), (1.0, .06))
MIN_SHORT = 224  # the view's size: smaller clips would be enlarged by the preprocessor
HIGH_RES = ((720, .40), (1080, .35), (1440, .10), (2160, .15))  # display short sides above the working scale


def _pick(rng: np.random.Generator, table):
    values, weights = zip(*table)
    return values[rng.choice(len(values), p=np.array(weights) / sum(weights))]


def _even(x: float) -> int:
    return max(2, int(round(x / 2)) * 2)


def plan_size(src_w: int, src_h: int, rng: np.random.Generator, *, high_res: float = 0.35
              ) -> tuple[int, int, float]:
    """(width, height, crop_short): a display size for a source, and the source pixels its short
    side covers. The working-scale picture is never larger than the crop it comes from."""
    for _ in range(8):  # an aspect that leaves the source a view-sized crop (portrait on a small
        aspect = _pick(rng, ASPECTS)  # landscape still does not)
        cw = min(src_w * 0.9, src_h * 0.9 * aspect)
        ch = cw / aspect
        if min(cw, ch) >= MIN_SHORT:
            break
    crop_short = min(cw, ch)
    if crop_short >= WORK_SHORT_SIDE and rng.random() < high_res:
        short = _pick(rng, HIGH_RES)
        crop_short = rng.uniform(WORK_SHORT_SIDE, crop_short)
    else:
        top = min(crop_short, WORK_SHORT_SIDE)
        short = max(min(MIN_SHORT, top), top * rng.uniform(0.6, 1.0))
        crop_short = min(crop_short, short / rng.uniform(0.7, 1.0))  # shrink the source by up to 1/0.7
    w, h = (_even(short * aspect), _even(short)) if aspect >= 1 else (_even(short), _even(short / aspect))
    return w, h, float(crop_short)


def render_still(image: np.ndarray, width: int, height: int, crop_short: float, frames: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Pan a window over one still; (T,H,W,3) uint8. The still is resized once so that
    ``crop_short`` source pixels become the window's short side, then moved by sub-pixel
    translation (Lanczos)."""
    f = min(width, height) / crop_short
    canvas = cv2.resize(image, None, fx=f, fy=f, interpolation=cv2.INTER_AREA if f < 1 else cv2.INTER_CUBIC)
    ch, cw = canvas.shape[:2]
    room = np.array([cw - width - 2, ch - height - 2], np.float64)
    speed = rng.uniform(0.3, 3.0) / working_scale(height, width)  # px per frame, native
    angle = rng.uniform(0, 2 * np.pi)
    v = np.array([np.cos(angle), np.sin(angle)]) * speed
    v = np.where(np.abs(v) * frames > room, np.sign(v) * room / max(frames, 1), v)
    start = np.array([rng.uniform(0, max(0.0, room[0] - abs(v[0]) * frames)),
                      rng.uniform(0, max(0.0, room[1] - abs(v[1]) * frames))])
    start += np.where(v < 0, np.abs(v) * frames, 0)
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        x, y = start + v * t
        m = np.array([[1, 0, x], [0, 1, y]], np.float32)
        out[t] = cv2.warpAffine(canvas, m, (width, height), flags=cv2.INTER_LANCZOS4 | cv2.WARP_INVERSE_MAP,
                                borderMode=cv2.BORDER_REFLECT)
    return out


def render_clip(video: np.ndarray, width: int, height: int, crop_short: float, frames: int,
                rng: np.random.Generator) -> np.ndarray:
    """``frames`` consecutive frames of a real clip, cropped to the window and resized."""
    t0 = int(rng.integers(0, max(1, len(video) - frames)))
    src = video[t0:t0 + frames]
    sh, sw = src.shape[1:3]
    f = min(width, height) / crop_short
    cw, ch = min(sw, int(width / f)), min(sh, int(height / f))
    x0, y0 = int(rng.integers(0, sw - cw + 1)), int(rng.integers(0, sh - ch + 1))
    interp = cv2.INTER_AREA if f < 1 else cv2.INTER_CUBIC
    return np.stack([cv2.resize(fr[y0:y0 + ch, x0:x0 + cw], (width, height), interpolation=interp) for fr in src])


def to_working(frames: np.ndarray) -> np.ndarray:
    """Frames as the network judges them (area-shrunk to the working scale, never enlarged)."""
    h, w = frames.shape[1:3]
    s = min(1.0, WORK_SHORT_SIDE / min(h, w))
    if s >= 1:
        return frames
    size = (_even(w * s), _even(h * s))
    return np.stack([cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in frames])


# --- references: what a camera's normal output has, and is not a defect -------------------------

def lens_blur(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shallow depth of field: a disc blur (radius 3-13 px of the source) outside a soft
    elliptical subject region, or outside a sharp band (a focal plane) across the frame."""
    h, w = image.shape[:2]
    radius = int(rng.uniform(3, 14))
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1)).astype(np.float32)
    blurred = cv2.filter2D(image, -1, k / k.sum(), borderType=cv2.BORDER_REFLECT)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    if rng.random() < 0.7:
        cy, cx = rng.uniform(0.25, 0.75) * h, rng.uniform(0.25, 0.75) * w
        ry, rx = rng.uniform(0.15, 0.4) * h, rng.uniform(0.12, 0.35) * w
        d = np.sqrt(((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2)
    else:
        c, half = rng.uniform(0.3, 0.7) * h, rng.uniform(0.1, 0.25) * h
        d = np.abs(yy - c) / half
    sharp = np.clip(1.5 - d, 0, 1)[..., None]  # 1 inside, soft edge, 0 outside
    return (image * sharp + blurred * (1 - sharp) + 0.5).astype(np.uint8)


def grain(frames: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Fine film or sensor grain, luma only, new every frame."""
    g = rng.standard_normal(frames.shape[:3], dtype=np.float32) * sigma
    g = np.stack([cv2.GaussianBlur(x, (0, 0), 0.6) for x in g]) * 1.6
    return np.clip(frames + g[..., None] + 0.5, 0, 255).astype(np.uint8)


def night(frames: np.ndarray, gamma: float) -> np.ndarray:
    """A night scene's tone: midtones and shadows low, highlights kept (not an underexposure).
    With gamma under 1, a high-key scene's (snow, sky, a white page): bright, nothing clipped
    that was not clipped before (not an overexposure)."""
    lut = np.clip((np.arange(256) / 255.0) ** gamma * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return lut[frames]


def graphics(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Flat graphics, animation-like shapes, text and comic pages, drawn at the display size
    (with anti-aliased edges, as a renderer makes them); a canvas 25% taller, for scrolling."""
    h = int(height * 1.25)
    page = rng.random() < 0.4
    bg = np.array([255, 255, 255] if page else rng.integers(0, 256, 3), np.float64)
    img = np.empty((h, width, 3), np.uint8)
    img[:] = bg.astype(np.uint8)
    if not page and rng.random() < 0.4:  # a smooth gradient background
        ramp = np.linspace(0, 1, h)[:, None, None]
        other = rng.integers(0, 256, 3)
        img[:] = (bg * (1 - ramp) + other * ramp).astype(np.uint8)
    unit = min(width, height) / 540
    lw = max(1, int(round(2 * unit)))
    fonts = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX, cv2.FONT_HERSHEY_TRIPLEX)
    words = "the quick brown fox jumps over a lazy dog 0123456789 VIDEO QUALITY panel page chapter".split()
    if page:  # comic/text page: panels with ink borders, screentone, lines of text
        for _ in range(int(rng.integers(2, 6))):
            x0, y0 = int(rng.uniform(0, 0.6) * width), int(rng.uniform(0, 0.8) * h)
            x1, y1 = x0 + int(rng.uniform(0.2, 0.4) * width), y0 + int(rng.uniform(0.1, 0.3) * h)
            if rng.random() < 0.5:
                step = max(3, int(6 * unit))
                for yy in range(y0, y1, step):
                    for xx in range(x0 + (yy // step % 2) * step // 2, x1, step):
                        cv2.circle(img, (xx, yy), max(1, step // 4), (40, 40, 40), -1, cv2.LINE_AA)
            cv2.rectangle(img, (x0, y0), (x1, y1), (0, 0, 0), lw + 1, cv2.LINE_AA)
    else:
        for _ in range(int(rng.integers(4, 25))):
            color = tuple(int(c) for c in rng.integers(0, 256, 3))
            cx, cy = int(rng.uniform(0, width)), int(rng.uniform(0, h))
            size = int(rng.uniform(0.03, 0.25) * min(width, h))
            shape = rng.integers(0, 3)
            if shape == 0:
                cv2.rectangle(img, (cx, cy), (cx + size, cy + int(size * rng.uniform(0.4, 1.5))), color, -1, cv2.LINE_AA)
            elif shape == 1:
                cv2.circle(img, (cx, cy), size // 2, color, -1, cv2.LINE_AA)
            else:
                pts = (np.array([cx, cy]) + rng.uniform(-size, size, (int(rng.integers(3, 7)), 2))).astype(np.int32)
                cv2.fillPoly(img, [pts], color, cv2.LINE_AA)
            if rng.random() < 0.5:  # cartoon outline
                cv2.circle(img, (cx, cy), size // 2, (0, 0, 0), lw, cv2.LINE_AA)
    ink = (0, 0, 0) if page or bg.mean() > 128 else (255, 255, 255)
    scale = rng.uniform(0.5, 1.4) * unit
    y = int(rng.uniform(0.05, 0.2) * h)
    while y < h and rng.random() < 0.93:
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 8))))
        cv2.putText(img, text, (int(rng.uniform(0.02, 0.3) * width), y), fonts[rng.integers(0, 4)], scale, ink,
                    max(1, int(round(scale * 1.5))), cv2.LINE_AA)
        y += int(40 * scale * rng.uniform(1.0, 2.5))
    return img


def render_graphics(width: int, height: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    canvas = graphics(width, height, rng)
    speed = rng.uniform(0, 3.0) / working_scale(height, width)
    room = canvas.shape[0] - height - 1
    speed = min(speed, room / max(1, frames))
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        m = np.array([[1, 0, 0], [0, 1, speed * t]], np.float32)
        out[t] = cv2.warpAffine(canvas, m, (width, height), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
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


def disc_kernel(radius: float) -> np.ndarray:
    """A lens's defocus: a disc of ``radius`` px with an anti-aliased rim, summing to 1."""
    r = max(0.5, radius)
    n = int(np.ceil(r))
    yy, xx = np.mgrid[-n:n + 1, -n:n + 1]
    k = np.clip(r + 0.5 - np.sqrt(xx ** 2 + yy ** 2), 0, 1).astype(np.float32)
    return k / k.sum()


def defocus(frames: np.ndarray, radii) -> np.ndarray:
    """Focus errors: each frame's disc blur of its own radius (focus hunting moves it)."""
    return np.stack([f if r < 0.5 else cv2.filter2D(f, -1, disc_kernel(r), borderType=cv2.BORDER_REFLECT)
                     for f, r in zip(frames, radii)])


def shake_path(frames: int, amplitude: float, rng: np.random.Generator) -> np.ndarray:
    """A hand-held camera's jitter: (frames, 2) offsets in px, a smoothed random walk whose
    largest excursion is ``amplitude``, rounded to whole pixels (the reference moves the same
    way without resampling)."""
    steps = rng.standard_normal((frames + 4, 2))
    walk = np.cumsum(steps, 0)
    walk = np.stack([np.convolve(walk[:, i], np.ones(3) / 3, "valid")[:frames] for i in range(2)], 1)
    walk -= walk.mean(0)
    walk *= amplitude / max(1e-6, np.abs(walk).max())
    return np.round(walk)


def translate(frames: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Whole-pixel shifts per frame (reflected at the borders): the reference of a shaken clip."""
    h, w = frames.shape[1:3]
    out = np.empty_like(frames)
    for t, (f, (dx, dy)) in enumerate(zip(frames, offsets)):
        m = np.float32([[1, 0, dx], [0, 1, dy]])
        out[t] = cv2.warpAffine(f, m, (w, h), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_REFLECT)
    return out


def shake_blur(frames: np.ndarray, offsets: np.ndarray, shutter: float, floor: float) -> np.ndarray:
    """Motion blur of a shaken camera: each frame smeared along its own motion since the last
    frame, over the share ``shutter`` of the frame interval, at least ``floor`` px."""
    v = np.diff(offsets, axis=0, prepend=offsets[:1] - (offsets[1:2] - offsets[:1]))
    out = []
    for f, (dx, dy) in zip(frames, v):
        length = max(floor, shutter * float(np.hypot(dx, dy)))
        angle = float(np.degrees(np.arctan2(-dy, dx))) if (dx or dy) else 0.0
        out.append(f if length < 1.5 else motion_blur(f[None], int(round(length)), angle)[0])
    return np.stack(out)


def smear(frames: np.ndarray, sigma_color: float, sigma_space: float) -> np.ndarray:
    """A phone's noise reduction: edge-preserving smoothing that wipes fine texture (skin,
    foliage, grain) and keeps edges; with a low bit rate after it, the 'smeared' phone look."""
    return np.stack([cv2.bilateralFilter(f, 0, sigma_color, sigma_space) for f in frames])


def smear_working(frames: np.ndarray, sigma_color: float, sigma_space: float, scale: float,
                  steps: int = 3) -> np.ndarray:
    """``smear`` where it shows: at the working scale (``scale`` working pixels per native pixel,
    ``sigma_space`` in working pixels). Each frame is shrunk to the working scale and smoothed
    there; the change is brought back to native size (bicubic) and corrected ``steps`` times by
    what still differs once shrunk again (back-projection), so the view the model cuts is the
    smoothed one, and texture finer than the working scale stays. Its cost follows the working
    size: at native size a 4K frame's filter window is about 57 pixels wide, and one 4K clip
    held a worker for minutes (model 5's set)."""
    if scale >= 1:
        return smear(frames, sigma_color, sigma_space)
    out = np.empty_like(frames)
    for i, f in enumerate(frames):
        h, w = f.shape[:2]
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        small = cv2.resize(f, size, interpolation=cv2.INTER_AREA)
        want = cv2.bilateralFilter(small, 0, sigma_color, sigma_space).astype(np.float32)
        x = f.astype(np.float32)
        for _ in range(1 + steps):
            x += cv2.resize(want - cv2.resize(x, size, interpolation=cv2.INTER_AREA), (w, h),
                            interpolation=cv2.INTER_CUBIC)
        out[i] = np.clip(x + 0.5, 0, 255).astype(np.uint8)
    return out


def noise_sigma(noisy: np.ndarray, quiet: np.ndarray) -> np.ndarray:
    """Per frame, the standard deviation of the luma the noise changed: ``noisy`` less
    ``quiet`` (the same clip without the noise), each frame's mean difference removed.
    (T,) float64, in 8-bit luma levels."""
    d = luma(noisy) - luma(quiet)
    return d.reshape(len(d), -1).std(1).astype(np.float64)


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


def add_residual(frames: np.ndarray, residual: np.ndarray, gain: float, rng: np.random.Generator) -> np.ndarray:
    """Real sensor noise on other content: ``residual`` (a noisy crop minus its clean mean,
    float32 HxWx3) tiled over each frame from a new random offset, times ``gain``."""
    t, h, w = frames.shape[:3]
    rh, rw = residual.shape[:2]
    tiled = np.tile(residual, (h // rh + 2, w // rw + 2, 1))
    out = np.empty_like(frames)
    for i in range(t):
        y0, x0 = int(rng.integers(0, rh)), int(rng.integers(0, rw))
        out[i] = np.clip(frames[i] + gain * tiled[y0:y0 + h, x0:x0 + w] + 0.5, 0, 255).astype(np.uint8)
    return out


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

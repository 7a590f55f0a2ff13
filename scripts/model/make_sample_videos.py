"""Write the small demo clips in sample_videos/ from scikit-image's bundled (CC0 / public domain) stills.

Each still becomes a short H.264 clip with a slow pan and zoom, so decoders and the model
see real motion, then one impairment is applied. Deterministic: fixed seeds, fixed
encoder settings. Run from the repository root:

    pip install scikit-image
    python scripts/model/make_sample_videos.py [--out sample_videos]
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Callable

import av
import cv2
import numpy as np
from skimage import data

WIDTH, HEIGHT, FPS = 640, 360, 25
SEED = 20240601


def render(image: np.ndarray, n_frames: int, *, zoom_to: float = 1.15) -> list[np.ndarray]:
    """Frames of a slow zoom-in with a diagonal drift over the largest 16:9 crop of ``image``.

    Uses a sub-pixel affine warp per frame; integer crops would make the motion judder.
    """
    h, w = image.shape[:2]
    crop_w = min(w, h * WIDTH / HEIGHT)
    frames = []
    for i in range(n_frames):
        t = i / max(n_frames - 1, 1)
        scale = crop_w / WIDTH / (1 + (zoom_to - 1) * t)  # source pixels per output pixel
        # Drift so the view stays inside the image: the spare margin shrinks as we zoom out of it.
        spare_x, spare_y = (w - WIDTH * scale) / 2, (h - HEIGHT * scale) / 2
        cx, cy = w / 2 + spare_x * (t - 0.5), h / 2 + spare_y * (0.5 - t) * 0.6
        m = np.array([[scale, 0, cx - scale * WIDTH / 2], [0, scale, cy - scale * HEIGHT / 2]])
        frames.append(cv2.warpAffine(image, m, (WIDTH, HEIGHT), flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
                                     borderMode=cv2.BORDER_REFLECT))
    return frames


def blur(frames, sigma=3.0):
    return [cv2.GaussianBlur(f, (0, 0), sigma) for f in frames]


def noise(frames, sigma=20.0, seed=SEED):
    rng = np.random.default_rng(seed)  # fresh noise each frame, like sensor noise
    return [np.clip(f + rng.normal(0, sigma, f.shape), 0, 255).astype(np.uint8) for f in frames]


def dark(frames, gain=0.25):
    return [np.clip(f * gain, 0, 255).astype(np.uint8) for f in frames]


def freeze_then_black(frames, *, freeze_s=(1.5, 2.5), black_from_s=3.0):
    """Repeat one frame over ``freeze_s``, then all black from ``black_from_s`` to the end."""
    a, b, k = int(freeze_s[0] * FPS), int(freeze_s[1] * FPS), int(black_from_s * FPS)
    out = list(frames)
    out[a:b] = [frames[a]] * (b - a)
    out[k:] = [np.zeros_like(frames[0])] * (len(frames) - k)
    return out


@dataclass(frozen=True)
class Clip:
    name: str
    image: str  # skimage.data function name
    seconds: float
    crf: int
    impair: Callable[[list[np.ndarray]], list[np.ndarray]] = lambda frames: frames
    note: str = ""


CLIPS = (
    Clip("clean_coffee.mp4", "coffee", 3.2, 16, note="reference quality"),
    Clip("compressed_coffee.mp4", "coffee", 3.2, 45, note="same scene, x264 crf 45: blocking, smearing"),
    Clip("blurred_chelsea.mp4", "chelsea", 3.2, 18, blur, "Gaussian blur sigma 3 px"),
    Clip("noisy_astronaut.mp4", "astronaut", 3.2, 26, noise, "Gaussian noise sigma 20 (per frame)"),
    Clip("dark_rocket.mp4", "rocket", 3.2, 18, dark, "gain 0.25"),
    Clip("frozen_black_rocket.mp4", "rocket", 4.0, 18, freeze_then_black,
         "frozen 1.5-2.5 s, black 3.0-4.0 s"),
)


def encode(frames: list[np.ndarray], path: str, crf: int) -> None:
    with av.open(path, "w", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        # Fixed preset and one thread keep the bitstream identical from run to run.
        stream.options = {"crf": str(crf), "preset": "medium", "threads": "1"}
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="sample_videos")
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    for clip in CLIPS:
        still = getattr(data, clip.image)()
        frames = clip.impair(render(still, round(clip.seconds * FPS)))
        path = os.path.join(out, clip.name)
        encode(frames, path, clip.crf)
        print(f"{path}: {os.path.getsize(path) / 1e3:.0f} kB  ({clip.note})")


if __name__ == "__main__":
    main()

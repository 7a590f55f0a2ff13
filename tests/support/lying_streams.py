"""Hostile inputs, second round (issue 9): shapes, lengths and canvases that lie.

Each function writes one case into a folder and returns its path, like ``tests/support/malformed_media.py``.
``CASES`` maps a case name to (generator, status, error code or None, warning codes that must
be present, frames the default plan may decode at most).
"""
from __future__ import annotations

import struct
from pathlib import Path

import av
import numpy as np
from tests.support.clips import textured_frames
from tests.support.malformed_media import mux_pngs, png_bytes

H, W = 48, 64
LONG_FRAMES = 3000  # 2 min at 25 fps: far more than the default plan's 32 frames


def _frames(n: int, h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    return textured_frames(n, h, w, seed=seed)


def _long_frames(n: int = LONG_FRAMES) -> np.ndarray:
    base = _frames(50)
    return base[np.arange(n) % len(base)]  # cheap to make, still a moving picture


# --- item 1: absurd aspect ratios -----------------------------------------------------------

def wide_8192x1(folder: Path) -> str:
    """A few KB of 8192x1 frames: 8 kpx each, under the pixel cap, no picture at all."""
    path = folder / "wide.mov"
    line = (np.arange(8192) % 256).astype(np.uint8)[None]
    mux_pngs(path, [png_bytes(line)] * 10, declared=(8192, 1))
    return str(path)


def wide_65535x1(folder: Path) -> str:
    path = folder / "wider.mov"
    line = (np.arange(65535) % 256).astype(np.uint8)[None]
    mux_pngs(path, [png_bytes(line)] * 4, declared=(65535, 1))
    return str(path)


# --- item 2: a length that is unknown or lies -------------------------------------------------

def _mkv(path: Path, frames: np.ndarray, options: dict | None = None) -> None:
    with av.open(str(path), mode="w", format="matroska", options=options or {}) as container:
        stream = container.add_stream("libx264", rate=25, options={"crf": "30", "g": "50"})
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for rgb in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())


def _patch_duration(path: Path, seconds: float) -> None:
    """Overwrite the Matroska Segment Info Duration (ID 0x4489, an 8-byte float in ms)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"\x44\x89\x88")
    assert at > 0, "no 8-byte Duration element"
    data[at + 3:at + 11] = struct.pack(">d", seconds * 1000.0)
    path.write_bytes(bytes(data))


def mkv_no_duration(folder: Path) -> str:
    """Matroska written as a live stream: no Duration, no Cues (no index to measure from)."""
    path = folder / "live.mkv"
    _mkv(path, _long_frames(), options={"live": "1"})
    return str(path)


def raw_h264_named_mp4(folder: Path) -> str:
    """An Annex B H.264 elementary stream named .mp4: no container, no length, no timestamps."""
    path = folder / "raw.mp4"
    frames = _long_frames()
    with av.open(str(path), mode="w", format="h264") as container:
        stream = container.add_stream("libx264", rate=25, options={"crf": "30", "g": "50"})
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for rgb in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    return str(path)


def mkv_duration_short(folder: Path) -> str:
    """3,000 frames (2 min) in a Matroska file whose Duration says 1 s."""
    path = folder / "short_header.mkv"
    _mkv(path, _long_frames())
    _patch_duration(path, 1.0)
    return str(path)


# --- item 3: declares far more than it holds -------------------------------------------------

def mkv_duration_10h(folder: Path) -> str:
    """1 s of good frames in a Matroska file whose Duration says 10 hours."""
    path = folder / "ten_hours.mkv"
    _mkv(path, _frames(25))
    _patch_duration(path, 36000.0)
    return str(path)


# --- item 4: a huge GIF canvas with many frames ----------------------------------------------

def gif_huge_canvas(folder: Path, frames: int = 2000, size: int = 8192) -> str:
    """46 KB: a size x size GIF canvas and ``frames`` frames, each repainting one pixel. Each
    decoded frame is the whole canvas (67 Mpx at 8192), so decoding every frame costs minutes."""
    out = bytearray(b"GIF89a" + struct.pack("<HH", size, size) + bytes([0xF0, 0, 0]))
    out += bytes([0, 0, 0, 255, 255, 255])  # a 2-colour global table
    out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"  # loop forever
    for i in range(frames):
        out += b"\x21\xf9\x04\x00" + struct.pack("<H", 4) + b"\x00\x00"  # 40 ms per frame
        x, y = (i * 37) % size, (i * 91) % size
        out += b"\x2c" + struct.pack("<HHHH", x, y, 1, 1) + b"\x00"
        out += b"\x02\x02\x44\x01\x00"  # LZW, min code size 2: one pixel of colour 1
    out += b"\x3b"
    path = folder / "canvas.gif"
    path.write_bytes(bytes(out))
    return str(path)


# name -> (generator, status, error code, warning codes, most frames the default plan decodes)
CASES = {
    "wide_8192x1": (wide_8192x1, "error", "E_ASPECT_RATIO", (), 0),
    "wide_65535x1": (wide_65535x1, "error", "E_ASPECT_RATIO", (), 0),
    "mkv_no_duration": (mkv_no_duration, "ok", None, (), 2200),
    "raw_h264_named_mp4": (raw_h264_named_mp4, "ok", None, (), 2200),
    "mkv_duration_short": (mkv_duration_short, "ok", None, (), 2200),
    "mkv_duration_10h": (mkv_duration_10h, "ok", None, ("W_TRUNCATED",), 2200),
    "gif_huge_canvas": (gif_huge_canvas, "ok", None, ("W_CAPPED",), 2200),
}

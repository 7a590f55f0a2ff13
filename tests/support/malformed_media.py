"""Hostile inputs made by code: each function writes one case into a folder and returns its path.

Untrusted uploads are the normal case for a scorer, so every one of these must end in exactly
one record (ok with warnings, or an error with a stable code), quickly and in bounded memory:

    path = huge_resolution(tmp_path)          # 500 kB, declares 16000x16000 frames
    assert Scorer(workers=0).score(path).error["code"] == "E_TOO_MANY_PIXELS"

``CASES`` maps a case name to (generator, expected status, expected code or None, warning codes
that must be present). Generators take the folder and return a ``str`` or ``bytes`` path.
"""
from __future__ import annotations

import functools
import os
import struct
import zlib
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from tests.support.clips import textured_frames, write_audio_clip, write_clip

H, W = 48, 64  # small: every case encodes in milliseconds


def _frames(n: int = 20, h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    return textured_frames(n, h, w, seed=seed)


def good_clip(folder: Path, name: str = "good.mp4", seed: int = 0) -> str:
    path = folder / name
    write_clip(path, _frames(25, seed=seed))
    return str(path)


# --- files that are not (whole) videos ---------------------------------------------------

def zero_bytes(folder: Path) -> str:
    path = folder / "empty.mp4"
    path.write_bytes(b"")
    return str(path)


def random_bytes(folder: Path) -> str:
    path = folder / "noise.mp4"
    path.write_bytes(np.random.default_rng(0).bytes(64 * 1024))
    return str(path)


def _encode_mp4(path: Path, *, faststart: bool, n: int = 50) -> None:
    """A 2 s H.264 mp4; ``faststart`` puts the index (moov) before the frames (mdat)."""
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), mode="w", options=options) as container:
        stream = container.add_stream("libx264", rate=25, options={"crf": "23", "g": "10"})
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for rgb in _frames(n):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())


def truncated_with_index(folder: Path) -> str:
    """moov at the front, the file cut at 60%: the index names frames that are not there."""
    path = folder / "cut_faststart.mp4"
    _encode_mp4(path, faststart=True)
    data = path.read_bytes()
    assert data.find(b"moov") < data.find(b"mdat"), "faststart did not move the index"
    path.write_bytes(data[:int(len(data) * 0.6)])
    return str(path)


def truncated_without_index(folder: Path) -> str:
    """moov at the end (the default), the file cut at 60%: no index survives."""
    path = folder / "cut_noindex.mp4"
    _encode_mp4(path, faststart=False)
    data = path.read_bytes()
    assert data.find(b"moov") > data.find(b"mdat")
    path.write_bytes(data[:int(len(data) * 0.6)])
    return str(path)


def _cut_in_index(folder: Path, into: float) -> str:
    """moov at the front, the file cut ``into`` the way through it: FFmpeg opens what is there
    and finds no stream, a data stream, or a video stream with no codec (the third attack)."""
    path = folder / f"cut_in_index_{int(into * 100)}.mp4"
    _encode_mp4(path, faststart=True)
    data = path.read_bytes()
    start = data.find(b"moov") - 4
    size = int.from_bytes(data[start:start + 4], "big")
    path.write_bytes(data[:start + max(8, int(size * into))])
    return str(path)


def cut_in_index_early(folder: Path) -> str:
    return _cut_in_index(folder, 0.05)


def cut_in_index_middle(folder: Path) -> str:
    return _cut_in_index(folder, 0.3)


def cut_in_index_late(folder: Path) -> str:
    return _cut_in_index(folder, 0.7)


def no_angle_matrix(folder: Path) -> str:
    """A display matrix of zeros (w = 1): FFmpeg finds no angle in it (NaN), PyAV gives INT_MIN,
    which was taken for a 270 degree turn."""
    path = folder / "no_angle.mp4"
    _encode_mp4(path, faststart=False, n=10)
    data = bytearray(path.read_bytes())
    matrix = data.find(b"tkhd") + 4 + 4 + 20 + 8 + 8  # version/flags, times/id, reserved, layer.. volume
    data[matrix:matrix + 36] = (0).to_bytes(4, "big") * 8 + (1 << 30).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    return str(path)


def audio_only(folder: Path) -> str:
    path = folder / "audio.m4a"
    write_audio_clip(path)
    return str(path)


# --- frame sizes ------------------------------------------------------------------------

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(grey: np.ndarray | None = None, *, size: tuple[int, int] | None = None) -> bytes:
    """An 8-bit greyscale PNG of ``grey`` (HxW uint8), or an all-black one of ``size`` (w, h)
    compressed row by row, so a 16000x16000 picture costs 250 kB and never exists in memory."""
    w, h = size if grey is None else (grey.shape[1], grey.shape[0])
    z = zlib.compressobj(9)
    black = bytes(w + 1)  # filter byte 0, then the row
    body = b"".join(z.compress(black if grey is None else b"\0" + grey[y].tobytes())
                    for y in range(h)) + z.flush()
    header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", body)
            + _png_chunk(b"IEND", b""))


def mux_pngs(path: Path, pngs: list[bytes], declared: tuple[int, int], fps: int = 25) -> None:
    """PNG pictures as the frames of a .mov that declares ``declared`` (w, h): each packet is
    decoded at the size its own header says, whatever the container declared."""
    tb = Fraction(1, fps)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("png", rate=fps)
        stream.width, stream.height = declared
        stream.pix_fmt = "gray"
        for i, data in enumerate(pngs):
            packet = av.Packet(data)
            packet.pts = packet.dts = i
            packet.time_base, packet.stream, packet.is_keyframe = tb, stream, True
            container.mux(packet)


HUGE = (16000, 16000)  # 256 Mpx: under FFmpeg's own limit (~268 Mpx), far over MAX_PIXELS


@functools.lru_cache(maxsize=1)
def _huge_png() -> bytes:
    return png_bytes(size=HUGE)  # 0.8 s to compress: made once


def huge_resolution(folder: Path) -> str:
    """500 kB that declare and really hold 16000x16000 frames: decoded unguarded, PyAV peaks
    near 2 GB (a 256 MB grey frame, then 768 MB of RGB)."""
    path = folder / "huge.mov"
    mux_pngs(path, [_huge_png()] * 2, declared=HUGE)
    return str(path)


def grows_past_cap(folder: Path) -> str:
    """A stream declared 64x48 whose fourth frame is 16000x16000."""
    path = folder / "grows.mov"
    small = [png_bytes(f[..., 1]) for f in _frames(6)]
    mux_pngs(path, small[:3] + [_huge_png()] + small[3:], declared=(W, H))
    return str(path)


def size_change(folder: Path) -> str:
    """64x48 frames, then 96x80 ones, in one stream."""
    path = folder / "size_change.mov"
    pngs = [png_bytes(f[..., 1]) for f in _frames(10)]
    pngs += [png_bytes(f[..., 1]) for f in _frames(10, 80, 96, seed=1)]
    mux_pngs(path, pngs, declared=(W, H))
    return str(path)


def tiny_1x1(folder: Path) -> str:
    path = folder / "one_pixel.mp4"
    write_clip(path, _frames(10, 1, 1), pix_fmt="yuv444p")
    return str(path)


def odd_33x17(folder: Path) -> str:
    path = folder / "odd.mp4"
    write_clip(path, _frames(10, 17, 33), pix_fmt="yuv444p")
    return str(path)


# --- damaged streams and odd timing -------------------------------------------------------

def corrupt_packets(folder: Path) -> str:
    """An mp4 whose coded frames have random bytes over 20% of the middle of their data."""
    path = folder / "corrupt.mp4"
    write_clip(path, _frames(50), options={"crf": "18", "g": "10"})
    data = bytearray(path.read_bytes())
    at = data.find(b"mdat")
    end = at - 4 + int.from_bytes(data[at - 4:at], "big")
    a, b = at + (end - at) * 2 // 5, at + (end - at) * 3 // 5
    data[a:b] = np.random.default_rng(1).bytes(b - a)
    path.write_bytes(data)
    return str(path)


def corrupt_ts(folder: Path) -> str:
    """An MPEG-TS whose middle fifth is random bytes (sync bytes included)."""
    path = folder / "corrupt.ts"
    write_clip(path, _frames(50), options={"crf": "18", "g": "10"})
    data = bytearray(path.read_bytes())
    a, b = len(data) * 2 // 5, len(data) * 3 // 5
    data[a:b] = np.random.default_rng(2).bytes(b - a)
    path.write_bytes(data)
    return str(path)


def variable_fps(folder: Path) -> str:
    """Frame intervals alternating between 20 and 100 ms (a phone dropping its rate in the dark)."""
    path = folder / "vfr.mkv"
    steps = [0.02, 0.1] * 12
    pts = np.concatenate([[0.0], np.cumsum(steps)])
    write_clip(path, _frames(len(pts)), pts_s=[round(float(t), 3) for t in pts])
    return str(path)


def rotated(folder: Path) -> str:
    """64x48 coded, a display matrix asking for a 90 degree turn: shown 48x64."""
    path = folder / "rotated.mp4"
    write_clip(path, _frames(10), rotation=90)
    return str(path)


# --- pixel formats --------------------------------------------------------------------------

def ten_bit(folder: Path) -> str:
    path = folder / "p10.mp4"
    write_clip(path, _frames(10), pix_fmt="yuv420p10le")
    return str(path)


def yuv444(folder: Path) -> str:
    path = folder / "p444.mp4"
    write_clip(path, _frames(10), pix_fmt="yuv444p")
    return str(path)


def grey(folder: Path) -> str:
    path = folder / "gray.mkv"
    write_clip(path, _frames(10), codec="ffv1", pix_fmt="gray")
    return str(path)


def alpha(folder: Path) -> str:
    path = folder / "alpha.webm"
    write_clip(path, _frames(10), codec="libvpx-vp9", pix_fmt="yuva420p", options={})
    return str(path)


# --- files that name other files ------------------------------------------------------------

def hls_playlist(folder: Path, target: str | None = None) -> str:
    """An HLS playlist whose one segment is a real local video (``target``, relative)."""
    target = target or os.path.basename(_ts_segment(folder))
    path = folder / "playlist.m3u8"
    path.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:1.0,\n{target}\n#EXT-X-ENDLIST\n")
    return str(path)


def _ts_segment(folder: Path) -> str:
    path = folder / "segment.ts"
    if not path.exists():
        write_clip(path, _frames(25))
    return str(path)


def ffconcat(folder: Path, target: str | None = None) -> str:
    """An ffconcat script named like a video, naming a real local video by a relative (so
    FFmpeg's safe mode accepts it) name."""
    target = target or os.path.basename(good_clip(folder, "named.mp4"))
    path = folder / "concat.mp4"
    path.write_text(f"ffconcat version 1.0\nfile {target}\n")
    return str(path)


# --- paths that are not plain files, or have awkward names ------------------------------------

def fifo(folder: Path) -> str:
    path = folder / "pipe.mp4"
    os.mkfifo(path)
    return str(path)


def symlink_loop(folder: Path) -> str:
    a, b = folder / "loop_a.mp4", folder / "loop_b.mp4"
    os.symlink(b.name, a)
    os.symlink(a.name, b)
    return str(a)


def unreadable(folder: Path) -> str:
    """A real video with mode 000 (root reads it anyway: test it as another user)."""
    path = Path(good_clip(folder, "locked.mp4"))
    path.chmod(0)
    return str(path)


def non_utf8_name(folder: Path) -> bytes:
    path = os.path.join(os.fsencode(folder), b"clip_\xff.mp4")
    write_clip(os.fsdecode(path), _frames(10))
    return path


def newline_name(folder: Path) -> str:
    path = folder / "new\nline.mp4"
    write_clip(path, _frames(10))
    return str(path)


def _patched(src: Path, dst: Path, old: bytes, new: bytes) -> str:
    data = src.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new), old
    dst.write_bytes(data.replace(old, new))
    src.unlink()
    return str(dst)


def bad_metadata(folder: Path) -> str:
    """A Matroska title tag that is not UTF-8 (found by fuzzing: PyAV refused the whole file)."""
    src = folder / "plain.mkv"
    with av.open(str(src), mode="w") as container:
        container.metadata["title"] = "TITLE-PLACEHOLDER"
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for rgb in _frames(10):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    return _patched(src, folder / "latin1_title.mkv", b"TITLE-PLACEHOLDER", b"caf\xe9 \xff\xfe  title   ")


def unknown_codec(folder: Path) -> str:
    """A Matroska codec id no decoder knows (found by fuzzing: PyAV gives no codec context)."""
    src = folder / "plain.mkv"
    write_clip(src, _frames(10))
    return _patched(src, folder / "unknown_codec.mkv", b"V_MPEG4/ISO/AVC", b"V_MPEG9/ISO/ZZZ")


# name -> (generator, status, error code (None when ok), warning codes the record must carry)
CASES = {
    "zero_bytes": (zero_bytes, "error", "E_EMPTY", ()),
    "random_bytes": (random_bytes, "error", "E_NOT_VIDEO", ()),
    "truncated_with_index": (truncated_with_index, "ok", None, ("W_TRUNCATED|W_CORRUPT_FRAMES",)),
    "truncated_without_index": (truncated_without_index, "error", "E_NOT_VIDEO", ()),
    "cut_in_index_early": (cut_in_index_early, "error", "E_NOT_VIDEO", ()),
    "cut_in_index_middle": (cut_in_index_middle, "error", "E_NOT_VIDEO", ()),
    "cut_in_index_late": (cut_in_index_late, "error", "E_NOT_VIDEO", ()),
    "no_angle_matrix": (no_angle_matrix, "ok", None, ()),
    "audio_only": (audio_only, "error", "E_NO_VIDEO_STREAM", ()),
    "huge_resolution": (huge_resolution, "error", "E_TOO_MANY_PIXELS", ()),
    "grows_past_cap": (grows_past_cap, "ok", None, ("W_CORRUPT_FRAMES",)),
    "size_change": (size_change, "ok", None, ("W_SIZE_CHANGED",)),
    "tiny_1x1": (tiny_1x1, "ok", None, ()),
    "odd_33x17": (odd_33x17, "ok", None, ()),
    "corrupt_packets": (corrupt_packets, "ok", None, ("W_CORRUPT_FRAMES",)),
    "corrupt_ts": (corrupt_ts, "ok", None, ()),
    "variable_fps": (variable_fps, "ok", None, ("W_VARIABLE_FPS",)),
    "rotated": (rotated, "ok", None, ("W_ROTATED",)),
    "ten_bit": (ten_bit, "ok", None, ()),
    "yuv444": (yuv444, "ok", None, ()),
    "grey": (grey, "ok", None, ()),
    "alpha": (alpha, "ok", None, ()),
    "hls_playlist": (hls_playlist, "error", "E_NOT_VIDEO", ()),
    "ffconcat": (ffconcat, "error", "E_NOT_VIDEO", ()),
    "fifo": (fifo, "error", "E_BAD_PATH", ()),
    "symlink_loop": (symlink_loop, "error", "E_UNREADABLE", ()),
    "non_utf8_name": (non_utf8_name, "ok", None, ()),
    "newline_name": (newline_name, "ok", None, ()),
    "bad_metadata": (bad_metadata, "ok", None, ()),
    "unknown_codec": (unknown_codec, "error", "E_DECODE", ()),
}
# Checked apart, as another user: root reads a mode-000 file.
UNREADABLE = (unreadable, "error", "E_UNREADABLE", ())

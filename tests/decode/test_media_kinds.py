"""Issue 17, media: rotation in ffprobe's convention, cover art is no video stream, a cut MP4
is told as one, and a folder walk takes every container the decoders read (MXF included)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from tests.support.clips import textured_frames, write_clip

from vqa import Scorer, cli
from vqa.inputs import VIDEO_EXTENSIONS

DECODERS = ["pyav", "opencv"]


@pytest.fixture(scope="module", params=DECODERS)
def scorer(request):
    with Scorer(workers=0, threads=1, frames=8, decoder=request.param) as s:
        yield s


def _ffmpeg_rotation(path) -> float:
    """What ffprobe prints as the stream's "rotation": FFmpeg's av_display_rotation_get of the
    display matrix, which PyAV gives as a decoded frame's ``rotation``."""
    with av.open(str(path)) as c:
        return next(c.decode(video=0)).rotation


@pytest.mark.parametrize("turn", [90, -90, 180])
def test_rotation_is_ffprobes(scorer, tmp_path, turn):
    path = tmp_path / "phone.mp4"
    write_clip(path, textured_frames(12, 96, 128), rotation=turn)
    ffprobe = _ffmpeg_rotation(path)
    record = scorer.score(str(path)).to_dict()
    assert record["status"] == "ok", record["error"]
    assert record["video"]["rotation"] == ffprobe % 360 == turn % 360
    (warning,) = [w for w in record["warnings"] if w.startswith("W_ROTATED")]
    assert f"{turn % 360} degree counter-clockwise" in warning


def _cover_art_audio(path):
    """An audio-only MP4 with cover art: an attached picture, listed by FFmpeg as a video stream."""
    ok, jpeg = cv2.imencode(".jpg", np.full((64, 64, 3), 128, np.uint8))
    with av.open(str(path), "w") as c:
        audio = c.add_stream("aac", rate=8000)
        cover = c.add_stream("mjpeg")
        cover.width = cover.height = 64
        cover.pix_fmt = "yuvj420p"
        cover.disposition = av.stream.Disposition.attached_pic
        tone = (np.sin(np.arange(1024) / 5) * 1000).astype(np.int16)[None, :]
        for i in range(20):
            frame = av.AudioFrame.from_ndarray(tone, format="s16", layout="mono")
            frame.sample_rate, frame.pts = 8000, i * 1024
            for packet in audio.encode(frame):
                c.mux(packet)
        picture = av.Packet(jpeg.tobytes())
        picture.stream, picture.pts, picture.dts = cover, 0, 0
        c.mux(picture)
        for packet in audio.encode():
            c.mux(packet)


def test_cover_art_is_no_video_stream(scorer, tmp_path):
    path = tmp_path / "podcast.mp4"
    _cover_art_audio(path)
    record = scorer.score(str(path)).to_dict()
    assert record["status"] == "error" and record["error"]["code"] == "E_NO_VIDEO_STREAM", record
    assert record["score"] is None


def test_a_cut_mp4_is_told_as_cut_not_as_a_playlist(tmp_path):
    whole = tmp_path / "whole.mp4"
    write_clip(whole, textured_frames(25, 96, 128))  # the index (moov) at the end, as most encoders write it
    cut = tmp_path / "upload.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with Scorer(workers=0, threads=1, frames=8) as s:
        error = s.score(str(cut)).to_dict()["error"]
    assert error["code"] == "E_NOT_VIDEO"
    assert "cut short" in error["message"] and "no index" in error["message"]
    assert "playlist" not in error["message"] and "concat" not in error["message"]


def test_a_folder_walk_takes_mxf_and_the_help_lists_what_it_takes(tmp_path):
    folder = tmp_path / "broadcast"
    folder.mkdir()
    write_clip(folder / "programme.mxf", textured_frames(25, 576, 720), codec="mpeg2video", options={})
    write_clip(folder / "promo.mp4", textured_frames(12, 96, 128))
    result = CliRunner().invoke(cli.cli, ["score", str(folder), "--format", "jsonl", "--workers", "0",
                                          "--frames", "8"])
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["path"].rsplit("/", 1)[1] for r in records] == ["programme.mxf", "promo.mp4"]
    assert all(r["status"] == "ok" for r in records), records
    help_text = " ".join(CliRunner().invoke(cli.cli, ["score", "--help"]).stdout.split())
    assert all(ext in help_text.split() or f"{ext})" in help_text or f"({ext}" in help_text
               for ext in VIDEO_EXTENSIONS)


def test_every_walked_extension_opens_with_the_demuxer_the_decoders_allow(tmp_path):
    # One clip per family, renamed to each extension of its family: FFmpeg's probe, held to the
    # whitelist, opens it (the extension is only the walk's filter; the content decides).
    mp4, mkv = tmp_path / "a.mp4", tmp_path / "a.mkv"
    write_clip(mp4, textured_frames(6, 48, 64))
    write_clip(mkv, textured_frames(6, 48, 64))
    with Scorer(workers=0, threads=1, frames=4) as s:
        for ext in ("m4v", "3gp", "3g2", "mj2", "mov"):
            shutil.copy(mp4, tmp_path / f"x.{ext}")
            assert s.score(str(tmp_path / f"x.{ext}")).status == "ok", ext
        shutil.copy(mkv, tmp_path / "x.webm")
        assert s.score(str(tmp_path / "x.webm")).status == "ok"


def _animation(path, codec: str, container: str) -> None:
    with av.open(str(path), "w", format=container) as c:
        stream = c.add_stream(codec, rate=10)
        stream.width, stream.height = 64, 48
        stream.pix_fmt = "rgb24" if codec == "apng" else "yuv420p"
        for rgb in textured_frames(5, 48, 64, motion_px=8):
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)


@pytest.mark.parametrize("codec, container", [("apng", "apng"), ("libwebp_anim", "webp")])
def test_an_animated_image_is_not_called_a_still_one(tmp_path, codec, container):
    path = tmp_path / f"sticker.{container}"
    _animation(path, codec, container)
    with Scorer(workers=0, threads=1, frames=8) as s:
        error = s.score(str(path)).to_dict()["error"]
        still = tmp_path / "photo.png"
        assert cv2.imwrite(str(still), textured_frames(1, 48, 64)[0])
        still_error = s.score(str(still)).to_dict()["error"]
    assert error["code"] == "E_NOT_VIDEO" and "animated image" in error["message"], error
    assert "still image" not in error["message"]
    assert still_error["code"] == "E_NOT_VIDEO" and "still image" in still_error["message"], still_error


def _woven(instants: np.ndarray) -> np.ndarray:
    """Interlaced frames from a progressive sequence twice their rate: the even lines of each
    frame from one instant, the odd lines from the next (a 1080i camera's fields)."""
    frames = instants[0::2].copy()
    frames[:, 1::2] = instants[1::2][:, 1::2]
    return frames


@pytest.mark.slow
def test_interlaced_frames_are_judged_as_a_player_shows_them(tmp_path):
    # A camera panning 3 px a field: each frame's two fields disagree, the frame is combed.
    # Judged combed, it scored 45.8 against 98.7 for its progressive frames; a progressive
    # picture flagged interlaced (PsF) must keep its score.
    with av.open(str(Path(__file__).resolve().parents[2] / "sample_videos" / "clean_coffee.mp4")) as c:
        picture = np.stack([f.to_ndarray(format="rgb24") for f, _ in zip(c.decode(video=0), range(16))])
    instants = np.stack([np.roll(picture[i // 2], 3 * i, axis=1) for i in range(32)])
    interlaced = {"crf": "18", "x264-params": "interlaced=1:tff=1"}
    write_clip(tmp_path / "1080i.mp4", _woven(instants), options=interlaced)
    write_clip(tmp_path / "1080p.mp4", instants[0::2])
    write_clip(tmp_path / "psf.mp4", instants[0::2], options=interlaced)  # progressive, flagged interlaced
    with av.open(str(tmp_path / "1080i.mp4")) as c:
        assert next(c.decode(video=0)).interlaced_frame
    with Scorer(workers=0, threads=1, frames=16) as s:
        i, p, psf = (s.score(str(tmp_path / n)).to_dict() for n in ("1080i.mp4", "1080p.mp4", "psf.mp4"))
    assert i["status"] == p["status"] == psf["status"] == "ok"
    assert i["score"] == pytest.approx(p["score"], abs=12.0), (i["score"], p["score"])
    assert psf["score"] == pytest.approx(p["score"], abs=1.5), (psf["score"], p["score"])


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 5), (4, 4), (9, 15), (17, 33), (36, 64)])
def test_deinterlace_mends_combs_and_leaves_smooth_pictures(shape):
    from vqa.decode.fields import deinterlace

    h, w = shape
    ramp = np.broadcast_to((np.arange(h)[:, None, None] * 3 + np.arange(w)[None, :, None]).astype(np.uint8),
                           (h, w, 3)).copy()
    assert np.array_equal(deinterlace(ramp), ramp)  # no comb: untouched
    comb = ramp.copy()
    comb[1::2] = 255 - comb[1::2]  # the odd field from another picture
    mended = deinterlace(comb)
    assert mended.shape == comb.shape and mended.dtype == np.uint8
    if h >= 4:
        assert np.abs(np.diff(mended.astype(int), axis=0)).mean() < np.abs(np.diff(comb.astype(int), axis=0)).mean() / 4


def test_a_still_picture_track_before_the_video_is_not_what_is_scored(tmp_path):
    # Matroska has no attached-picture flag on a track: a cover or poster muxed as a track is a
    # video stream of one frame. Players (FFmpeg's av_find_best_stream) play the real video.
    frames = textured_frames(25, 96, 128)
    path, alone = tmp_path / "poster_first.mkv", tmp_path / "alone.mkv"
    ok, jpeg = cv2.imencode(".jpg", np.full((64, 64, 3), 230, np.uint8))
    with av.open(str(path), "w") as c:
        poster = c.add_stream("mjpeg")
        poster.width = poster.height = 64
        poster.pix_fmt = "yuvj420p"
        video = c.add_stream("libx264", rate=25, options={"crf": "18"})
        video.width, video.height, video.pix_fmt = 128, 96, "yuv420p"
        packet = av.Packet(jpeg.tobytes())
        packet.stream, packet.pts, packet.dts = poster, 0, 0
        c.mux(packet)
        for rgb in frames:
            c.mux(video.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        c.mux(video.encode())
    write_clip(alone, frames)
    with av.open(str(path)) as c:
        assert [s.codec_context.name for s in c.streams.video] == ["mjpeg", "h264"]
        assert not any(int(s.disposition) & 0x0400 for s in c.streams.video)
    with Scorer(workers=0, threads=1, frames=8) as s:
        record, reference = s.score(str(path)).to_dict(), s.score(str(alone)).to_dict()
    assert record["status"] == "ok", record["error"]
    assert (record["video"]["codec"], record["video"]["width"], record["frames"]["sampled"]) == ("h264", 128, 8)
    assert record["score"] == reference["score"] and record["warnings"] == reference["warnings"] == []


def _hdr_code_values(rgb: np.ndarray, trc: int) -> np.ndarray:
    """SDR frames (BT.1886: light = code ** 2.4) re-coded as PQ or HLG 16-bit R'G'B', their
    white at HDR reference white (203 cd/m2; HLG's 75% signal): how an HDR master carries them."""
    light = (rgb / 255.0) ** 2.4
    if trc == 16:
        m1, m2, c1, c2, c3 = 2610 / 16384, 2523 / 4096 * 128, 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
        y = np.power(light * 203 / 10000, m1)
        code = np.power((c1 + c2 * y) / (1 + c3 * y), m2)
    else:
        a, b, c = 0.17883277, 0.28466892, 0.55991073
        scene = np.power(light, 1 / 1.2) * ((np.exp((0.75 - c) / a) + b) / 12)
        code = np.where(scene <= 1 / 12, np.sqrt(3 * scene), a * np.log(np.maximum(12 * scene - b, 1e-12)) + c)
    return np.round(np.clip(code, 0, 1) * 65535).astype(np.uint16)


@pytest.mark.slow
@pytest.mark.parametrize("trc", [16, 18], ids=["pq", "hlg"])
def test_hdr_video_is_judged_as_its_sdr_picture(tmp_path, trc):
    # A phone's HLG clip or an HDR10 (PQ) master, read as SDR, is dim and flat: PQ scored 81.9
    # and HLG 81.1 where the SDR original scores 78.1. Tone-mapped, as a player shows them, 78.4
    # and 77.9.
    with av.open(str(Path(__file__).resolve().parents[2] / "sample_videos" / "noisy_astronaut.mp4")) as c:
        sdr = np.stack([f.to_ndarray(format="rgb24") for f, _ in zip(c.decode(video=0), range(12))])
    x265 = {"crf": "18", "preset": "ultrafast", "x265-params": "log-level=error"}
    paths = {"hdr": tmp_path / "hdr.mp4", "sdr": tmp_path / "sdr.mp4"}
    with av.open(str(paths["hdr"]), "w") as c:
        stream = c.add_stream("libx265", rate=25, options=x265)
        stream.width, stream.height, stream.pix_fmt = sdr.shape[2], sdr.shape[1], "yuv420p10le"
        stream.codec_context.color_trc, stream.codec_context.color_primaries = trc, 9
        stream.codec_context.colorspace = 9
        for rgb in sdr:
            frame = av.VideoFrame.from_ndarray(_hdr_code_values(rgb, trc), format="rgb48le")
            frame = frame.reformat(format="yuv420p10le", dst_colorspace=9)
            frame.color_trc, frame.color_primaries, frame.colorspace = trc, 9, 9
            c.mux(stream.encode(frame))
        c.mux(stream.encode())
    write_clip(paths["sdr"], sdr, codec="libx265", pix_fmt="yuv420p10le", options=x265)
    with av.open(str(paths["hdr"])) as c:
        assert next(c.decode(video=0)).color_trc == trc
    with Scorer(workers=0, threads=1, frames=8) as s:
        hdr, ref = (s.score(str(p)).to_dict() for p in paths.values())
    assert hdr["status"] == "ok", hdr["error"]
    assert hdr["score"] == pytest.approx(ref["score"], abs=2.0), (hdr["score"], ref["score"])
    assert [d["type"] for d in hdr["defects"]] == [d["type"] for d in ref["defects"]]

"""The nvdec decode backend on real NVDEC. NOT RUN IN CI: it needs an NVIDIA GPU and
PyNvVideoCodec, and is skipped elsewhere with the reason. tests/decode/test_nvdec.py tests the same
reader without a GPU, against a stand-in; this file checks what only the hardware can: that its
pictures are FFmpeg's, frame for frame, so records do not depend on the decoder. On a GPU machine:

    PYTHONPATH=$PWD python -m pytest -q tests/decode/test_nvdec_device.py
"""
from __future__ import annotations

import numpy as np
import pytest

av = pytest.importorskip("av")

from tests.support.clips import textured_frames, write_clip  # noqa: E402
from tests.support.required import nvdec_missing  # noqa: E402

import vqa.decode as decode  # noqa: E402
from vqa.sample import plan_frames  # noqa: E402

_why = nvdec_missing()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no NVDEC here: {_why}")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("nvdec_device")
    made = {}
    for name, (w, h), codec, opts in [
            ("h264_bframes.mp4", (320, 240), "libx264", {"g": "12", "bf": "3", "crf": "23"}),
            ("h264.ts", (320, 240), "libx264", {"g": "12", "bf": "2", "crf": "23"}),
            ("h264_1080p.mp4", (1920, 1080), "libx264", {"g": "24", "bf": "2", "crf": "23", "preset": "ultrafast"}),
            ("hevc.mkv", (640, 360), "libx265", {"g": "12", "crf": "28", "x265-params": "log-level=none"}),
            ("hevc_bt709.mp4", (1280, 720), "libx265", {"g": "24", "crf": "28", "x265-params": "log-level=none",
                                                        "colorspace": "bt709"})]:
        # 5 s (2 s at 1080p) with a keyframe every 0.5 s: the sampled plans seek between runs
        write_clip(d / name, textured_frames(48 if h > 720 else 120, h, w, seed=len(made)), fps=24, codec=codec,
                   options=opts)
        made[name] = d / name
    return made


def _read(path, backend, frames):
    with decode.open_video(path, backend=backend) as reader:
        plan = plan_frames(reader.info, frames, keyframes_s=reader.keyframe_times(10_000))
        return [(f.run, f.pts_s, f.rgb) for f in reader.read(plan)], reader.warnings


@pytest.mark.parametrize("frames", ["all", "default", 5])
@pytest.mark.parametrize("name", ["h264_bframes.mp4", "h264.ts", "h264_1080p.mp4", "hevc.mkv", "hevc_bt709.mp4"])
def test_nvdec_pictures_are_ffmpegs(clips, name, frames):
    got, warnings = _read(clips[name], "nvdec", frames)
    want, _ = _read(clips[name], "pyav", frames)
    assert warnings == [], warnings
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for (_, pts, a), (_, _, b) in zip(got, want):
        assert np.array_equal(a, b), f"{name} at {pts} s: max difference {np.abs(a.astype(int) - b).max()}"

"""The GPU engine on real NVDEC and CUDA. NOT RUN IN CI: it needs an NVIDIA GPU, a CUDA build of
torch and PyNvVideoCodec, and is skipped elsewhere with the reason (tests/engine/test_gpu_engine.py
runs the same control flow against the stand-in decoder). What only the hardware shows: pictures
read from device memory, prepared there and scored by the CUDA graphs give the CPU path's records.
On the GPU machine:

    PYTHONPATH=$PWD python -m pytest -q tests/engine/test_gpu_engine_device.py
"""
from __future__ import annotations

import pytest

av = pytest.importorskip("av")

from tests.support.clips import textured_frames, write_clip  # noqa: E402
from tests.support.required import nvdec_missing  # noqa: E402

from vqa import Scorer  # noqa: E402
from vqa.infer import cuda_available  # noqa: E402

_why = "no CUDA device" if not cuda_available() else nvdec_missing()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no GPU engine here: {_why}")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_engine_device")
    made = {}
    for name, (w, h), codec, opts in [
            ("h264_720p.mp4", (1280, 720), "libx264", {"g": "48", "bf": "2", "crf": "28", "colorspace": "bt709"}),
            ("h264_bframes.mp4", (640, 360), "libx264", {"g": "12", "bf": "3", "crf": "23"}),
            ("h264_1080p.ts", (1920, 1080), "libx264", {"g": "24", "bf": "2", "crf": "30", "preset": "ultrafast"}),
            ("hevc.mkv", (854, 480), "libx265", {"g": "24", "crf": "30", "x265-params": "log-level=none"}),
            ("vp9.webm", (640, 360), "libvpx-vp9", {"g": "24", "crf": "40", "b": "0"})]:
        write_clip(d / name, textured_frames(96, h, w, seed=len(made)), fps=24, codec=codec, options=opts)
        made[name] = d / name
    (d / "text.mp4").write_text("not a video\n")
    made["text.mp4"] = d / "text.mp4"
    return made


@pytest.mark.parametrize("frames", ["default", "all"])
def test_records_are_the_cpu_paths(clips, frames):
    paths = [str(p) for n, p in clips.items() if n != "text.mp4"]
    with Scorer(backend="cuda", precision="fp32", decoder="pyav", workers=2, frames=frames) as cpu:
        want = {r.path: r for r in cpu.score_many(paths)}
    # One process, the engine in this one (auto spreads it over processes on 8 cores or more)
    with Scorer(backend="cuda", precision="fp32", decoder="nvdec", workers=4, gpu_processes=1, frames=frames) as gpu:
        assert type(gpu._engine).__name__ == "GpuEngine"
        got = {r.path: r for r in gpu.score_many(paths + [str(clips["text.mp4"])])}
    for p in paths:
        assert got[p].status == "ok", got[p].error
        assert got[p].score == pytest.approx(want[p].score, abs=1e-3), p
        assert got[p].category == want[p].category
        assert [d.to_dict() for d in got[p].defects] == [d.to_dict() for d in want[p].defects]
        assert got[p].frames["sampled"] == want[p].frames["sampled"]
        fell_back = [w for w in got[p].warnings if w.startswith("W_DECODER_FALLBACK")]
        assert bool(fell_back) == p.endswith(".webm"), (p, got[p].warnings)
    assert got[str(clips["text.mp4"])].error["code"] == "E_NOT_VIDEO"

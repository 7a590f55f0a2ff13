"""The GPU engine's control flow without a GPU: the stand-in NVDEC (tests/support/fake_nvdec.py)
hands out pictures, "device" tensors live on the CPU, and the PyTorch network scores. What it
checks: records equal the CPU path's (the NV12 preparation is bit for bit), videos NVDEC or the
preparation cannot take fall back with their reason, bad files get their error codes, decoders
are kept from one video to the next, and a video past its limit gets E_TIMEOUT while the
engine goes on. The real path (NVDEC, CUDA) runs in tests/engine/test_gpu_engine_device.py.
"""
from __future__ import annotations

import functools
import importlib
import sys
import threading
from fractions import Fraction

import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from tests.support import fake_nvdec  # noqa: E402
from tests.support.clips import textured_frames, write_clip  # noqa: E402

from vqa import Scorer  # noqa: E402
from vqa.config import ScoreOptions  # noqa: E402
from vqa.infer import open_inferencer  # noqa: E402
from vqa.model import load_model_spec  # noqa: E402
from vqa.scorer.local import _new_record  # noqa: E402

pytestmark = pytest.mark.slow  # real clips, scored twice (the CPU path, then this one)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_engine")
    made = {}
    for name, (w, h), codec, opts in [
            ("h264.mp4", (640, 360), "libx264", {"g": "24", "bf": "2", "crf": "30"}),
            ("h264_bt709.mkv", (640, 360), "libx264", {"g": "24", "crf": "30", "colorspace": "bt709"}),
            ("hevc.mkv", (480, 272), "libx265", {"g": "24", "crf": "30", "x265-params": "log-level=none"}),
            ("small.mp4", (160, 96), "libx264", {"g": "24", "crf": "30"}),
            ("h264_320.mp4", (320, 240), "libx264", {"g": "24", "crf": "30"}),
            ("vp9.webm", (320, 240), "libvpx-vp9", {"g": "24", "crf": "40", "b": "0"})]:
        write_clip(d / name, textured_frames(72, h, w, seed=len(made)), fps=24, codec=codec, options=opts)
        made[name] = d / name
    write_clip(d / "anamorphic.ts", textured_frames(48, 240, 320, seed=9), fps=24,
               options={"g": "24", "crf": "30"}, sample_aspect_ratio=Fraction(4, 3))
    made["anamorphic.ts"] = d / "anamorphic.ts"
    (d / "text.mp4").write_text("not a video\n")
    made["text.mp4"] = d / "text.mp4"
    return made


def _engine(options: ScoreOptions, sessions: int = 2):
    from vqa.engine.gpu import GpuEngine

    resolved = options.resolve()
    spec = load_model_spec()
    inferencer = open_inferencer(spec, backend="pytorch", threads=1)
    model = spec.record(("pytorch",))
    return GpuEngine(resolved, spec, inferencer, lambda p: _new_record(model, resolved.record_config(), p),
                     sessions=sessions, device="cpu"), inferencer


def _cpu_records(paths, frames="default"):
    with Scorer(backend="pytorch", decoder="pyav", workers=0, frames=frames, batch_size=32) as s:
        return {p.name: s.score(p) for p in paths}


@pytest.mark.parametrize("frames", ["default", "all"])
def test_records_are_the_cpu_paths(nvdec, clips, frames):
    names = ["h264.mp4", "h264_bt709.mkv", "hevc.mkv"] if frames == "default" else ["h264_bt709.mkv"]
    want = _cpu_records([clips[n] for n in names], frames)
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", frames=frames, batch_size=32))
    try:
        got = {n: engine.submit(str(clips[n])).result(timeout=120) for n in names}
    finally:
        engine.close()
        inferencer.close()
    for n in names:
        assert got[n].status == "ok", got[n].error
        assert got[n].warnings == want[n].warnings, n  # no fallback: NVDEC (the stand-in) took each
        assert got[n].score == pytest.approx(want[n].score, abs=1e-4), n
        assert got[n].category == want[n].category
        assert [d.to_dict() for d in got[n].defects] == [d.to_dict() for d in want[n].defects]
        # the same frames scored; NVDEC decodes the B-frames FFmpeg may skip before a run
        assert got[n].frames["sampled"] == want[n].frames["sampled"]
        assert got[n].frames["decode_errors"] == want[n].frames["decode_errors"] == 0


def test_fallbacks_and_errors_are_per_video(nvdec, clips):
    want = _cpu_records([clips["vp9.webm"], clips["small.mp4"], clips["anamorphic.ts"]])
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32))
    try:
        futures = {n: engine.submit(str(clips[n]))
                   for n in ("vp9.webm", "small.mp4", "text.mp4", "h264.mp4", "anamorphic.ts")}
        got = {n: f.result(timeout=120) for n, f in futures.items()}
    finally:
        engine.close()
        inferencer.close()
    vp9 = got["vp9.webm"]
    assert vp9.status == "ok" and any(w.startswith("W_DECODER_FALLBACK") and "vp9" in w for w in vp9.warnings)
    assert vp9.score == pytest.approx(want["vp9.webm"].score, abs=1e-4)
    small = got["small.mp4"]
    assert any("smaller than the view" in w for w in small.warnings), small.warnings
    assert small.score == pytest.approx(want["small.mp4"].score, abs=1e-4)
    # non-square pixels that only the H.264 bitstream tells (MPEG-TS declares none)
    wide = got["anamorphic.ts"]
    assert any("non-square pixels" in w for w in wide.warnings), wide.warnings
    assert wide.score == pytest.approx(want["anamorphic.ts"].score, abs=1e-4)
    assert got["text.mp4"].status == "error" and got["text.mp4"].error["code"] == "E_NOT_VIDEO"
    assert got["h264.mp4"].status == "ok" and not got["h264.mp4"].warnings


def test_decoders_are_kept_across_videos(nvdec, clips):
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32), sessions=1)
    try:
        for _ in range(3):
            assert engine.submit(str(clips["h264.mp4"])).result(timeout=120).status == "ok"
    finally:
        engine.close()
        inferencer.close()
    assert nvdec.STATS["created"] == 1


def test_a_larger_video_gets_a_decoder_of_its_own(nvdec, clips):
    """The SDK's decoder sizes itself for its first stream (the stand-in refuses larger pictures
    after it): a session given a small video, then a larger one, decodes both (no fallback), and
    keeps a decoder for each size."""
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32), sessions=1)
    try:
        names = ("h264_320.mp4", "h264.mp4", "h264_320.mp4")
        records = [engine.submit(str(clips[n])).result(timeout=120) for n in names]
    finally:
        engine.close()
        inferencer.close()
    for r in records:
        assert r.status == "ok" and not r.warnings, (r.path, r.warnings)
    assert nvdec.STATS["created"] == 2  # one a size; the small one kept for the third video


def test_a_decoder_that_failed_is_not_kept(nvdec, clips):
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32), sessions=1)
    try:
        nvdec.FAULTS["decode"] = True
        first = engine.submit(str(clips["h264.mp4"])).result(timeout=120)
        nvdec.FAULTS["decode"] = False
        second = engine.submit(str(clips["h264.mp4"])).result(timeout=120)
    finally:
        engine.close()
        inferencer.close()
    assert any(w.startswith("W_DECODER_FALLBACK") for w in first.warnings) and first.frames["decode_errors"] == 0
    assert second.status == "ok" and not second.warnings
    assert nvdec.STATS["created"] == 2  # a new decoder for the second video


def test_a_failing_decoder_falls_back(nvdec, clips):
    nvdec.FAULTS["create"] = True
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32), sessions=1)
    try:
        record = engine.submit(str(clips["h264.mp4"])).result(timeout=120)
    finally:
        engine.close()
        inferencer.close()
    assert record.status == "ok"
    assert any(w.startswith("W_DECODER_FALLBACK") and "could not start" in w for w in record.warnings)


def test_a_video_past_its_limit_times_out_and_the_engine_goes_on(nvdec, clips, monkeypatch):
    from vqa.engine import gpu

    # The module the engine imports now (the fixture made it import against the stand-in): an
    # attribute of vqa.decode left by an earlier import may be an older one.
    nvdec_device = importlib.import_module("vqa.decode.nvdec_device")

    monkeypatch.setattr(gpu, "AUTO_TIMEOUT_MIN_S", 5.0)  # the limit until a video is planned

    stuck = threading.Event()
    original = nvdec_device.NvdecDeviceReader._open

    def hang_on_vp9(self):
        if self.path.endswith(".webm"):
            stuck.wait(60)  # a decoder that never returns, as far as the engine can tell
        return original(self)

    monkeypatch.setattr(nvdec_device.NvdecDeviceReader, "_open", hang_on_vp9)
    engine, inferencer = _engine(ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32),
                                 sessions=1)
    try:
        late = engine.submit(str(clips["vp9.webm"]))
        after = engine.submit(str(clips["h264.mp4"]))
        record = late.result(timeout=30)
        assert record.status == "error" and record.error["code"] == "E_TIMEOUT"
        assert after.result(timeout=60).status == "ok"  # a new session took it
    finally:
        stuck.set()
        engine.close()
        inferencer.close()


def _stand_in_process(options, sessions, new_record):
    """What a GPU process runs, on the CPU: the stand-in NVDEC installed in this (spawned) process."""
    sys.modules["PyNvVideoCodec"] = fake_nvdec.install()
    engine, inferencer = _engine(options, sessions)
    stop = engine.submit

    def submit(path, split=False, shown=None):
        if path.endswith("die.mp4"):  # a decoder that takes its process down
            import os
            os._exit(3)
        return stop(path, split, shown)

    engine.submit = submit

    def close():
        engine.close()
        inferencer.close()
    return engine, close


def test_processes_share_the_videos_and_replace_one_that_dies(nvdec, clips, tmp_path):
    from vqa.engine.gpu_processes import GpuProcesses

    options = ScoreOptions(backend="pytorch", decoder="nvdec", batch_size=32)
    resolved = options.resolve()
    want = _cpu_records([clips["h264.mp4"]])["h264.mp4"]
    die = tmp_path / "die.mp4"
    die.write_bytes(clips["h264.mp4"].read_bytes())
    engine = GpuProcesses(resolved, functools.partial(_new_record, {}, {}), processes=2, sessions=2,
                          factory=_stand_in_process)
    try:
        assert engine.started
        first = [engine.submit(str(clips["h264.mp4"]), shown=f"clip{k}.mp4") for k in range(3)]
        records = [f.result(timeout=120) for f in first]
        assert [r.path for r in records] == ["clip0.mp4", "clip1.mp4", "clip2.mp4"]
        assert all(r.status == "ok" and r.score == pytest.approx(want.score, abs=1e-4) for r in records)
        lost = engine.submit(str(die)).result(timeout=60)
        assert lost.status == "error" and lost.error["code"] == "E_INTERNAL" and "exit code 3" in lost.error["message"]
        after = [engine.submit(str(clips["h264.mp4"])) for _ in range(3)]  # the replacement takes its share
        assert all(f.result(timeout=120).status == "ok" for f in after)
    finally:
        engine.close()


def test_a_picture_in_a_taller_nvdec_buffer_is_packed(nvdec):
    from vqa.decode.nvdec_device import _packed

    h, w, rows = 540, 960, 544  # NVDEC allocates whole macroblocks: 544 luma rows for 540
    buffer = torch.randint(0, 256, (rows * 3 // 2, w), dtype=torch.uint8)
    got = _packed(buffer, h, w)
    assert got.shape == (h * 3 // 2, w)
    assert torch.equal(got[:h], buffer[:h]) and torch.equal(got[h:], buffer[rows:rows + h // 2])
    exact = buffer[:h * 3 // 2].clone()
    assert torch.equal(_packed(exact, h, w), exact)
    with pytest.raises(ValueError, match="cannot hold"):
        _packed(buffer[:100], h, w)


def test_the_gpu_engine_runs_in_processes_by_default_on_many_cores(nvdec):
    nvdec_cuda = ScoreOptions(backend="cuda", precision="fp16", decoder="nvdec")  # resolved, never opened
    assert nvdec_cuda.replace(gpu_processes=2).resolve(cores=16).gpu_processes == 2
    assert nvdec_cuda.resolve(cores=16).gpu_processes == 4
    assert nvdec_cuda.resolve(cores=64).gpu_processes == 4
    assert nvdec_cuda.resolve(cores=2).gpu_processes == 1


def test_gpu_processes_without_a_gpu_say_so_before_starting_any(nvdec, monkeypatch):
    from vqa.engine import gpu_processes
    from vqa.errors import BackendUnavailable
    from vqa.infer import cuda

    monkeypatch.setattr(cuda, "cuda_problem", lambda: "no CUDA device is visible")
    started = []
    monkeypatch.setattr(gpu_processes, "_Process", lambda *a: started.append(a))
    resolved = ScoreOptions(backend="cuda", precision="fp16", decoder="nvdec").resolve(cores=16)
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot run here: no CUDA device"):
        gpu_processes.GpuProcesses(resolved, functools.partial(_new_record, {}, {}), processes=4, sessions=16)
    assert started == []

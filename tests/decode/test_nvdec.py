"""The nvdec decode backend's logic without a GPU: tests/support/fake_nvdec.py stands in for
PyNvVideoCodec (FFmpeg decodes, NVDEC's interface and habits around it). What only the real
hardware can show (its pictures equal FFmpeg's, its speed) is measured on the GPU machine by
tests/infer/test_cuda_device.py and scripts/bench/device_bench.sh; this file runs everywhere.
"""
from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from tests.support import fake_nvdec  # noqa: E402
from tests.support.clips import textured_frames, write_clip  # noqa: E402

import vqa.decode as decode  # noqa: E402
from vqa.config import ScoreOptions  # noqa: E402
from vqa.errors import BackendUnavailable  # noqa: E402
from vqa.sample import plan_frames  # noqa: E402


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """H.264 with B-frames and a keyframe every 12 frames (mp4, and MPEG-TS: Annex B already),
    HEVC in mkv, and VP9 in webm (not for NVDEC)."""
    d = tmp_path_factory.mktemp("nvdec")
    frames = textured_frames(60, 96, 128, seed=3)
    made = {}
    for name, codec, opts in [("h264.mp4", "libx264", {"g": "12", "bf": "2", "crf": "23"}),
                              ("h264.ts", "libx264", {"g": "12", "bf": "2", "crf": "23"}),
                              ("hevc.mkv", "libx265", {"g": "12", "crf": "28", "x265-params": "log-level=none"}),
                              ("vp9.webm", "libvpx-vp9", {"g": "12", "crf": "40", "b": "0"})]:
        write_clip(d / name, frames, fps=24, codec=codec, options=opts)
        made[name] = d / name
    # Non-square pixels told by the H.264 bitstream alone (MPEG-TS declares none): the NVDEC
    # readers open without FFmpeg's probe, so the shape must come from the decoded first picture.
    write_clip(d / "anamorphic.ts", frames, fps=24, options={"g": "12", "crf": "23"},
               sample_aspect_ratio=Fraction(4, 3))
    made["anamorphic.ts"] = d / "anamorphic.ts"
    # A Matroska stream that starts at 10 s: only FFmpeg's probe finds its start.
    write_clip(d / "late.mkv", frames, fps=24, options={"g": "12", "bf": "2", "crf": "23"},
               pts_s=[10 + i / 24 for i in range(len(frames))])
    made["late.mkv"] = d / "late.mkv"
    return made


def _read(path, backend, frames="default", errors=None):
    with decode.open_video(path, backend=backend) as reader:
        plan = plan_frames(reader.info, frames, keyframes_s=reader.keyframe_times(10_000))
        got = [(f.run, round(f.pts_s, 6), f.rgb) for f in reader.read(plan)]
        if errors is not None:
            errors.append(reader.decode_errors)
        return got, reader.warnings, reader.info


def _same_frames(a, b):
    assert [x[:2] for x in a] == [x[:2] for x in b]
    for (_, pts, x), (_, _, y) in zip(a, b):
        assert np.array_equal(x, y), f"pixels differ at {pts} s"


@pytest.mark.parametrize("name", ["h264.mp4", "h264.ts", "hevc.mkv", "late.mkv"])
@pytest.mark.parametrize("frames", ["default", "all", 7])
def test_nvdec_gives_pyavs_frames(nvdec, clips, name, frames):
    got, warnings, info = _read(clips[name], "nvdec", frames)
    want, _, want_info = _read(clips[name], "pyav", frames)
    assert warnings == [] and info == want_info
    _same_frames(got, want)
    assert nvdec.STATS["packets"] > 0, "NVDEC decoded nothing: the frames came from FFmpeg"


def test_seeks_drain_the_decoder(nvdec, clips):
    """A sampled plan seeks between runs; each seek drains the decoder (the pictures of the old
    position must not leak into the new one) instead of making a new one, and the frames still
    match."""
    got, _, _ = _read(clips["h264.mp4"], "nvdec", "default")
    assert nvdec.STATS["created"] == 1 and nvdec.STATS["drained"] >= 3
    _same_frames(got, _read(clips["h264.mp4"], "pyav", "default")[0])


@pytest.mark.parametrize("name, words", [("vp9.webm", "vp9"), ("anamorphic.ts", "non-square pixels")])
def test_other_videos_fall_back_to_the_cpu_with_a_warning(nvdec, clips, name, words):
    got, warnings, info = _read(clips[name], "nvdec", "all")
    assert len(warnings) == 1 and warnings[0].startswith("W_DECODER_FALLBACK:") and words in warnings[0]
    assert nvdec.STATS["created"] == 0
    want, _, want_info = _read(clips[name], "pyav", "all")
    assert info == want_info
    _same_frames(got, want)
    if name == "anamorphic.ts":
        assert info.width == 171  # 128 pixels of 4:3, shown square


def test_unreferenced_pictures_before_a_run_are_not_decoded(nvdec, clips, monkeypatch):
    """As FFmpeg's skip_frame NONREF, NVDEC is not given the B-frames no picture refers to on
    the way to a run: fewer packets decoded, the same frames."""
    import vqa.decode.nvdec as nvdec_module

    want = _read(clips["h264.mp4"], "pyav", "default")[0]
    for name in ("h264.mp4", "hevc.mkv"):
        nvdec.STATS["packets"] = 0
        got = _read(clips[name], "nvdec", "default")[0]
        fed, nvdec.STATS["packets"] = nvdec.STATS["packets"], 0
        with monkeypatch.context() as m:
            m.setattr(nvdec_module, "_unreferenced", lambda annexb, hevc: False)
            every = _read(clips[name], "nvdec", "default")[0]
        assert fed < nvdec.STATS["packets"], name
        _same_frames(got, every)
        if name == "h264.mp4":
            _same_frames(got, want)


def test_unreferenced_reads_the_nal_headers():
    from vqa.decode.nvdec import _unreferenced

    sc = b"\0\0\1"
    assert _unreferenced(sc + b"\x09\xf0" + sc + b"\x01\x9e", hevc=False)  # AUD, B slice with nal_ref_idc 0
    assert not _unreferenced(sc + b"\x01\x9e" + sc + b"\x41\x9a", hevc=False)  # one slice referenced
    assert not _unreferenced(sc + b"\x65\x88", hevc=False)  # IDR
    assert not _unreferenced(sc + b"\x06\x05", hevc=False)  # SEI alone: no picture
    assert _unreferenced(b"\0" + sc + b"\x00\x01\xaf", hevc=True)  # TRAIL_N
    assert not _unreferenced(sc + b"\x02\x01\xaf", hevc=True)  # TRAIL_R
    assert not _unreferenced(sc + b"\x26\x01\xaf", hevc=True)  # IDR_W_RADL
    assert not _unreferenced(sc + b"\x4e\x01", hevc=True)  # SEI alone


def test_a_stream_cut_mid_gop_reads_as_pyavs(nvdec, clips, tmp_path):
    """The first picture FFmpeg decodes for the checks comes from the first packet alone when it
    is a keyframe; a stream cut after its keyframe (MPEG-TS starting on P and B packets) is
    decoded on until a picture comes, as the pyav reader does, and NVDEC still takes it."""
    cut = tmp_path / "cut.ts"
    with av.open(str(clips["h264.ts"])) as src, av.open(str(cut), "w", format="mpegts") as dst:
        stream = src.streams.video[0]
        out = dst.add_stream_from_template(stream)
        for n, packet in enumerate(src.demux(stream)):
            if n >= 5 and packet.size:
                packet.stream = out
                dst.mux(packet)
    with av.open(str(cut)) as check:
        assert not next(check.demux(video=0)).is_keyframe
    got, warnings, info = _read(cut, "nvdec", "all")
    want, _, want_info = _read(cut, "pyav", "all")
    assert warnings == [] and info == want_info and len(got) > 0
    _same_frames(got, want)
    assert nvdec.STATS["packets"] > 0


@pytest.mark.parametrize("fault, words", [("create", "could not start"), ("decode", "no picture"),
                                          ("pixels", "differs")])
def test_nvdec_faults_fall_back_per_video(nvdec, clips, fault, words):
    nvdec.FAULTS[fault] = True
    errors: list[int] = []
    got, warnings, _ = _read(clips["h264.mp4"], "nvdec", "default", errors)
    assert len(warnings) == 1 and warnings[0].startswith("W_DECODER_FALLBACK:") and words in warnings[0]
    assert errors == [0]  # NVDEC's failures before the fallback are not the video's corrupt frames
    _same_frames(got, _read(clips["h264.mp4"], "pyav", "default")[0])


def test_records_through_the_scorer_equal_pyavs(nvdec, clips):
    from vqa.scorer.local import Scorer

    records = {}
    for decoder in ("pyav", "nvdec"):
        with Scorer(workers=0, decoder=decoder) as scorer:
            records[decoder] = [scorer.score(str(clips[n])) for n in ("h264.mp4", "vp9.webm")]
    for a, b in zip(records["pyav"], records["nvdec"]):
        assert a.ok and b.ok
        assert (a.score, a.category, a.defects) == (b.score, b.category, b.defects)
        assert a.frames["sampled"] == b.frames["sampled"]
    assert any(w.startswith("W_DECODER_FALLBACK:") for w in records["nvdec"][1].warnings)
    assert records["nvdec"][1].config["decoder"] == "nvdec"


def test_without_the_package_nvdec_is_a_clear_backend_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # import fails as if not installed
    monkeypatch.delitem(decode._READERS, "nvdec", raising=False)
    monkeypatch.delitem(sys.modules, "vqa.decode.nvdec", raising=False)
    monkeypatch.delitem(vars(decode), "AVAILABLE_BACKENDS", raising=False)
    with pytest.raises(BackendUnavailable, match="PyNvVideoCodec"):
        decode.reader_class("nvdec")
    decode._READERS.pop("nvdec", None)


def test_nvdec_workers_get_no_address_space_limit_unless_asked(nvdec):
    assert ScoreOptions(decoder="pyav").resolve(4).worker_memory_mb == 4096
    assert ScoreOptions(decoder="nvdec").resolve(4).worker_memory_mb is None
    assert ScoreOptions(decoder="nvdec", worker_memory_mb=2048).resolve(4).worker_memory_mb == 2048


@pytest.mark.slow
def test_hostile_inputs_get_the_records_pyav_gives(nvdec, tmp_path, validate_record):
    """Every hostile case of tests/support/malformed_media.py ends as it does with pyav (status, error code,
    warnings), with W_DECODER_FALLBACK where NVDEC is not used: PyAV's checks stay in front.
    Scores are equal too, but where packets are corrupt: each decoder hides damage its own way."""
    from tests.support.malformed_media import CASES

    from vqa.scorer.local import Scorer

    with Scorer(workers=0, decoder="pyav") as pyav, Scorer(workers=0, decoder="nvdec") as nv:
        for name, (make, *_) in CASES.items():
            folder = tmp_path / name
            folder.mkdir()
            path = make(folder)
            a, b = validate_record(pyav.score(path)), validate_record(nv.score(path))
            assert (b["status"], (b["error"] or {}).get("code")) == (a["status"], (a["error"] or {}).get("code")), name
            same = {w.split(":")[0] for w in b["warnings"]} - {"W_DECODER_FALLBACK"}
            assert same == {w.split(":")[0] for w in a["warnings"]}, (name, a["warnings"], b["warnings"])
            if not any(w.startswith("W_CORRUPT_FRAMES") for w in a["warnings"]):  # decoders conceal
                assert (a["score"], a["defects"]) == (b["score"], b["defects"]), name  # errors apart


# --- --nvdec-workers: NVDEC workers beside the CPU ones ----------------------------------------

def test_nvdec_workers_options_are_checked(nvdec):
    from vqa.errors import UsageError

    assert ScoreOptions(nvdec_workers=2).resolve(4).nvdec_workers == 2
    assert ScoreOptions(nvdec_workers=2).resolve(4).worker_memory_mb == 4096  # the CPU workers keep theirs
    assert "nvdec_workers" not in ScoreOptions(nvdec_workers=2).resolve(4).record_config()
    for bad, words in [({"nvdec_workers": -1}, "integer >= 0"), ({"nvdec_workers": True}, "integer >= 0"),
                       ({"nvdec_workers": 1, "decoder": "opencv"}, "not beside 'opencv'"),
                       ({"nvdec_workers": 1, "decoder": "nvdec"}, "not beside 'nvdec'"),
                       ({"nvdec_workers": 1, "workers": 0}, "needs decode workers")]:
        with pytest.raises(UsageError, match=words):
            ScoreOptions(**bad).validate()


def test_nvdec_workers_without_the_package_is_a_clear_backend_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)
    monkeypatch.delitem(vars(decode), "AVAILABLE_BACKENDS", raising=False)
    monkeypatch.delitem(decode._READERS, "nvdec", raising=False)
    monkeypatch.setattr(decode, "missing_package", lambda b: "not installed" if b == "nvdec" else None)
    with pytest.raises(BackendUnavailable, match="PyNvVideoCodec"):
        ScoreOptions(nvdec_workers=1).validate()


@pytest.mark.slow
def test_nvdec_workers_beside_cpu_ones_make_the_cpu_records(nvdec, clips, tmp_path, monkeypatch):
    """One CPU worker and one NVDEC worker (spawned: each imports the stand-in from a file, and
    notes its pid where it makes a decoder): every record is the one CPU workers alone make,
    VP9 included, whose hand-back to FFmpeg is no warning here; and the NVDEC worker did decode."""
    from vqa.scorer.local import Scorer

    log = tmp_path / "created.txt"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "PyNvVideoCodec.py").write_text(
        "import os\n"
        "from tests.support.fake_nvdec import PacketData, cudaVideoCodec, CreateDecoder as _create\n"
        "def CreateDecoder(*args, **kwargs):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(f'{os.getpid()}\\n')\n"
        "    return _create(*args, **kwargs)\n")
    monkeypatch.syspath_prepend(str(shim))  # spawned workers get the parent's sys.path
    monkeypatch.syspath_prepend(str(Path(fake_nvdec.__file__).resolve().parents[2]))
    paths = [str(clips[n]) for n in ("h264.mp4", "vp9.webm", "hevc.mkv", "h264.ts")] * 2
    with Scorer(workers=1) as cpu:
        want = list(cpu.score_many(paths))
    with Scorer(workers=1, nvdec_workers=1) as both:
        got = list(both.score_many(paths))
        cpu_pid, nvdec_pid = both._engine.pool.pids
    for a, b in zip(want, got):
        assert a.ok and b.ok, (a.error, b.error)
        assert (a.score, a.category, a.defects, a.warnings) == (b.score, b.category, b.defects, b.warnings), a.path
        assert a.frames["sampled"] == b.frames["sampled"] and a.config == b.config
    assert not any(w.startswith("W_DECODER_FALLBACK") for r in got for w in r.warnings)
    makers = {int(p) for p in log.read_text().split()}
    assert makers == {nvdec_pid}, (makers, cpu_pid, nvdec_pid)

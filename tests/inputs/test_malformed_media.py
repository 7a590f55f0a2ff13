"""Hostile inputs hurt nothing: each gets exactly one honest record, in bounded time and memory.

The cases are made by tests/support/malformed_media.py. Each is scored alone in this process (workers=0), then
all of them at once, between good clips, by a parallel Scorer (workers=2).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.engine import wait_until
from tests.support.malformed_media import (CASES, UNREADABLE, ffconcat, good_clip, hls_playlist, huge_resolution,
                                           truncated_with_index, variable_fps)

from vqa import Scorer
from tests.support.required import REQUIRED_DECODERS

from vqa.decode import open_video
from vqa.errors import InputError
from vqa.sample import plan_frames

HERE = Path(__file__).resolve().parent
BACKENDS = list(REQUIRED_DECODERS)  # a missing one fails its tests, never drops them
BATCH_DEADLINE_S = 120  # the whole hostile batch; it takes a few seconds
HUGE_RSS_LIMIT_MB = 1536  # scoring the 16000x16000 file; unguarded decoding peaks near 2 GB
NOBODY = 65534


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str | bytes]:
    """Every hostile case, each made in its own folder (names like good.mp4 do not clash)."""
    root = tmp_path_factory.mktemp("hostile")
    made = {}
    for name, (make, *_expected) in CASES.items():
        folder = root / name
        folder.mkdir()
        made[name] = make(folder)
    return made


@pytest.fixture(scope="module")
def scorer():
    with Scorer(workers=0, threads=2) as s:
        yield s


def check(record, name: str, path, validate_record) -> None:
    _make, status, code, warnings = CASES[name]
    d = validate_record(record)
    assert d["path"] == os.fsdecode(path)
    assert (d["status"], (d["error"] or {}).get("code")) == (status, code), (name, d["error"])
    codes = {w.split(":", 1)[0] for w in d["warnings"]}
    for wanted in warnings:  # "A|B": either code will do
        assert codes & set(wanted.split("|")), (name, d["warnings"])
    if status == "ok":
        assert d["score"] is not None and d["frames"]["sampled"] > 0


@pytest.mark.parametrize("name", list(CASES))
def test_case_alone(inputs, scorer, validate_record, name):
    record = scorer.score(inputs[name])
    check(record, name, inputs[name], validate_record)
    if name == "rotated":  # coded 64x48, displayed a quarter turn round
        assert (record.video.width, record.video.height, record.video.rotation) == (48, 64, 90)
    if name in ("tiny_1x1", "odd_33x17"):
        assert (record.video.width, record.video.height) == {"tiny_1x1": (1, 1),
                                                             "odd_33x17": (33, 17)}[name]


def test_batch_in_parallel_one_record_each_in_order(inputs, tmp_path, validate_record):
    """Good clips between the hostile ones all score; nothing is lost, doubled or reordered,
    and the whole batch finishes well within the deadline."""
    good = [good_clip(tmp_path, f"good{i}.mp4", seed=i) for i in range(3)]
    paths, expect = [good[0]], ["good"]
    for i, name in enumerate(CASES):
        paths += [inputs[name]]
        expect += [name]
        if i % 8 == 7:
            paths += [good[(i // 8 + 1) % 3]]
            expect += ["good"]
    records, failure = [], []

    def run():
        try:
            with Scorer(workers=2, threads=2) as s:
                records.extend(s.score_many(paths))
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    worker.start()
    worker.join(BATCH_DEADLINE_S)
    assert not worker.is_alive(), f"hostile batch still running after {BATCH_DEADLINE_S} s"
    if failure:
        raise failure[0]
    assert len(records) == len(paths)
    for path, name, record in zip(paths, expect, records):
        if name == "good":
            assert record.path == path and record.status == "ok", record.error
            assert not record.warnings, record.warnings
        else:
            check(record, name, path, validate_record)
    print(f"{len(paths)} inputs in {time.monotonic() - t0:.1f} s")


def test_unreadable_file(tmp_path, scorer, validate_record):
    """Mode 000. Root reads anything, so as root the scoring runs as 'nobody' (effective uid
    only, restored after), on a file in a folder 'nobody' may enter."""
    make, status, code, _ = UNREADABLE
    if os.geteuid() != 0:
        path = make(tmp_path)
        record = scorer.score(path)
    else:
        folder = Path(tempfile.mkdtemp(prefix="vqa-unreadable-"))
        try:
            folder.chmod(0o755)
            path = make(folder)
            scorer.score(good_clip(folder, "warm.mp4"))  # lazy imports done while still root
            os.seteuid(NOBODY)
            try:
                record = scorer.score(path)
            finally:
                os.seteuid(0)
        finally:
            for p in folder.iterdir():
                p.unlink()
            folder.rmdir()
    d = validate_record(record)
    assert (d["status"], d["error"]["code"]) == (status, code), d["error"]


# --- playlists and concat scripts never read what they name -------------------------------------

class OpenWatcher:
    """Tells whether anyone opens a FIFO for reading, without strace: a non-blocking open for
    writing succeeds only while a reader has it open (ENXIO otherwise). A reader blocked in
    open() is released by it and then reads end-of-file, so nothing can hang."""

    def __init__(self, fifo: Path):
        self.fifo, self.opened, self._stop = fifo, False, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.001)
                continue
            self.opened = True
            os.close(fd)

    def __enter__(self) -> "OpenWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.05)  # a last look
        self._stop.set()
        self._thread.join()


def test_fifo_watcher_sees_a_reader(tmp_path):
    fifo = tmp_path / "seg.ts"
    os.mkfifo(fifo)
    with OpenWatcher(fifo) as watcher:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert wait_until(lambda: watcher.opened, 10)
        finally:
            os.close(fd)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [hls_playlist, ffconcat], ids=["hls", "ffconcat"])
def test_playlists_never_open_what_they_name(tmp_path, backend, make):
    fifo = tmp_path / "seg.ts"
    os.mkfifo(fifo)
    path = make(tmp_path, target=fifo.name)
    with OpenWatcher(fifo) as watcher:
        with pytest.raises(InputError) as err:
            open_video(path, backend=backend)
    assert err.value.code == "E_NOT_VIDEO"
    assert not watcher.opened, f"{backend} opened the file {Path(path).name} names"


# --- caps ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("cap") / "clip.mp4"
    write_clip(path, textured_frames(50, 48, 64))  # 2 s at 25 fps
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_cap(clip, backend):
    with open_video(clip, backend=backend, max_frames=7) as reader:
        got = list(reader.read(plan_frames(reader.info, "all")))
    assert len(got) == 7 and reader.frames_decoded <= 8
    assert any(w.startswith("W_CAPPED:") for w in reader.warnings), reader.warnings
    with open_video(clip, backend=backend, max_frames=50) as reader:  # exactly enough
        assert len(list(reader.read(plan_frames(reader.info, "all")))) == 50
    assert not reader.warnings


@pytest.mark.parametrize("backend", BACKENDS)
def test_duration_cap(clip, backend):
    with open_video(clip, backend=backend, max_duration_s=0.5) as reader:
        got = list(reader.read(plan_frames(reader.info, "all")))
    assert got and max(f.pts_s for f in got) <= 0.5 + 1e-6 and len(got) <= 13
    assert any(w.startswith("W_CAPPED:") for w in reader.warnings)
    with open_video(clip, backend=backend, max_duration_s=0.5) as reader:
        plan = plan_frames(reader.info, "default")  # runs across 2 s: the later ones are skipped
        got = list(reader.read(plan))
    assert got and all(f.pts_s <= 0.5 + 1e-6 for f in got)
    assert any(w.startswith("W_CAPPED:") for w in reader.warnings)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pixel_cap_is_a_reader_option(clip, backend):
    with pytest.raises(InputError) as err:
        open_video(clip, backend=backend, max_pixels=64 * 48 - 1)
    assert err.value.code == "E_TOO_MANY_PIXELS"
    with open_video(clip, backend=backend, max_pixels=64 * 48) as reader:
        assert len(list(reader.read(plan_frames(reader.info, 4)))) == 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, codec", [("cfr.mp4", "libx264"), ("cfr.mkv", "libx264"),
                                         ("cfr.webm", "libvpx-vp9"), ("cfr.ts", "libx264")])
@pytest.mark.parametrize("fps", [25, 30000 / 1001])
def test_constant_rate_is_not_variable(tmp_path, backend, name, codec, fps):
    path = tmp_path / name
    write_clip(path, textured_frames(40, 48, 64), fps=fps, codec=codec,
               options=None if codec == "libx264" else {})
    for frames in ("all", "default"):
        with open_video(path, backend=backend) as reader:
            list(reader.read(plan_frames(reader.info, frames)))
        assert not reader.warnings, (frames, reader.warnings)


def test_huge_resolution_memory_is_bounded(tmp_path):
    """Peak RSS of a process scoring the 16000x16000 file stays far below what decoding one
    of its frames would take."""
    path = huge_resolution(tmp_path)
    script = (
        "import resource, sys\n"
        "from vqa import Scorer\n"
        "with Scorer(workers=0, threads=1) as s:\n"
        "    r = s.score(sys.argv[1])\n"
        "print(r.error['code'] if r.error else r.status)\n"
        # VmHWM is this program's own peak. ru_maxrss is not: Linux carries the high-water mark
        # of the address space it was spawned from (vfork) across exec, here pytest's.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "peak = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(peak // 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                         timeout=120, cwd=HERE.parents[1])
    assert out.returncode == 0, out.stderr
    code, peak_mb = out.stdout.split()
    assert code == "E_TOO_MANY_PIXELS"
    assert int(peak_mb) < HUGE_RSS_LIMIT_MB, f"peak RSS {peak_mb} MB"


def test_every_frame_reading_reports_truncation_against_the_declared_count(tmp_path):
    """--frames all has no planned count to fall short of: the container's own frame count is
    the measure, and only where the container states one (a VFR estimate is no promise)."""
    cut, good, vfr = truncated_with_index(tmp_path), good_clip(tmp_path), variable_fps(tmp_path)
    with Scorer(frames="all", workers=0) as s:
        records = {os.path.basename(r.path): r for r in s.score_many([cut, good, vfr])}
    codes = {name: {w.split(":", 1)[0] for w in r.warnings} for name, r in records.items()}
    assert "W_TRUNCATED" in codes[os.path.basename(cut)]
    assert codes[os.path.basename(good)] == set()
    assert codes[os.path.basename(vfr)] == {"W_VARIABLE_FPS"}


@pytest.mark.parametrize("frames", ["all", "default", 24])
def test_avi_with_b_frames_gets_timestamps_in_display_order(tmp_path, frames):
    """AVI has no presentation times, so FFmpeg labels H.264 B-frames in decode order
    (1, 4, 3, 5, 2...). Frame i is painted grey level 30 + 5 * (i % 40): each frame read must
    sit at its own timestamp, one after the other, with nothing skipped inside a run."""
    path = tmp_path / "bframes.avi"
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=25, options={"crf": "10", "g": "25", "bf": "3"})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(200):
            grey = np.full((48, 64, 3), 30 + 5 * (i % 40), np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")))
        container.mux(stream.encode())
    with open_video(path, backend="pyav") as reader:
        got = [(f.run, round(f.pts_s * 25), round((f.rgb.mean() - 30) / 5) % 40)
               for f in reader.read(plan_frames(reader.info, frames))]
        assert not reader.warnings
    assert len({(pts - index) % 40 for _, pts, index in got}) == 1  # one constant offset
    for (run_a, pts_a, _), (run_b, pts_b, _) in zip(got, got[1:]):
        assert pts_b > pts_a and (run_a != run_b or pts_b == pts_a + 1)


def test_a_matrix_with_no_angle_is_no_rotation(inputs, scorer):
    d = scorer.score(inputs["no_angle_matrix"]).to_dict()
    assert d["video"]["rotation"] == 0 and not any(w.startswith("W_ROTATED") for w in d["warnings"]), d
    assert (d["video"]["width"], d["video"]["height"]) == (64, 48)


@pytest.mark.parametrize("name", ["cut_in_index_early", "cut_in_index_middle", "cut_in_index_late"])
def test_an_mp4_cut_inside_its_index_says_so(inputs, scorer, name):
    error = scorer.score(inputs[name]).error
    # early: FFmpeg opened the file and found no stream; later cuts fail FFmpeg's own open
    assert error["code"] == "E_NOT_VIDEO" and "moov" in error["message"] and "cut" in error["message"], error


def _jump_ts(folder: Path) -> str:
    """An MPEG-TS whose timestamps jump 20 hours after its 50th frame (a remux gone wrong)."""
    plain, path = folder / "plain.ts", folder / "jump.ts"
    with av.open(str(plain), "w", format="mpegts") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for rgb in textured_frames(100, 48, 64):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        out.mux(stream.encode())
    with av.open(str(plain)) as src, av.open(str(path), "w", format="mpegts") as out:
        s_in = src.streams.video[0]
        s_out = out.add_stream_from_template(s_in)
        for k, packet in enumerate(p for p in src.demux(s_in) if p.size):
            if k >= 50:
                packet.pts += 90000 * 3600 * 20
                packet.dts += 90000 * 3600 * 20
            packet.stream = s_out
            out.mux(packet)
    return str(path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_timestamps_that_jump_never_say_nothing_was_decoded(tmp_path, backend):
    # The opencv reader decoded 51 frames and said "no frame of the video could be decoded".
    path = _jump_ts(tmp_path)
    with Scorer(workers=0, threads=1, decoder=backend) as scorer:
        d = scorer.score(path).to_dict()
    if d["status"] == "error":
        assert d["frames"]["decoded"] == 0 or "no frame" not in d["error"]["message"], d
    else:
        assert d["frames"]["sampled"] > 0


def test_an_mp4_cut_before_its_first_frame_says_it_was_cut(tmp_path, scorer):
    # The index whole, the frames cut after a few bytes: "no frame could be decoded", no reason.
    from tests.support.malformed_media import _encode_mp4

    path = tmp_path / "cut_frames.mp4"
    _encode_mp4(path, faststart=True)
    data = path.read_bytes()
    path.write_bytes(data[:data.find(b"mdat") + 64])
    error = scorer.score(str(path)).error
    assert error["code"] == "E_DECODE" and "its mdat box runs past its end" in error["message"], error

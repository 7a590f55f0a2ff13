"""The parallel engine: plan splitting, results that do not depend on workers or batch size,
input order, and shared memory that is always unlinked (normal end, Ctrl-C, killed processes).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.scenes import dead_leaves_frames, frozen_middle
from tests.support.engine import (STARTED, alive, assert_no_segment_left, children, decode_workers,
                            mapped_segments, psm_segments, read_line, run_with_deadline, wait_until)

from vqa import Scorer
from vqa.sample import plan_frames, split_plan
from vqa.types import Run, SamplePlan, VideoInfo
from vqa.decode import open_video
from vqa.engine.messages import DecodeTask
from vqa.engine.processes import WorkerPool

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "tests" / "support" / "engine.py"


# --- split_plan: pure planning, no video -----------------------------------------------------

def info(duration_s: float, fps: float = 25.0) -> VideoInfo:
    return VideoInfo(width=320, height=180, fps=fps, duration_s=duration_s,
                     frame_count=round(duration_s * fps), codec="h264")


@pytest.mark.parametrize("n_runs, parts", [(8, 2), (8, 3), (7, 2), (3, 5), (1, 2)])
def test_split_runs_into_contiguous_groups(n_runs, parts):
    plan = plan_frames(info(60.0), n_runs * 4)
    assert len(plan.runs) == n_runs
    whole, segments = split_plan(plan, parts)
    assert whole == plan
    assert len(segments) == min(parts, n_runs)
    rebuilt = []
    for sub, offset in segments:
        assert sub.runs, "an empty segment"
        assert offset == len(rebuilt)  # offset is the index of the segment's first run
        assert sub.runs == plan.runs[offset:offset + len(sub.runs)]
        assert (sub.mode, sub.requested) == (plan.mode, plan.requested)
        rebuilt += sub.runs
    assert tuple(rebuilt) == plan.runs  # every run once, in order
    sizes = [len(s.runs) for s, _ in segments]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("duration_s, keyframes, parts, cuts", [
    (10.0, [0.0, 2.0, 4.0, 6.0, 8.0], 2, [4.0]),  # 5.0 is equally far from 4 and 6: either is fine
    (10.0, [float(k) for k in range(10)], 2, [5.0]),
    (12.0, [float(k) for k in range(12)], 3, [4.0, 8.0]),
    (9.0, [0.0, 1.0, 7.5], 3, [1.0, 7.5]),  # uneven keyframes: uneven segments
    (9.0, [0.0, 0.5, 1.0], 3, [1.0]),  # both shares are nearest the same keyframe: one cut
])
def test_split_all_at_keyframes(duration_s, keyframes, parts, cuts):
    plan = plan_frames(info(duration_s), "all")
    split, segments = split_plan(plan, parts, keyframes_s=keyframes)
    edges = [r.span_start_s for r in split.runs] + [split.runs[-1].span_end_s]
    assert edges[0] == 0.0 and edges[-1] == duration_s  # tiles [0, duration) exactly
    for a, b in zip(split.runs, split.runs[1:]):
        assert a.span_end_s == b.span_start_s
    for cut in edges[1:-1]:
        assert cut in keyframes
        assert 0.0 < cut < duration_s
    # each cut is the keyframe nearest to its equal share of the timeline
    shares = [duration_s * i / parts for i in range(1, parts)]
    nearest = {min(keyframes, key=lambda k: abs(k - s)) for s in shares}
    assert set(edges[1:-1]) == {c for c in nearest if 0 < c < duration_s}
    if keyframes == [0.0, 2.0, 4.0, 6.0, 8.0]:
        assert edges[1:-1] in ([4.0], [6.0])
    else:
        assert edges[1:-1] == cuts
    assert all(r.count == 0 for r in split.runs)  # still "every frame" in each segment
    assert [o for _, o in segments] == list(range(len(split.runs)))
    for (sub, _), run in zip(segments, split.runs):
        assert sub.runs == (run,) and sub.mode == "all"


@pytest.mark.parametrize("keyframes", [[], [0.0], [0.0, 10.0]])
def test_split_all_without_usable_keyframes_stays_whole(keyframes):
    plan = plan_frames(info(10.0), "all")
    split, segments = split_plan(plan, 2, keyframes_s=keyframes)
    assert split == plan and segments == [(plan, 0)]


@pytest.mark.parametrize("plan", [
    plan_frames(info(60.0), "default"),
    plan_frames(info(10.0), "all"),
    SamplePlan("count", (Run(0.5, 4, 0.0, 1.0),), 4),
])
def test_split_into_one_part_is_the_plan_unchanged(plan):
    assert split_plan(plan, 1, keyframes_s=[0.0, 1.0, 2.0]) == (plan, [(plan, 0)])


# --- clips ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_clips(tmp_path_factory) -> dict[str, str]:
    """Three small clips; "long" has a keyframe every second so an "all" plan can be split."""
    folder = tmp_path_factory.mktemp("engine")
    scene = dead_leaves_frames(75, 270, 480, seed=3)
    recipes = {
        "long": (scene, {"crf": "20", "g": "25"}),  # 3 s, 480x270
        "texture": (textured_frames(50, 180, 320), {"crf": "18"}),  # 2 s, 320x180
        "frozen": (frozen_middle(dead_leaves_frames(50, 360, 640)), {"crf": "18"}),  # 2 s, 640x360
    }
    paths = {}
    for name, (frames, options) in recipes.items():
        paths[name] = str(folder / f"{name}.mp4")
        write_clip(paths[name], frames, fps=25, options=options)
    (folder / "random.mp4").write_bytes(os.urandom(20_000))
    paths["random"] = str(folder / "random.mp4")
    paths["missing"] = str(folder / "missing.mp4")
    return paths


def clip_list(clips) -> list[str]:
    return [clips["long"], clips["texture"], clips["frozen"]]


def summary(record) -> dict:
    """What must not depend on how the work was spread."""
    assert record.status == "ok", record.error
    return {"path": record.path, "category": record.category, "sampled": record.frames["sampled"],
            "defects": [(d.type, round(d.start_s, 3), round(d.end_s, 3)) for d in record.defects],
            "sampling": record.sampling, "warnings": record.warnings}


def assert_same(record, reference, label: str) -> None:
    assert summary(record) == summary(reference), label
    assert abs(record.score - reference.score) <= 0.01, f"{label}: {record.score} vs {reference.score}"


@pytest.fixture(scope="module")
def reference(engine_clips):
    """Records from workers=0, batch_size=16 (decoding in this process), per frames mode."""
    made: dict[str, dict[str, object]] = {}

    def get(frames: str) -> dict[str, object]:
        if frames not in made:
            paths = clip_list(engine_clips)
            with Scorer(workers=0, batch_size=16, frames=frames, threads=2) as scorer:
                made[frames] = dict(zip(paths, scorer.score_many(paths)))
        return made[frames]

    return get


class SubmitSpy:
    """Records the decode tasks the parent hands to the pool."""

    def __init__(self, monkeypatch):
        self.tasks: list = []
        real = WorkerPool.submit

        def submit(pool, task):
            self.tasks.append(task)
            real(pool, task)

        monkeypatch.setattr(WorkerPool, "submit", submit)

    def decode_tasks(self, path: str) -> list[DecodeTask]:
        return [t for t in self.tasks if isinstance(t, DecodeTask) and t.path == path]


# --- results do not depend on workers or batch size ------------------------------------------

# Every worker count and batch size in each mode; workers=0 with batch_size=16 is the reference,
# and workers=2 with batch_size=1 on "all" is test_one_frame_batches_through_a_small_ring.
GRID = [("default", 0, 1), ("default", 1, 7), ("default", 2, 16),
        ("all", 1, 16), ("all", 2, 7)]


@pytest.mark.slow
@pytest.mark.parametrize("frames, workers, batch_size", GRID)
def test_results_do_not_depend_on_workers_or_batch_size(engine_clips, reference, monkeypatch,
                                                        frames, workers, batch_size):
    ref = reference(frames)
    paths = clip_list(engine_clips)
    spy = SubmitSpy(monkeypatch)
    with Scorer(workers=workers, batch_size=batch_size, frames=frames, threads=2) as scorer:
        records = run_with_deadline(scorer, paths)
        assert [r.path for r in records] == paths
        for r in records:
            assert_same(r, ref[r.path], f"workers={workers} batch_size={batch_size} {r.path}")
        if workers == 2:
            # One video and two workers: the video itself is split (runs, or keyframes for "all").
            long = engine_clips["long"]
            spy.tasks.clear()
            (alone,) = run_with_deadline(scorer, [long])
            assert len(spy.decode_tasks(long)) == 2, "the plan was not split across the workers"
            assert_same(alone, ref[long], f"split across 2 workers, batch_size={batch_size}")


def test_the_long_clip_can_be_split_at_keyframes(engine_clips):
    """Precondition of the split cases above: the clip has keyframes inside it."""
    with open_video(engine_clips["long"]) as reader:
        keyframes = reader.keyframe_times(10_000)
    assert any(0.5 < k < 2.5 for k in keyframes), keyframes
    plan = plan_frames(info(3.0), "all")
    assert len(split_plan(plan, 2, keyframes_s=keyframes)[1]) == 2


# --- order and errors ------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_records_in_input_order_with_bad_files_between(engine_clips, workers):
    c = engine_clips
    paths = [c["texture"], c["missing"], c["long"], c["random"], c["frozen"]]
    with Scorer(workers=workers, threads=2) as scorer:
        records = run_with_deadline(scorer, paths)
    assert [r.path for r in records] == paths
    assert [r.status for r in records] == ["ok", "error", "ok", "error", "ok"]
    assert records[1].error["code"] == "E_NOT_FOUND"
    assert records[3].error["code"] not in ("E_INTERNAL", "E_WORKER_CRASH"), records[3].error
    assert all(r.error is None and r.score is not None for r in records[::2])


@pytest.mark.slow
def test_error_codes_do_not_depend_on_workers(engine_clips):
    paths = [engine_clips["random"], engine_clips["missing"]]
    codes = {}
    for workers in (0, 1):
        with Scorer(workers=workers, threads=2) as scorer:
            codes[workers] = [r.error["code"] for r in run_with_deadline(scorer, paths)]
    assert codes[0] == codes[1]


# --- shared memory and worker processes are always cleaned up --------------------------------

@pytest.mark.slow
def test_no_segment_left_after_a_normal_run(engine_clips):
    before, others = psm_segments(), mapped_segments(os.getpid())  # others: Scorers other tests keep
    with Scorer(workers=2, threads=2) as scorer:
        ours: set[str] = set()
        for record in scorer.score_many(clip_list(engine_clips)):
            ours |= mapped_segments(os.getpid()) - others
            assert record.status == "ok", record.error
        assert ours, "the parallel engine mapped no shared memory"
        workers = decode_workers(scorer)
        assert len(workers) == 2
    assert not [p for p in workers if p.is_alive()]
    assert_no_segment_left(before, ours, {os.getpid()}, wait_s=1.0)


@pytest.mark.slow
def test_score_keeps_the_worker_pool_between_calls(engine_clips):
    """Scorer.score on a pool must not tear the pool down: a new pool per video costs spawns."""
    with Scorer(workers=2, threads=2) as scorer:
        scorer.score(engine_clips["texture"])
        first = sorted(p.pid for p in decode_workers(scorer))
        scorer.score(engine_clips["texture"])
        second = sorted(p.pid for p in decode_workers(scorer))
    assert first, "no decode worker alive after score(): score() stopped the pool it had started"
    assert first == second, f"decode workers {first} were replaced by {second}"


def start_child(paths: list[str]) -> subprocess.Popen:
    """tests/support/engine.py scoring ``paths`` with workers=2, in its own session and process group."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    child = subprocess.Popen([sys.executable, str(HELPER), *paths], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    line = read_line(child)
    if not line.startswith(STARTED):
        child.kill()
        pytest.fail(f"child did not start: {line!r} {child.communicate()[1][-2000:]}")
    # Scoring has begun once the child maps the ring and its decode workers exist.
    assert wait_until(lambda: mapped_segments(child.pid) and len(children(child.pid)) >= 3, 30), \
        "the child never mapped its ring"
    return child


@pytest.fixture(scope="module")
def clip_20s(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("engine20") / "long20.mp4"
    write_clip(path, textured_frames(500, 180, 320, motion_px=1), fps=25, options={"crf": "23", "g": "25"})
    return str(path)


@pytest.fixture(scope="module")
def into_a_job(clip_20s, tmp_path_factory):
    """Starts the child on a 1 s clip and the 20 s one; returns once the first record is out,
    so the child is scoring the long clip: an event the child emits, not a guess at time."""
    short = tmp_path_factory.mktemp("engine1") / "short1.mp4"
    write_clip(short, textured_frames(25, 180, 320, motion_px=1), fps=25, options={"crf": "23", "g": "25"})

    def start() -> subprocess.Popen:
        child = start_child([str(short), clip_20s])
        line = read_line(child)
        assert line.startswith("RECORD ok"), line
        return child
    return start


def is_tracker(pid: int) -> bool:
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def kill_leftovers(pids) -> None:
    """SIGKILL what a failed test left running; the resource tracker last, once it had the
    chance to unlink what the others held (killing it first would leak the segment)."""
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        if not is_tracker(pid):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(alive(p) for p in pids), 5, poll_s=0.1)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_no_segment_left_after_ctrl_c(into_a_job):
    before = psm_segments()
    child = into_a_job()
    ours = mapped_segments(child.pid)
    family = {child.pid, *children(child.pid)}
    os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    try:
        _, err = child.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        kill_leftovers(family)
        pytest.fail("the child did not exit within 20 s of Ctrl-C")
    try:
        assert wait_until(lambda: not any(alive(p) for p in family - {child.pid}), 5), \
            f"processes left after Ctrl-C: {[p for p in family if alive(p)]}"
        assert "KeyboardInterrupt" in err or child.returncode != 0
        assert "leaked shared_memory" not in err, err[-2000:]
        assert_no_segment_left(before, ours, family)
    finally:
        kill_leftovers(family - {child.pid})


@pytest.mark.slow
def test_parent_killed_workers_exit_and_segment_goes(into_a_job):
    before = psm_segments()
    child = into_a_job()
    ours = mapped_segments(child.pid)
    family = set(children(child.pid))  # the resource tracker and the two decode workers
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    try:
        gone = wait_until(lambda: not any(alive(p) for p in family), 10, poll_s=0.2)
        stuck = {p: Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:80]
                 for p in family if alive(p)}
        assert gone, f"10 s after the parent was killed these still run: {stuck}; " \
                     f"segments left: {sorted(psm_segments() & ours)}"
        assert_no_segment_left(before, ours, family | {child.pid})
    finally:
        kill_leftovers(family)
        child.stdout.close()
        child.stderr.close()


def _scored_frames(scorer) -> bool:
    """Whether a video in the dispatcher's hands has frames back from inference (read from
    another thread: a dict that changes size meanwhile just means "not yet")."""
    try:
        return any(v.frames for v in list(scorer._engine._active.values()))
    except RuntimeError:
        return False


@pytest.mark.slow
def test_worker_killed_mid_job(engine_clips):
    before, others = psm_segments(), mapped_segments(os.getpid())  # others: Scorers other tests keep
    paths = [*clip_list(engine_clips), engine_clips["long"], engine_clips["texture"]]
    ours: set[str] = set()
    with Scorer(workers=2, frames="all", threads=2) as scorer:
        killer_done = threading.Event()
        killed: list[int] = []

        def kill_one():
            try:
                # Into the job: a video of this scorer has frames back from inference.
                if wait_until(lambda: len(decode_workers(scorer)) == 2 and _scored_frames(scorer), 30, poll_s=0.01):
                    ours.update(mapped_segments(os.getpid()) - others)
                    victim = decode_workers(scorer)[0].pid
                    os.kill(victim, signal.SIGKILL)
                    killed.append(victim)
            finally:
                killer_done.set()

        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        try:
            records = run_with_deadline(scorer, paths)
        finally:
            killer_done.wait(30)
        assert killed, "no decode worker was found to kill"
        assert [r.path for r in records] == paths  # every video has a record, in order
        for r in records:
            assert r.status == "ok" or r.error["code"] == "E_WORKER_CRASH", r.error
        assert any(r.status == "ok" for r in records)
        workers = decode_workers(scorer)
        assert len(workers) == 2 and killed[0] not in [p.pid for p in workers]  # replaced
    assert ours
    assert not [p for p in workers if p.is_alive()], "decode workers alive after close"
    assert_no_segment_left(before, ours, {os.getpid()}, wait_s=1.0)


@pytest.mark.slow
def test_idle_workers_killed_between_jobs(engine_clips):
    """The pool replaces workers that died while idle and the next job still completes."""
    before, others = psm_segments(), mapped_segments(os.getpid())  # others: Scorers other tests keep
    with Scorer(workers=2, threads=2) as scorer:
        assert run_with_deadline(scorer, [engine_clips["texture"]])[0].status == "ok"
        ours = mapped_segments(os.getpid()) - others
        victims = decode_workers(scorer)
        assert len(victims) == 2
        # Both wait for a task now: ready, and running none.
        assert wait_until(lambda: all(w.ready and w.task_id is None for w in scorer._pool._workers), 10)
        for p in victims:
            os.kill(p.pid, signal.SIGKILL)
        records = run_with_deadline(scorer, clip_list(engine_clips), deadline_s=12)
        assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
        replacements = decode_workers(scorer)
    assert not [p for p in replacements if p.is_alive()], "decode workers alive after close"
    assert_no_segment_left(before, ours, {os.getpid()}, wait_s=1.0)


# --- back-pressure end to end ----------------------------------------------------------------

@pytest.mark.slow
def test_one_frame_batches_through_a_small_ring(engine_clips, reference, monkeypatch):
    """batch_size=1: the ring has 2*workers+2 one-frame slots, far fewer than the frames."""
    long = engine_clips["long"]
    spy = SubmitSpy(monkeypatch)
    with Scorer(workers=2, batch_size=1, frames="all", threads=2) as scorer:
        (record,) = run_with_deadline(scorer, [long])
        assert scorer._ring.spec.slots == 6
    assert record.frames["sampled"] == 75
    assert len(spy.decode_tasks(long)) == 2  # split at a keyframe
    assert_same(record, reference("all")[long], "workers=2 batch_size=1")

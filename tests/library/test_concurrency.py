"""One Scorer shared: threads, futures, asyncio, cancellation, a failing engine, the default
Scorer of ``vqa.score``, and the thread budget. Throughput is measured by ``vqa bench``
(README, Performance), not here."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import CancelledError, Future, as_completed

import pytest
from tests.support.clips import textured_frames, write_clip

import vqa
import vqa.scorer.local
from vqa import Scorer
from vqa.threads import plan_threads, usable_cores

DEADLINE_S = 60  # 8 threads x 10 tiny clips take a few seconds; longer is a hang
THREADS, PER_THREAD = 8, 10


@pytest.fixture(scope="module")
def tiny_clips(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("concurrency")
    paths = []
    for k in range(PER_THREAD):
        path = folder / f"c{k}.mp4"
        write_clip(path, textured_frames(12, 96, 128, seed=k), fps=25)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def shared(tiny_clips):
    with Scorer(workers=2, threads=1, frames=8) as scorer:
        yield scorer


def judged(record) -> dict:
    """A record without ``frames.decoded``: what reaching the plan cost depends on whether the
    pool split the video between workers, which depends on how busy they were; the frames
    judged, the score and the defects do not."""
    d = record.to_dict()
    d["frames"] = {k: v for k, v in d["frames"].items() if k != "decoded"}
    return d

@pytest.fixture(scope="module")
def sequential(shared, tiny_clips) -> dict[str, dict]:
    return {r.path: judged(r) for r in shared.score_many(tiny_clips)}


@pytest.mark.slow
def test_eight_threads_get_the_sequential_records(shared, tiny_clips, sequential):
    """8 threads x 10 clips on one Scorer: each thread gets exactly the records of a
    sequential run, for its own paths, and nobody hangs (the bug: UnpicklingError, or a
    thread reading the other's worker message and both hanging)."""
    results: dict[int, list[dict]] = {}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        order = tiny_clips[t % PER_THREAD:] + tiny_clips[:t % PER_THREAD]  # a different order each
        try:
            if t % 2:
                results[t] = [judged(shared.score(p)) for p in order]
            else:
                results[t] = [judged(r) for r in shared.score_many(order)]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not [t for t in threads if t.is_alive()], "a thread sharing the Scorer hung"
    assert not errors, errors
    for t, records in results.items():
        order = tiny_clips[t % PER_THREAD:] + tiny_clips[:t % PER_THREAD]
        assert [r["path"] for r in records] == order
        for r in records:
            assert r == sequential[r["path"]]
    assert all(r["status"] == "ok" for r in sequential.values())


def test_submit_returns_futures_that_complete(shared, tiny_clips, sequential):
    futures = {shared.submit(p): p for p in tiny_clips}
    assert all(isinstance(f, Future) for f in futures)
    done = {futures[f]: judged(f.result()) for f in as_completed(futures, timeout=DEADLINE_S)}
    assert done == sequential


def test_ascore_from_asyncio(shared, tiny_clips, sequential):
    async def main():
        return await asyncio.wait_for(asyncio.gather(*(shared.ascore(p) for p in tiny_clips[:4])), DEADLINE_S)

    records = asyncio.run(main())
    assert [judged(r) for r in records] == [sequential[p] for p in tiny_clips[:4]]


def test_a_cancelled_future_leaves_the_scorer_working(shared, tiny_clips, sequential):
    futures = [shared.submit(p) for p in tiny_clips]
    cancelled = [f for f in futures[2:] if f.cancel()]
    # A future stays pending until its record is ready: the last one, cancelled microseconds
    # after it was submitted, cannot have a record yet.
    assert futures[-1] in cancelled and futures[-1].cancelled()
    for f in futures[:2]:
        assert judged(f.result(DEADLINE_S)) == sequential[f.result().path]
    for f in cancelled:
        with pytest.raises(CancelledError):
            f.result()
    assert judged(shared.score(tiny_clips[-1])) == sequential[tiny_clips[-1]]


def test_a_broken_engine_fails_its_callers_then_starts_afresh(tiny_clips, sequential):
    with Scorer(workers=1, threads=1, frames=8) as scorer:
        pool = scorer._pool

        def broken(*_a, **_k):
            raise RuntimeError("pool exploded")

        pool.get = broken
        with pytest.raises(RuntimeError, match="pool exploded"):
            scorer.submit(tiny_clips[0]).result(DEADLINE_S)
        record = scorer.score(tiny_clips[0])  # a new dispatcher, a new pool
        assert scorer._pool is not pool
        assert judged(record) == sequential[tiny_clips[0]]


def test_closed_scorer_refuses_work(tiny_clips):
    scorer = Scorer(workers=0, frames=8)
    scorer.close()
    with pytest.raises(RuntimeError, match="closed"):
        scorer.submit(tiny_clips[0])
    scorer.close()  # idempotent


def test_vqa_score_reuses_a_process_wide_scorer(tiny_clips, monkeypatch):
    """vqa.score used to build a Scorer per call: hash the weights, compile, spawn."""
    made: list[Scorer] = []
    real = vqa.scorer.local.Scorer

    class Counting(real):
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            made.append(self)

    monkeypatch.setattr(vqa.scorer.local, "Scorer", Counting)
    try:
        first = vqa.score(tiny_clips[0], workers=0, frames=8)
        second = vqa.score(tiny_clips[1], workers=0, frames=8)
        assert first.ok and second.ok
        assert len(made) == 1
        assert vqa.scorer.local.default_scorer(workers=0, frames=8) is made[0]
    finally:
        vqa.scorer.local._close_defaults()


# --- the thread budget ----------------------------------------------------------------------

@pytest.mark.parametrize("cores", [1, 2, 3, 4, 8, 64])
def test_busy_threads_never_exceed_the_cores(cores):
    b = plan_threads(cores=cores)
    assert b.workers >= 1 and b.inference_threads >= 1 and b.decode_threads == 1
    assert b.workers * b.decode_threads + b.inference_threads <= max(cores, 2)
    for workers in range(1, cores + 1):
        b = plan_threads(cores=cores, workers=workers)
        assert b.workers == workers and b.workers + b.inference_threads <= max(cores, workers + 1)


def test_usable_cores_follow_the_cgroup_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cores(tmp_path) == min(2, usable_cores(tmp_path / "none"))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == usable_cores(tmp_path / "none")
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(v1) == 1


def test_the_scorer_takes_the_budget(monkeypatch):
    """Before, workers came from os.cpu_count() and OpenVINO's threads were not set: on 2
    cores, 2 workers and 2 inference threads."""
    seen = {}
    real = vqa.scorer.local.open_inferencer

    def spy(spec, **kw):
        seen.update(kw)
        return real(spec, **kw)

    monkeypatch.setattr(vqa.scorer.local, "open_inferencer", spy)
    with Scorer(frames=8, cores=2) as scorer:
        assert (scorer.workers, scorer.threads) == (1, 1)
        assert seen["threads"] == 1
        assert len(scorer._pool.pids) == 1


def test_splitting_never_depends_on_the_traffic(shared, tmp_path, monkeypatch):
    """Whether a video is spread over the workers depends on the call, never on what else is
    queued (it did: a video admitted while the queue was short was split, and a split can
    change a damaged stream's warnings)."""
    from vqa.engine.messages import DecodeTask, ProbeDecodeTask
    from vqa.engine.processes import WorkerPool

    clips = []
    for k in range(6):  # a keyframe every 4 frames, so a plan of 2 runs can be cut in two
        clips.append(str(tmp_path / f"g{k}.mp4"))
        write_clip(clips[-1], textured_frames(12, 96, 128, seed=k), fps=25, options={"crf": "18", "g": "4"})
    decodes: dict[str, int] = {}
    real = WorkerPool.submit

    def spy(pool, task):
        if isinstance(task, (DecodeTask, ProbeDecodeTask)):  # a video not split: probed and decoded in one
            decodes[task.path] = decodes.get(task.path, 0) + 1
        real(pool, task)

    monkeypatch.setattr(WorkerPool, "submit", spy)
    shared.score(clips[0])  # alone: over both workers
    assert decodes == {clips[0]: 2}
    decodes.clear()
    list(shared.score_many(clips[1:4]))  # 3 videos for 2 workers: one worker each
    assert decodes == {p: 1 for p in clips[1:4]}
    decodes.clear()
    list(shared.score_many(clips[4:5]))  # fewer videos than workers: split
    assert decodes == {clips[4]: 2}
    decodes.clear()
    for f in [shared.submit(p) for p in clips[4:]]:
        f.result(DEADLINE_S)
    assert decodes == {p: 1 for p in clips[4:]}

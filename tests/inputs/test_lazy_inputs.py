"""Inputs read lazily: score_many and run_job over generators, bounded look-ahead, and one
path never taken for an iterable of characters. The million-path measurement of memory is
``vqa bench --study streaming`` (README, Performance)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from tests.support.fakes import FakeScorer, touch

from vqa import Scorer
from vqa.job import CHECKED, SCORED, run_job
from vqa.inputs import Input
from vqa.scorer.local import LOOKAHEAD_PER_WORKER


class Counted:
    """An endless generator of paths that do not exist, counting what was taken from it."""

    def __init__(self):
        self.taken = 0

    def __iter__(self):
        for k in itertools.count():
            self.taken += 1
            yield f"/nonexistent/vqa-stream/{k}.mp4"


@pytest.mark.parametrize("workers", [0, 1])
def test_first_record_before_the_input_is_read(workers):
    """score_many used to turn its input into a list: an endless generator never returned."""
    source = Counted()
    with Scorer(workers=workers, threads=1) as scorer:
        records = scorer.score_many(iter(source))
        first = next(records)
        assert first.error["code"] == "E_NOT_FOUND" and first.path.endswith("/0.mp4")
        bound = LOOKAHEAD_PER_WORKER * max(1, scorer.workers)
        assert source.taken <= bound + 1
        for k, record in zip(range(1, 500), records):
            assert record.path.endswith(f"/{k}.mp4")  # input order
            assert source.taken <= k + bound + 1  # bounded look-ahead all along
        records.close()


def test_every_record_of_a_long_generator_in_order():
    n = 3000
    with Scorer(workers=1, threads=1) as scorer:
        paths = (f"/nonexistent/vqa-stream/{k}.mp4" for k in range(n))
        got = [r.path for r in scorer.score_many(paths)]
    assert got == [f"/nonexistent/vqa-stream/{k}.mp4" for k in range(n)]


@pytest.mark.parametrize("one", ["clip.mp4", Path("clip.mp4"), b"clip.mp4"])
def test_one_path_is_not_an_iterable_of_characters(one):
    """score_many("clip.mp4") scored 8 "videos", one per character."""
    with Scorer(workers=0) as scorer:
        with pytest.raises(TypeError, match="iterable of paths"):
            scorer.score_many(one)
        assert scorer.score(one).path == "clip.mp4"  # one path is one video
        with pytest.raises(TypeError, match="path"):
            scorer.score(["clip.mp4"])
        with pytest.raises(TypeError, match="path"):
            list(scorer.score_many([123]))


def test_run_job_streams_its_inputs(tmp_path):
    """run_job stat'ed every file and asked the store about each before its first result."""
    clip = touch(tmp_path / "a.mp4")
    taken = []

    def inputs():
        for k in itertools.count():
            taken.append(k)
            yield Input(str(clip)) if k % 3 else Input(f"/missing/{k}.mp4", ("E_NOT_FOUND", "no such file"))

    outcomes = run_job(FakeScorer(), inputs(), model={}, config={})
    first = [next(outcomes) for _ in range(6)]
    assert [o.source for o in first] == [CHECKED, SCORED, SCORED] * 2
    assert len(taken) <= 6 + LOOKAHEAD_PER_WORKER
    outcomes.close()



def test_a_bad_item_or_a_failing_input_comes_after_the_records_before_it():
    """score_many read ahead and, on a bad item, raised before handing out the records of the
    paths already started: they were lost."""
    def failing():
        yield "/nonexistent/vqa-stream/0.mp4"
        yield "/nonexistent/vqa-stream/1.mp4"
        raise ValueError("the input broke")

    with Scorer(workers=1, threads=1) as scorer:
        got = []
        with pytest.raises(TypeError, match="must be a str, bytes or os.PathLike"):
            for record in scorer.score_many(["/nonexistent/vqa-stream/0.mp4", "/nonexistent/vqa-stream/1.mp4", 7]):
                got.append(record.path)
        assert [Path(p).name for p in got] == ["0.mp4", "1.mp4"]
        got = []
        with pytest.raises(ValueError, match="the input broke"):
            for record in scorer.score_many(failing()):
                got.append(record.path)
        assert [Path(p).name for p in got] == ["0.mp4", "1.mp4"]
        # and the Scorer still works
        assert [r.error["code"] for r in scorer.score_many(["/nonexistent/x.mp4"])] == ["E_NOT_FOUND"]
    def failing_early():
        yield "/nonexistent/vqa-stream/0.mp4"
        raise ValueError("the input broke early")

    with Scorer(workers=2, threads=1) as scorer:  # the first two are read before any is started
        got = []
        with pytest.raises(ValueError, match="broke early"):
            for record in scorer.score_many(failing_early()):
                got.append(record.path)
        assert [Path(p).name for p in got] == ["0.mp4"]

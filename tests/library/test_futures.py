"""Issue 17, item 0: the futures a Scorer returns behave as the standard library executors'
do. A cancelled future is finished at once for ``concurrent.futures.wait``, ``as_completed``
and ``asyncio.wrap_future``, before and after ``Scorer.close()``, with each engine."""
from __future__ import annotations

import asyncio
from concurrent.futures import as_completed, wait

import pytest
from tests.support.clips import textured_frames, write_clip

from vqa import Scorer

DEADLINE_S = 60  # three tiny clips take a second or two; past this it is a hang


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("futures")
    paths = []
    for k in range(6):
        path = folder / f"c{k}.mp4"
        write_clip(path, textured_frames(12, 96, 128, seed=k), fps=25)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module", params=[0, 1], ids=["workers=0", "workers=1"])
def scorer(request):
    with Scorer(workers=request.param, threads=1, frames=8) as s:
        yield s


def submit_and_cancel_the_second(scorer, clips):
    futures = [scorer.submit(p) for p in clips[:3]]
    assert futures[1].cancel() and futures[1].done() and futures[1].cancelled()
    return futures


def test_as_completed_yields_a_cancelled_future(scorer, clips):
    futures = submit_and_cancel_the_second(scorer, clips)
    seen = list(as_completed(futures, timeout=DEADLINE_S))  # TimeoutError, not a hang, if it fails
    assert sorted(map(futures.index, seen)) == [0, 1, 2]
    assert futures[0].result().status == "ok" and futures[2].result().status == "ok"


def test_wait_counts_a_cancelled_future_done(scorer, clips):
    futures = submit_and_cancel_the_second(scorer, clips)
    assert futures[1] in wait([futures[1]], timeout=DEADLINE_S).done
    done, not_done = wait(futures, timeout=DEADLINE_S)
    assert len(done) == 3 and not not_done


def test_asyncio_hears_of_a_cancelled_future(scorer, clips):
    async def main():
        futures = submit_and_cancel_the_second(scorer, clips)
        wrapped = [asyncio.wrap_future(f) for f in futures]
        return await asyncio.wait_for(asyncio.gather(*wrapped, return_exceptions=True), DEADLINE_S)

    results = asyncio.run(main())
    assert isinstance(results[1], asyncio.CancelledError)
    assert results[0].status == "ok" and results[2].status == "ok"


@pytest.mark.parametrize("workers", [0, 1])
def test_after_close_every_future_is_done_for_wait_and_as_completed(clips, workers):
    scorer = Scorer(workers=workers, threads=1, frames=8)
    futures = [scorer.submit(p) for p in clips]
    scorer.close()
    assert all(f.done() for f in futures)
    done, not_done = wait(futures, timeout=DEADLINE_S)
    assert len(done) == 6 and not not_done
    assert len(list(as_completed(futures, timeout=DEADLINE_S))) == 6

    async def gathered():
        return await asyncio.wait_for(asyncio.gather(*map(asyncio.wrap_future, futures),
                                                     return_exceptions=True), DEADLINE_S)

    assert len(asyncio.run(gathered())) == 6

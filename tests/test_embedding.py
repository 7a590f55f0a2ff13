"""The fifth attack: vqa inside host programs that set things up their own way. A host that turns
warnings into errors still gets a dropped Scorer released; a host with no home folder, or a
compiled-model cache it cannot use, still gets a Scorer."""
from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
import warnings

import pytest
from clips import textured_frames, write_clip
from engine_helpers import mapped_segments, wait_until

from vqa import Scorer

DEADLINE_S = 30  # a few tiny clips; past this it is a hang


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("embedding") / "c.mp4"
    write_clip(path, textured_frames(12, 96, 128), fps=25)
    return str(path)


def _engine_threads() -> int:
    return sum(t.name in ("vqa-dispatch", "vqa-engine", "vqa-close") for t in threading.enumerate())


@pytest.mark.parametrize("workers", [0, 1])
def test_a_dropped_scorer_is_released_when_warnings_are_errors(clip, workers, monkeypatch):
    # `python -W error` (or pytest's filterwarnings=error): the ResourceWarning was raised inside
    # __del__, swallowed there, and close() never ran: the worker, the ring, the thread and 8
    # descriptors stayed for the life of the process, and nothing was said.
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    gc.collect()
    before_children = {p.pid for p in multiprocessing.active_children()}
    before_rings, before_threads = mapped_segments(os.getpid()), _engine_threads()
    before_fds = len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        scorer = Scorer(workers=workers, threads=1, frames=8)
        assert scorer.score(clip).status == "ok"
        del scorer  # never closed
        gc.collect()
    assert wait_until(lambda: _engine_threads() == before_threads, 10)
    assert {p.pid for p in multiprocessing.active_children()} <= before_children  # the worker is gone
    assert mapped_segments(os.getpid()) <= before_rings
    assert len(os.listdir("/proc/self/fd")) <= before_fds + 2
    # and the warning, an error here, is reported as an unclosed file's is ("Exception ignored in")
    assert [type(e) for e in reported] == [ResourceWarning], reported
    assert "unclosed Scorer" in str(reported[0])

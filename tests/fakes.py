"""A stand-in for vqa.Scorer, for CLI and job tests that need no model."""
from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path

from vqa.config import ScoreOptions
from vqa.job import ScorerLike
from vqa.model import ModelSpec
from vqa.types import VideoScore

FAKE_SPEC = ModelSpec(name="fake", version="0", directory=Path("."), files={}, sha256={"pytorch": "0" * 64},
                      outputs=(), view_size=224)


class FakeScorer(ScorerLike):
    """Stands in for vqa.Scorer (the ScorerLike a job drives): 'bad' in a file name gives an
    error record. ``options``: the ScoreOptions it was made with; ``engine``: the engine
    keywords (engine, actors_per_node) when the CLI passed any."""

    instances: list["FakeScorer"] = []
    workers = 1

    def __init__(self, options: ScoreOptions | None = None, **engine):
        self.options = options or ScoreOptions()
        self.engine = engine
        self.spec = FAKE_SPEC
        self.config = self.options.resolve(cores=2).record_config()
        self.closed = False
        self.seen: list[str] = []
        FakeScorer.instances.append(self)

    def score_many(self, paths):
        for p in paths:
            yield self.submit(p).result()

    def submit(self, p, split=False):
        self.seen.append(p)
        future = Future()
        if "bad" in os.path.basename(p):
            future.set_result(VideoScore(path=p, status="error",
                                         error={"code": "E_NOT_VIDEO", "message": "not a video"}))
        else:
            future.set_result(VideoScore(path=p, status="ok", score=70.0, category="good"))
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.closed = True


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path

"""A stand-in for vqa.Scorer, for CLI and job tests that need no model."""
from __future__ import annotations

import os
from concurrent.futures import Future

from vqa.types import VideoScore


class FakeScorer:
    """Stands in for vqa.Scorer: 'bad' in a file name gives an error record."""

    instances: list["FakeScorer"] = []

    def __init__(self, **options):
        self.options = options
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

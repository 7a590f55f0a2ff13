"""A stand-in for vqa.Scorer, for CLI and job tests that need no model."""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import Future

from vqa.config import ScoreOptions
from vqa.job import ScorerLike
from vqa.model import ModelSpec, load_model_spec
from vqa.types import VideoScore

# The shipped manifest's rules under another name: no model file is opened.
FAKE_SPEC: ModelSpec = dataclasses.replace(load_model_spec(), name="fake", version="0", sha256={"pytorch": "0" * 64})


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
        self.model = FAKE_SPEC.record(["pytorch"])
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


def fail_backend_import(monkeypatch, module: str, message: str) -> None:
    """Make vqa.infer's import of the backend ``module`` raise ImportError(``message``), as a
    missing or broken package would."""
    import vqa.infer

    real = vqa.infer.importlib.import_module

    def failing(name, *a):
        if name == module:
            raise ImportError(message)
        return real(name, *a)

    monkeypatch.setattr(vqa.infer.importlib, "import_module", failing)


def held_scorer(free: int, go: str | None = None) -> type[FakeScorer]:
    """A FakeScorer that scores its first ``free`` videos at once, then holds each further
    ``submit`` until the file ``go`` exists (never, when None; 120 s at most, so that a failed
    test leaves no process behind): a job that is still running for as long as the test needs,
    whatever the machine's speed. A signal ends the hold as it would end a real video's wait
    (Python runs the handler between the polls)."""
    import time

    class Held(FakeScorer):
        def submit(self, p, split=False):
            until = time.monotonic() + 120
            if len(self.seen) >= free:
                while (go is None or not os.path.exists(go)) and time.monotonic() < until:
                    time.sleep(0.01)
            return super().submit(p)

    return Held

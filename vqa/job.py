"""A batch job: every input ends with exactly one record, in input order, and a job store
(vqa.jobstore) lets a re-run skip what an earlier, possibly killed, run already finished.

    inputs (vqa.inputs) -> [job store hit | path check failed | Scorer.submit] -> Outcome
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from vqa.inputs import Input
from vqa.jobstore import Identity, JobStore, config_key
from vqa.types import VideoScore

SCORED, STORED, CHECKED = "scored", "stored", "checked"
LOOKAHEAD_PER_WORKER = 4  # inputs started ahead of the outcomes yielded, per decode worker


@dataclass(frozen=True)
class Outcome:
    record: dict[str, Any]  # VideoScore.to_dict(): the output contract
    source: str  # SCORED now, STORED by an earlier run, or CHECKED (failed before scoring)

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok"


def run_job(scorer, inputs: Iterable[Input | str], *, store: JobStore | None = None, retry_failed: bool = False,
            model: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> Iterator[Outcome]:
    """Yield one Outcome per input, in order. Each new record is committed to ``store``
    before it is yielded, so whatever the caller has written is also stored.

    ``inputs`` is read lazily: each is checked against the store and handed to
    ``scorer.submit`` when its turn comes, a bounded number ahead of the outcomes yielded,
    so the first outcome comes before a long input is read. ``model`` and ``config`` (what
    keys a stored record) default to the scorer's own."""
    model = scorer.spec.to_dict() if model is None else model
    config = dict(scorer.config) if config is None else config
    key = config_key(model, config)
    lookahead = LOOKAHEAD_PER_WORKER * max(1, getattr(scorer, "workers", 1) or 1)
    # As score_many does: a job of fewer videos than workers spreads each over all of them.
    split = isinstance(inputs, (list, tuple)) and len(inputs) < (getattr(scorer, "workers", 1) or 1)

    def start(item: Input) -> tuple[str, Input, Any]:
        if item.error is not None:
            code, message = item.error
            record = VideoScore(path=item.path, status="error", model=dict(model), config=dict(config),
                                error={"code": code, "message": message})
            return CHECKED, item, record.to_dict()
        identity = Identity.of(item.path) if store is not None else None
        status = store.status(identity, key) if identity is not None else None
        if status is not None and (status == "ok" or not retry_failed):
            return STORED, item, identity  # the record is read when its turn comes
        return SCORED, item, (identity, scorer.submit(item.path, split=True) if split else scorer.submit(item.path))

    def finish(kind: str, item: Input, value) -> Outcome:
        if kind == CHECKED:
            return Outcome(value, kind)
        if kind == STORED:
            return Outcome(store.get(value, key), kind)
        identity, future = value
        result = future.result()
        record = result.to_dict()
        if store is not None:
            # Keyed on the file the decoder opened, when the record says: a file replaced since
            # the lookup is stored as what was scored, not under the identity it had before.
            identity = Identity.of_opened(item.path, result.video) or identity
            if identity is not None:
                store.put(identity, key, record)
        return Outcome(record, SCORED)

    ahead: deque[tuple[str, Input, Any]] = deque()
    try:
        for item in inputs:
            ahead.append(start(item if isinstance(item, Input) else Input(item)))
            # The head goes out as soon as it can without waiting, or when the window is full.
            while ahead and (ahead[0][0] != SCORED or ahead[0][2][1].done() or len(ahead) >= lookahead):
                yield finish(*ahead.popleft())
        while ahead:
            yield finish(*ahead.popleft())
    finally:
        for kind, _item, value in ahead:  # stopped early (--fail-fast, Ctrl-C): stop their work
            if kind == SCORED:
                value[1].cancel()

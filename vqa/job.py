"""A batch job: every input ends with exactly one record, in input order, and a job store
(vqa.jobstore) lets a re-run skip what an earlier, possibly killed, run already finished.

    inputs (vqa.inputs) -> [job store hit | path check failed | Scorer.score_many] -> Outcome
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vqa.inputs import Input
from vqa.jobstore import Identity, JobStore, config_key
from vqa.types import VideoScore

SCORED, STORED, CHECKED = "scored", "stored", "checked"


@dataclass(frozen=True)
class Outcome:
    record: dict[str, Any]  # VideoScore.to_dict(): the output contract
    source: str  # SCORED now, STORED by an earlier run, or CHECKED (failed before scoring)

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok"


def run_job(scorer, inputs: list[Input | str], *, store: JobStore | None = None, retry_failed: bool = False,
            model: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> Iterator[Outcome]:
    """Yield one Outcome per input, in order. Each new record is committed to ``store``
    before it is yielded, so whatever the caller has written is also stored.

    ``model`` and ``config`` (what keys a stored record) default to the scorer's own."""
    inputs = [item if isinstance(item, Input) else Input(item) for item in inputs]
    model = scorer.spec.to_dict() if model is None else model
    config = dict(scorer.config) if config is None else config
    key = config_key(model, config)
    steps: list[tuple[str, Any]] = []
    for item in inputs:
        if item.error is not None:
            code, message = item.error
            record = VideoScore(path=item.path, status="error", model=dict(model), config=dict(config),
                                error={"code": code, "message": message})
            steps.append((CHECKED, record.to_dict()))
            continue
        identity = Identity.of(item.path) if store is not None else None
        status = store.status(identity, key) if identity is not None else None
        if status is not None and (status == "ok" or not retry_failed):
            steps.append((STORED, identity))  # the record is read when its turn comes
        else:
            steps.append((SCORED, identity))

    scored = scorer.score_many([item.path for item, (kind, _) in zip(inputs, steps) if kind == SCORED])
    try:
        for item, (kind, value) in zip(inputs, steps):
            if kind == CHECKED:
                yield Outcome(value, kind)
                continue
            if kind == STORED:
                yield Outcome(store.get(value, key), kind)
                continue
            result = next(scored, None)
            if result is None:
                raise RuntimeError(f"the scorer returned no record for {item.path!r}")
            record = result.to_dict()
            # Keyed on the file the decoder opened, when the record says: a file replaced since
            # the lookup is stored as what was scored, not under the identity it had before.
            identity = Identity.of_opened(item.path, result.video) or value
            if store is not None and identity is not None:
                store.put(identity, key, record)
            yield Outcome(record, SCORED)
    finally:
        scored.close()  # stopped early (--fail-fast, Ctrl-C): the scorer stops its tasks

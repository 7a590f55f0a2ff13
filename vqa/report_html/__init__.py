"""An HTML report over ``vqa score`` records: summary, one row per video, timelines, thumbnails.

    records = load_records("results.jsonl")
    write_report(records, "report.html", thumbnails=50)

The page is one self-contained file (vqa.report_html._page); its data is built and tested
apart from any HTML (vqa.report_html._data); thumbnails are decoded at report time through
the hardened decoder (vqa.report_html._thumbs).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from vqa.outputs import open_destination

from ._data import MAX_POINTS, display, downsample, load_records, row, summary, worst_rows
from ._page import PAGE_SIZE, content_security_policy, embed_json, render
from ._thumbs import TIMEOUT_S, make_thumbnails, plan_shots, request_for

DEFAULT_THUMBNAILS = 50  # rows (the lowest scores) that get thumbnails


def build_report(records: list[Mapping[str, Any]], *, thumbnails: int = DEFAULT_THUMBNAILS,
                 title: str = "vqa report", source: str = "",
                 progress: Callable[[int], None] | None = None, on_plan: Callable[[int], None] | None = None,
                 timeout_s: float | None = TIMEOUT_S) -> str:
    """The page's HTML. ``thumbnails``: how many of the lowest-scoring videos get thumbnails
    (0: none); ``on_plan(n)`` is told how many videos that is, ``progress(1)`` after each."""
    records = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
    rows = [row(i, r) for i, r in enumerate(records)]
    chosen = worst_rows(rows, thumbnails)
    requests = {i: request_for(rows[i], records[i]) for i in chosen}
    if on_plan is not None:
        on_plan(len(requests))
    if requests:
        make_thumbnails(list(requests.values()), progress=progress, timeout_s=timeout_s)
    thumbs = {i: [{**asdict(s), "problem": s.problem and display(s.problem)} for s in req.shots]
              for i, req in requests.items() if req.shots}
    return render(rows, summary(records, rows), thumbs, title=title, source=source)


def write_report(records: list[Mapping[str, Any]], out: str | os.PathLike, **options: Any) -> None:
    """Build the page and put it at ``out`` as every output is (vqa.outputs.open_destination):
    whole, through an exclusive temporary file, or directly to a device or FIFO. A page that
    cannot be written whole leaves ``out`` as it was."""
    text = build_report(records, **options)
    with open_destination(os.fspath(out), keep_on_error=False) as f:
        f.write(text)


__all__ = ["DEFAULT_THUMBNAILS", "MAX_POINTS", "PAGE_SIZE", "build_report", "content_security_policy", "downsample",
           "embed_json", "load_records", "plan_shots", "row", "summary", "worst_rows", "write_report"]

"""Records -> the data a report page is built from: summary counts, one row per video, and
each video's timeline reduced to at most ``MAX_POINTS`` buckets.

Pure data, no HTML and no decoding, so every number on the page is tested here. Records are
read as untrusted: a field of the wrong type counts as missing, never as an error.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vqa.aggregate import CATEGORIES
from vqa.errors import UsageError
from vqa.types import DEFECT_TYPES, MODEL_DEFECTS, ModelBlock, block_keys

# A timeline is drawn from at most this many points: a 2-hour video with --frames all (180,000
# frames) becomes 240 buckets of 30 s, each with the mean, lowest and highest frame score.
MAX_POINTS = 240
# A defect's probability curve is drawn only where it reaches this somewhere in the video.
PROB_SHOWN = 0.2
HISTOGRAM_BIN = 5  # score points per histogram bar: 20 bars over 0..100
SHOWN_CHARS = 2000  # of any one text (a path, a message, a warning); a real record's are far shorter
SHOWN_WARNINGS = 50  # of one video's warnings (a real record has a handful)
_SURROGATE = re.compile("[\ud800-\udfff]")


# A record is a few levels deep (record > timeline > point); anything deeper is no record, and
# would only find the limits of every recursive step after the parse (RecursionError).
MAX_DEPTH = 16
# Seconds, scores, rates: a real record's numbers are far below this. Larger ones (1e308) would
# overflow to infinity in the page's arithmetic (a segment's middle, a timeline's buckets).
MAX_MAGNITUDE = 1e15


def _hostile(record: Any) -> str | None:
    """Why ``record`` cannot be a vqa record although it parsed: too deep, or a number no
    measurement gives. Walked without recursion, so any depth is told, never crashed on."""
    stack = [(record, 1, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep (at {where or 'the top'})"
        if isinstance(value, float) and (math.isinf(value) or abs(value) > MAX_MAGNITUDE):
            return f"{where} is {value!r}, not a number a measurement gives"
        if isinstance(value, int) and abs(value) >= 1 << 63:  # past any count or size in bytes
            return f"{where} is a {len(str(abs(value)))}-digit integer, not a count a measurement gives"
        if isinstance(value, dict):
            stack.extend((v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value))
    return None


def _deepest_line(stripped: str, text: str) -> int:
    """The line of ``text`` where brackets outside strings first nest past MAX_DEPTH (the
    array's own counted), for an error that names it; the parser's RecursionError cannot."""
    depth, in_string, escaped, line = 0, False, False, 1 + text[:len(text) - len(stripped)].count("\n")
    for c in stripped:
        if c == "\n":
            line += 1
        elif in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH + 1:
                return line
        elif c in "]}":
            depth -= 1
    return line


def load_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a ``vqa score`` output: JSON Lines, or one JSON array (``--format json``).
    A line that is not a JSON object, or not one a vqa record can be (nested too deep, a number
    like 1e308), is a UsageError naming the line."""
    name = os.fsdecode(path)
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        where = "record"
        try:
            records = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise UsageError(f"{name} is not valid JSON: {e}") from None
        except RecursionError:
            raise UsageError(f"{name}, line {_deepest_line(stripped, text)}: nested too deeply to be "
                             "a vqa record") from None
        lines = list(enumerate(records if isinstance(records, list) else [records], 1))
    else:
        where = "line"
        lines = []
        for n, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    lines.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise UsageError(f"{name}, line {n}: not a JSON record ({e.msg}); "
                                     "expected the output of vqa score --format jsonl or json") from None
                except RecursionError:
                    raise UsageError(f"{name}, line {n}: nested too deeply to be a vqa record") from None
    for n, record in lines:
        if not isinstance(record, dict) or "path" not in record:
            raise UsageError(f"{name}, record {n}: not a vqa record (no 'path')")
        problem = _hostile(record)
        if problem is not None:
            raise UsageError(f"{name}, {where} {n}: not a vqa record: {problem}")
    return [record for _, record in lines]


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def display(x: Any) -> str:
    """Text to show: a non-UTF-8 name's raw bytes (lone surrogates, as os.fsdecode and the JSON
    output carry them) become a visible \\xNN, so no page ever holds a lone surrogate. Text past
    SHOWN_CHARS is cut, saying how much: a browser lays out 200,000 characters with no break
    in a table cell for most of a minute (RESULTS is untrusted)."""
    text = x if isinstance(x, str) else "" if x is None else str(x)
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}\u2026 ({len(text) - SHOWN_CHARS:,} more characters)"
    return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if ord(m.group()) >= 0xDC80
                          else "\ufffd", text)


def _dict(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def defects_of(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in _list(record.get("defects")):
        d = _dict(d)
        start, end, sev = _num(d.get("start_s")), _num(d.get("end_s")), _num(d.get("severity"))
        if d.get("type") in DEFECT_TYPES and start is not None and end is not None:
            out.append({"type": d["type"], "severity": sev or 0.0, "start_s": start, "end_s": max(end, start)})
    return out


def downsample(points: object, *, max_points: int = MAX_POINTS) -> dict[str, Any] | None:
    """A record's ``timeline`` as columns of at most ``max_points`` time buckets.

    ``t`` (the bucket's first frame time), ``s`` (mean score), ``lo``/``hi`` (lowest and highest
    frame score), ``n`` (frames in the bucket: the sampled positions), ``black``/``frozen``
    (1 where a frame of the bucket has the flag; left out when none has), and ``p``: for each
    model defect whose probability reaches PROB_SHOWN somewhere, its highest per bucket.
    ``worst``: time and score of the lowest-scoring frame that is not black. None when the
    record has no usable timeline."""
    pts = []
    for p in points if isinstance(points, list) else []:
        p = _dict(p)
        t, s = _num(p.get("t_s")), _num(p.get("score"))
        if t is not None and s is not None:
            pts.append((t, s, p))
    if not pts:
        return None
    pts.sort(key=lambda x: x[0])
    t0, t1 = pts[0][0], pts[-1][0]
    width = (t1 - t0) / max_points if len(pts) > max_points and t1 > t0 else 0.0
    buckets: list[list] = []
    for t, s, p in pts:
        key = min(int((t - t0) / width), max_points - 1) if width else len(buckets)
        if not buckets or buckets[-1][0] != key:
            buckets.append([key, []])
        buckets[-1][1].append((t, s, p))
    out: dict[str, Any] = {"t": [], "s": [], "lo": [], "hi": [], "n": [], "black": [], "frozen": [],
                           "p": {k: [] for k in MODEL_DEFECTS}}
    for _, items in buckets:
        scores = [s for _, s, _ in items]
        out["t"].append(round(items[0][0], 3))
        out["s"].append(round(sum(scores) / len(scores), 1))
        out["lo"].append(round(min(scores), 1))
        out["hi"].append(round(max(scores), 1))
        out["n"].append(len(items))
        for flag in ("black", "frozen"):
            out[flag].append(int(any(p.get(flag) is True for _, _, p in items)))
        for k in MODEL_DEFECTS:
            out["p"][k].append(round(max((_num(p.get(k)) or 0.0 for _, _, p in items)), 2))
    for flag in ("black", "frozen"):
        if not any(out[flag]):
            del out[flag]
    out["p"] = {k: v for k, v in out["p"].items() if max(v) >= PROB_SHOWN}
    if all(n == 1 for n in out["n"]):  # one frame a bucket: lo, hi and n say nothing more
        del out["lo"], out["hi"], out["n"]
    picture = [(s, t) for t, s, p in pts if p.get("black") is not True]
    if picture:
        s, t = min(picture)
        out["worst"] = {"t_s": t, "score": round(s, 1)}
    return out


def row(index: int, record: Mapping[str, Any]) -> dict[str, Any]:
    """One video's row: what the table shows, filters and sorts on, and its timeline."""
    video, error = _dict(record.get("video")), _dict(record.get("error"))
    ok = record.get("status") == "ok"
    category = record.get("category")
    return {
        "i": index,
        "path": display(record.get("path")),
        "status": "ok" if ok else "error",
        "score": _num(record.get("score")) if ok else None,
        "category": category if category in CATEGORIES else None,
        "defects": defects_of(record),
        "duration_s": _num(video.get("duration_s")),
        "width": _num(video.get("width")), "height": _num(video.get("height")),
        "fps": _num(video.get("fps")), "codec": display(video.get("codec")),
        "warnings": [display(w) for w in _list(record.get("warnings"))[:SHOWN_WARNINGS]],
        "error_code": display(error.get("code")) if error else "",
        "error_message": display(error.get("message")) if error else "",
        "timeline": downsample(record.get("timeline")) if "timeline" in record else None,
    }


def _bar(score: float, bin_width: int, bars: int) -> int:
    return min(int(max(score, 0.0) // bin_width), bars - 1)


def histogram(scores: Iterable[float], bin_width: int = HISTOGRAM_BIN) -> list[int]:
    """Counts of scores in [0, w), [w, 2w), ... with 100 in the last bar."""
    bins = [0] * math.ceil(100 / bin_width)
    for s in scores:
        bins[_bar(s, bin_width, len(bins))] += 1
    return bins


def histogram_categories(rows: Iterable[Mapping[str, Any]], bin_width: int = HISTOGRAM_BIN) -> list[dict[str, int]]:
    """Per histogram bar, its videos by the category their records give (best first; "" for
    none): the page colours each bar by these, so a bar never names a category of its own
    reckoning beside a row that says another (the bands are the model's, models/vqa.json)."""
    bins: list[Counter] = [Counter() for _ in range(math.ceil(100 / bin_width))]
    for r in rows:
        if r["score"] is not None:
            bins[_bar(r["score"], bin_width, len(bins))][r["category"] or ""] += 1
    return [{c: b[c] for c in (*CATEGORIES, "") if b[c]} for b in bins]


def summary(records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per status, category, defect type (videos with at least one such segment, and
    segments) and error code; the score histogram; the models and options the job used."""
    defect_videos: Counter[str] = Counter()
    defect_segments: Counter[str] = Counter()
    for r in rows:
        types = [d["type"] for d in r["defects"]]
        defect_segments.update(types)
        defect_videos.update(set(types))
    setups: Counter[str] = Counter()
    for rec in records:
        model, config = _dict(rec.get("model")), _dict(rec.get("config"))
        if model or config:
            key = json.dumps({"model": {k: model.get(k) for k in block_keys(ModelBlock)},
                              "config": dict(config)}, sort_keys=True, default=str)
            setups[key] += 1
    scores = [r["score"] for r in rows if r["score"] is not None]
    return {
        "videos": len(rows),
        "status": Counter(r["status"] for r in rows),
        "categories": {c: sum(r["category"] == c for r in rows) for c in CATEGORIES},
        "defect_videos": {t: defect_videos[t] for t in DEFECT_TYPES},
        "defect_segments": {t: defect_segments[t] for t in DEFECT_TYPES},
        "errors": dict(Counter(r["error_code"] or "?" for r in rows if r["status"] != "ok").most_common()),
        "histogram": histogram(scores),
        "histogram_categories": histogram_categories(rows),
        "mean_score": round(sum(scores) / len(scores), 1) if scores else None,
        "with_timeline": sum(r["timeline"] is not None for r in rows),
        "setups": [(json.loads(k), n) for k, n in setups.most_common()],
    }


def worst_rows(rows: Sequence[Mapping[str, Any]], n: int) -> list[int]:
    """Indexes of the ``n`` lowest-scoring ok rows (ties in input order): those that get thumbnails."""
    scored = sorted((r["score"], r["i"]) for r in rows if r["score"] is not None)
    return [i for _, i in scored[:max(n, 0)]]

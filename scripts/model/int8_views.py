"""Replay another INT8 IR on the views a judgement set's clips gave the network, for quick
iteration on quantization; the figures that count come from ``judgement.py score``.

``capture`` scores a set through ``vqa.Scorer`` (as ``judgement.py score`` does, one clip at a
time) and keeps, per clip, every view the inferencer was given and the frame results handed to
``vqa.aggregate.aggregate`` (written as ``<precision>_frames.pkl``, ``judgement.py``'s file).
``replay`` runs an IR on those views and writes the frame results with its outputs in place
of the network's, as ``<name>_frames.pkl``, for ``decide.py compare --other <name>``.

    python scripts/model/int8_views.py capture --data V4/val --precision int8
    python scripts/model/int8_views.py replay --data V4/val --xml CANDIDATE.xml --name cand
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import vqa
from vqa import aggregate as agg
from vqa.infer.openvino import OpenVINOInferencer


def capture(a) -> None:
    clips = [json.loads(line)["file"] for line in (a.data / "clips.jsonl").read_text().splitlines()]
    clips = clips[:a.limit] if a.limit else clips
    seen: list = []  # (views, outputs) per batch, of the clip being scored
    captured: list = []
    original_submit, original_agg = OpenVINOInferencer.submit, agg.aggregate

    def submit(self, views, done):
        kept = np.array(views, copy=True)

        def done_spy(out):
            if not isinstance(out, BaseException):
                seen.append((kept, np.array(out, copy=True)))
            done(out)
        original_submit(self, views, done_spy)

    def spy(frames, plan_, duration_s, decision):
        captured.append((frames, plan_, duration_s))
        return original_agg(frames, plan_, duration_s, decision)

    OpenVINOInferencer.submit = submit
    for mod in list(sys.modules.values()):
        if getattr(mod, "aggregate", None) is original_agg:
            mod.aggregate = spy
    views_out, index, frames_out = [], {}, {}
    row = 0
    with vqa.Scorer(workers=1, worker_memory_mb=None, cores=1, precision=a.precision) as scorer:
        for n, name in enumerate(clips):
            seen.clear()
            before = len(captured)
            r = scorer.score(a.data / "clips" / name)
            if not r.ok or len(captured) != before + 1:
                print(f"left out: {name}", flush=True)
                continue
            frames = captured[-1][0]
            views = np.concatenate([v for v, _ in seen])
            outs = np.concatenate([o for _, o in seen])
            # each frame's view: the row whose outputs are the frame's, bit for bit
            rows = [int(np.flatnonzero((outs == f.outputs).all(axis=1))[0]) for f in frames]
            index[name] = [row + i for i in rows]
            views_out.append(views)
            row += len(views)
            frames_out[name] = captured[-1]
            if n % 50 == 0:
                print(f"captured {n}/{len(clips)}", flush=True)
    np.save(a.data / "views.npy", np.concatenate(views_out))
    (a.data / "views_index.pkl").write_bytes(pickle.dumps(index))
    (a.data / f"{a.precision}_frames.pkl").write_bytes(pickle.dumps(frames_out))
    print(f"{len(index)} clips, {row} views")


def run_ir(xml: Path, views: np.ndarray, batch: int = 24) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                         "INFERENCE_NUM_THREADS": 1,
                                                         "PERFORMANCE_HINT": "LATENCY"})
    return np.concatenate([compiled(views[i:i + batch])[0] for i in range(0, len(views), batch)]).astype(np.float32)


def replay(a) -> None:
    views = np.load(a.data / "views.npy", mmap_mode="r")
    index = pickle.loads((a.data / "views_index.pkl").read_bytes())
    base = pickle.loads((a.data / "frames.pkl").read_bytes())
    t = time.perf_counter()
    outs = run_ir(a.xml, views)
    print(f"{len(views)} views in {time.perf_counter() - t:.0f} s", flush=True)
    out = {}
    for name, rows in index.items():
        frames, plan, duration = base[name]
        out[name] = ([replace(f, outputs=outs[r]) for f, r in zip(frames, rows)], plan, duration)
    (a.data / f"{a.name}_frames.pkl").write_bytes(pickle.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("capture", help="score a set, keeping every view and the frame results")
    c.add_argument("--data", type=Path, required=True)
    c.add_argument("--precision", default="int8")
    c.add_argument("--limit", type=int, default=0, help="the first N clips only")
    r = sub.add_parser("replay", help="run an IR on the kept views")
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--xml", type=Path, required=True)
    r.add_argument("--name", required=True, help="written as NAME_frames.pkl")
    a = ap.parse_args()
    {"capture": capture, "replay": replay}[a.step](a)


if __name__ == "__main__":
    main()

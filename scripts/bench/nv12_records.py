"""Records made from NV12 pictures prepared in torch (vqa.infer.nv12) against the CPU path's.

    PYTHONPATH=$PWD python scripts/bench/nv12_records.py --out nv12_records.json sample_videos/*.mp4 CLIPS...

Issue 34 moves colour conversion and view preparation onto the GPU, where they need not be
bit-identical to swscale and OpenCV; its tolerance is on the records: scores within 0.5 points
on mean and 2 at most, the same category for at least 98% of the clips. This measures that
tolerance without a GPU. Each clip is scored by ``vqa.Scorer`` (PyTorch backend, the CPU path
as users run it) and the frame results handed to ``vqa.aggregate`` are kept; then the same
frames (matched by timestamp) are decoded again, laid out as NVDEC lays out a picture (NV12),
prepared by ``NV12Preparer`` on the CPU, run through the same network, and aggregated with the
same decisions. The freeze comparison keeps the CPU path's pairing of frames and measures it
on the NV12 thumbnails. On the GPU the preparation runs the same torch code.
"""
from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

from vqa import aggregate as agg
from vqa.infer.network import QualityNet
from vqa.infer.nv12 import NV12Preparer, matrix_of, nv12_of, unsupported
from vqa.model import load_model_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
import threshold_test as tt  # noqa: E402  (scripts/model: the frame results the pipeline aggregates)


def nv12_frames(path: Path, cpu: list[agg.FrameResult], prep: NV12Preparer, net: QualityNet) -> list[agg.FrameResult]:
    """The CPU path's frames made again from NV12: same runs and times, new outputs and stats."""
    want = {round(f.pts_s, 4): k for k, f in enumerate(cpu)}
    out: list[agg.FrameResult | None] = [None] * len(cpu)
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        start, base = None, Fraction(stream.time_base)
        for frame in c.decode(stream):
            if frame.pts is None:
                continue
            start = frame.pts if start is None else start
            k = want.get(round(float((frame.pts - start) * base), 4))
            if k is None:
                continue
            if frame.format.name != "yuv420p":
                raise SystemExit(f"{path.name}: {frame.format.name} has no NV12 layout here")
            why = unsupported(frame.height, frame.width, prep.geometry, frame.colorspace, frame.color_range == 2)
            if why:
                raise SystemExit(f"{path.name}: {why}")
            nv = torch.from_numpy(nv12_of(frame))[None]
            m = matrix_of(frame.colorspace)
            with torch.inference_mode():
                outputs = net(prep.views(nv, m).permute(0, 3, 1, 2).float())[0].numpy()
            out[k] = agg.FrameResult(cpu[k].run, cpu[k].pts_s, outputs, prep.stats(nv, m)[0])
    missing = [cpu[k].pts_s for k, f in enumerate(out) if f is None]
    if missing:
        raise SystemExit(f"{path.name}: frames at {missing[:3]} s not found again")
    for k, f in enumerate(out):  # the freeze comparison, on the pairs the CPU path compared
        if cpu[k].stats.mad_prev is not None:
            f.stats.mad_prev = agg.thumb_mad(f.stats.thumb, out[k - 1].stats.thumb)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clips", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    spec = load_model_spec()
    decision = spec.decision
    net = QualityNet()
    net.load_state_dict(torch.load(spec.path("pytorch"), weights_only=True, map_location="cpu"))
    net.eval()
    prep = NV12Preparer(spec.preprocessing)
    frames = tt.capture_scores(a.clips, workers=1, model_dir=None, backend="pytorch")
    rows = []
    for path in a.clips:
        cpu = frames[path.name]
        mine = nv12_frames(path, cpu[0], prep, net)
        s0, c0, d0 = agg.aggregate(cpu[0], cpu[1], cpu[2], decision)
        s1, c1, d1 = agg.aggregate(mine, cpu[1], cpu[2], decision)
        frame_d = [abs(float(x.outputs[0] - y.outputs[0])) for x, y in zip(cpu[0], mine)]
        rows.append({"clip": path.name, "frames": len(mine), "cpu": {"score": s0, "category": c0,
                     "defects": sorted({d.type for d in d0})}, "nv12": {"score": s1, "category": c1,
                     "defects": sorted({d.type for d in d1})}, "score_diff": round(abs(s0 - s1), 3),
                     "frame_score_max_diff": round(max(frame_d), 3)})
        print(json.dumps(rows[-1]), flush=True)
    diffs = [r["score_diff"] for r in rows]
    summary = {"clips": len(rows), "mean_abs_score_diff": round(float(np.mean(diffs)), 3),
               "max_abs_score_diff": round(float(np.max(diffs)), 3),
               "same_category": sum(r["cpu"]["category"] == r["nv12"]["category"] for r in rows) / len(rows),
               "same_defects": sum(r["cpu"]["defects"] == r["nv12"]["defects"] for r in rows) / len(rows)}
    a.out.write_text(json.dumps({"command": " ".join(["python scripts/bench/nv12_records.py", *sys.argv[1:]]),
                                 "summary": summary, "clips": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How much placing the runs by keyframes moves scores: each clip scored with both plans.

    python scripts/bench/placement_delta.py sample_videos/*.mp4 /tmp/bench720.mp4
    python scripts/bench/placement_delta.py --gop 25 sample_videos/*.mp4   # re-encoded with a 1 s GOP first

For each clip the default plan is made twice from the same metadata, once without keyframes
(every run mid-span, as before) and once with the keyframe times the probe reads, and both
are scored by the same stages the engine runs (decode, fragments, OpenVINO fp32, aggregate),
side by side in one process. Prints one row per clip and the mean absolute change; --json
writes the rows; --every-frame also scores every frame, the score both plans estimate. ``--gop N`` first re-encodes each clip (x264 crf 12, keyframe every N
frames, into a temporary folder) so the clips have keyframes to be placed by.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import av
import numpy as np

from vqa.aggregate import FrameResult, FreezeChain, aggregate
from vqa.decode import open_video
from vqa.decode.base import KEYFRAME_SCAN_PACKETS
from vqa.infer import open_inferencer
from vqa.model import load_model_spec
from vqa.engine.frames import batches
from vqa.engine.local import OneBuffer  # the in-process engine's own batch buffer
from vqa.sample import plan_frames

BATCH = 4  # the default batch size (throughput mode)


def reencode(src: str, dst: str, gop: int) -> None:
    """``src`` as H.264 crf 12 with a keyframe every ``gop`` frames (no scene-cut keyframes)."""
    with av.open(src) as inp, av.open(dst, "w") as out:
        s_in = inp.streams.video[0]
        s_out = out.add_stream("libx264", rate=s_in.average_rate,
                               options={"crf": "12", "g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"})
        s_out.width, s_out.height, s_out.pix_fmt = s_in.codec_context.width, s_in.codec_context.height, "yuv420p"
        for frame in inp.decode(s_in):
            out.mux(s_out.encode(frame.reformat(format="yuv420p")))
        out.mux(s_out.encode())


def score(path: str, plan, inferencer, spec) -> tuple[dict, int]:
    """The in-process engine's frame loop and aggregation (vqa.engine.local), with ``plan``."""
    buffer = OneBuffer(BATCH, spec.preprocessing.view)
    with open_video(path) as reader:
        info = reader.info
        frames = []
        for _, metas in batches(reader, plan, buffer, BATCH, chain=FreezeChain(), geometry=spec.preprocessing):
            outputs = inferencer.infer(buffer.array[:len(metas)])
            frames += [FrameResult(m.run, m.pts_s, row, m.stats) for m, row in zip(metas, outputs)]
        decoded = reader.frames_decoded
    value, cat, defects = aggregate(frames, plan, info.duration_s, spec.decision)
    return {"score": value, "category": cat, "defects": sorted({d.type for d in defects})}, decoded


def compare(path: str, inferencer, spec, every_frame: bool = False) -> dict:
    with open_video(path) as reader:
        info, keys = reader.info, reader.keyframe_times(KEYFRAME_SCAN_PACKETS)
    old, new = plan_frames(info), plan_frames(info, keyframes_s=keys)
    (a, da), (b, db) = score(path, old, inferencer, spec), score(path, new, inferencer, spec)
    row = {"clip": os.path.basename(path), "keyframes": None if keys is None else len(keys),
           "old": a, "new": b, "delta": round(b["score"] - a["score"], 2),
           "decoded_old": da, "decoded_new": db, "sampled": new.requested}
    if every_frame:  # what both plans estimate: the score of every frame
        row["all"] = score(path, plan_frames(info, "all"), inferencer, spec)[0]
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("clips", nargs="+")
    p.add_argument("--gop", type=int, default=None, help="re-encode each clip first with this keyframe interval")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--every-frame", action="store_true",
                   help="also score every frame, and report each plan's distance from that score")
    args = p.parse_args(argv)
    rows = []
    spec = load_model_spec(None)
    with tempfile.TemporaryDirectory() as tmp, open_inferencer(spec, backend="openvino",
                                                                precision="fp32") as inferencer:
        for clip in args.clips:
            path = clip
            if args.gop:
                path = os.path.join(tmp, os.path.basename(clip))
                reencode(clip, path, args.gop)
            rows.append(compare(path, inferencer, spec, args.every_frame))
            r = rows[-1]
            print(f"{r['clip']:28s} keyframes {r['keyframes']!s:>4}  old {r['old']['score']:5.1f} "
                  f"{r['old']['category']:9s} new {r['new']['score']:5.1f} {r['new']['category']:9s} "
                  f"delta {r['delta']:+5.1f}  decoded {r['decoded_old']:4d} -> {r['decoded_new']:4d} "
                  f"for {r['sampled']}  defects {r['old']['defects']} -> {r['new']['defects']}", flush=True)
    deltas = np.abs([r["delta"] for r in rows])
    changed = [r["clip"] for r in rows if r["old"]["category"] != r["new"]["category"]]
    print(f"mean |delta| {deltas.mean():.2f}, max {deltas.max():.2f} over {len(rows)} clips; "
          f"category changed: {changed or 'none'}")
    if args.every_frame:
        gap = {k: np.mean([abs(r[k]["score"] - r["all"]["score"]) for r in rows]) for k in ("old", "new")}
        print(f"mean |plan - every frame|: middle placement {gap['old']:.2f}, keyframe placement {gap['new']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Model-card metrics, measured through the shipped pipeline on content never used in training.

    python scripts/evaluate.py --data data/ --content ../shared/data/content --out models/metrics.json

1. The validation set from make_dataset.py (500 clips): the trained network's per-frame
   outputs (``val_predictions.json``, written by train.py) pooled by vqa.aggregate's own
   rules -> SRCC/PLCC against VMAF and F1 per model defect.
2. The validation clips that came back from the GPU machine (``data/val/``), scored end to end
   by ``vqa.Scorer`` (decode -> OpenVINO) -> the same metrics, and the gap to (1) on them.
3. Frozen and black, which no network predicts: clips rendered here from validation stills,
   with and without a frozen stretch or a black stretch, scored end to end -> F1.
4. Monotonicity: for validation stills, each distortion at rising strength -> does the score
   fall at every step?
5. INT8 against FP32 (OpenVINO) on the clips of part 2.
6. Default sampling against every frame, on 10 s validation clips (``data/long/``, labels in
   ``data/long_val.json``; make_dataset.py --all-validation --frames 240 --max-height 480).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synth  # noqa: E402
from make_dataset import split_content  # noqa: E402
from train import TECHNICAL_KINDS, f1, plcc, srcc  # noqa: E402

import vqa  # noqa: E402
from vqa.aggregate import DEFECT_PROBABILITY, MIN_SEGMENT_FRAMES  # noqa: E402
from vqa.types import MODEL_DEFECTS  # noqa: E402

LADDERS = {  # distortion -> strengths, mildest first
    "blur": [0.7, 1.5, 2.5, 4.0],
    "noise": [4, 8, 16, 32],
    "compression": [0.8, 0.55, 0.3, 0.05],  # synth quality, 1 = best
    "scale": [1.5, 2.0, 3.0, 4.0],
}


def pooled(frames: np.ndarray) -> tuple[float, np.ndarray]:
    """Clip score and per-defect decision from per-frame outputs, by vqa.aggregate's rules."""
    score = float(np.clip(frames[:, 0], 0, 100).mean())
    flags = 1 / (1 + np.exp(-frames[:, 1:])) >= DEFECT_PROBABILITY
    # a defect is reported when MIN_SEGMENT_FRAMES consecutive frames are flagged
    run = np.zeros(flags.shape[1], int)
    found = np.zeros(flags.shape[1], bool)
    for row in flags:
        run = np.where(row, run + 1, 0)
        found |= run >= min(MIN_SEGMENT_FRAMES, len(frames))
    return score, found


def metrics(scores, vmaf, kinds, found, labels) -> dict:
    scores, vmaf = np.array(scores), np.array(vmaf)
    tech = np.array([k in TECHNICAL_KINDS for k in kinds])
    out = {"clips": len(scores), "technical_clips": int(tech.sum()),
           "srcc_technical": srcc(scores[tech], vmaf[tech]), "plcc_technical": plcc(scores[tech], vmaf[tech]),
           "srcc_all": srcc(scores, vmaf), "mae_technical": float(np.abs(scores[tech] - vmaf[tech]).mean())}
    found, labels = np.array(found), np.array(labels)
    for i, d in enumerate(MODEL_DEFECTS):
        out[f"f1_{d}"] = f1(found[:, i], labels[:, i])
    clean = np.array([k == "clean" for k in kinds])
    out["clean_clips_with_a_defect"] = int(found[clean].any(axis=1).sum())
    out["clean_clips"] = int(clean.sum())
    return out


def render_clip(still: np.ndarray, rng, frames=50, size=(640, 360)) -> np.ndarray:
    return synth.render([still], size[0], size[1], frames, rng)


def write(path: Path, frames: np.ndarray, quality: float = 0.85) -> Path:
    path.write_bytes(synth.encode(frames, "h264", quality, 25))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--content", type=Path, default=Path("../shared/data/content"))
    ap.add_argument("--out", type=Path, default=Path("models/metrics.json"))
    ap.add_argument("--stills", type=int, default=12, help="validation stills for parts 3 and 4")
    a = ap.parse_args()
    # Part 6 alone, for a quick look: --stills 0 skips parts 3 and 4.
    report = {}

    preds = json.loads((a.data / "val_predictions.json").read_text())["clips"]
    pooled_all = [pooled(np.array(c["frames"])) for c in preds]
    report["1_validation_set"] = metrics([p[0] for p in pooled_all], [c["vmaf"] for c in preds],
                                         [c["kind"] for c in preds], [p[1] for p in pooled_all],
                                         [[c["labels"][d] for d in MODEL_DEFECTS] for c in preds])
    print(json.dumps(report, indent=1), flush=True)

    by_file = {c["file"]: (c, p) for c, p in zip(preds, pooled_all)}
    files = sorted((a.data / "val").glob("val_*"))
    rows, int8 = [], []
    with vqa.Scorer(backend="openvino", frames="all") as scorer, \
            vqa.Scorer(backend="openvino", frames="all", precision="int8") as scorer8:
        for f in files:
            r = scorer.score(f)
            int8.append(scorer8.score(f).score)
            c, p = by_file[f.name]
            kinds_found = {d.type for d in r.defects}
            rows.append((r.score, c["vmaf"], c["kind"], [d in kinds_found for d in MODEL_DEFECTS],
                         [c["labels"][d] for d in MODEL_DEFECTS], abs(r.score - p[0])))
        part2 = metrics(*zip(*[row[:5] for row in rows]))
        part2["max_abs_gap_to_training_time_prediction"] = float(max(row[5] for row in rows))
        report["2_end_to_end_subset"] = part2
        fp32 = np.array([row[0] for row in rows])
        tech = np.array([row[2] in TECHNICAL_KINDS for row in rows])
        vmaf = np.array([row[1] for row in rows])
        report["5_int8_vs_fp32"] = {
            "clips": len(rows), "mean_abs_score_diff": float(np.abs(np.array(int8) - fp32).mean()),
            "max_abs_score_diff": float(np.abs(np.array(int8) - fp32).max()),
            "srcc_technical_fp32": srcc(fp32[tech], vmaf[tech]),
            "srcc_technical_int8": srcc(np.array(int8)[tech], vmaf[tech])}
        print(json.dumps(report["5_int8_vs_fp32"], indent=1), flush=True)
        print(json.dumps(part2, indent=1), flush=True)

        _, val_stills = split_content(a.content)
        rng = np.random.default_rng(7)
        picks = rng.choice(len(val_stills), size=a.stills, replace=False)
        stills = [cv2.cvtColor(cv2.imread(str(val_stills[i])), cv2.COLOR_BGR2RGB) for i in picks]
        truth, found = {"frozen": [], "black": []}, {"frozen": [], "black": []}
        clean_flagged, mono = 0, {k: [] for k in LADDERS}
        with tempfile.TemporaryDirectory() as tmp:
            for n, still in enumerate(stills):
                clip = render_clip(still, rng)
                cases = {"clean": clip.copy()}
                frozen = clip.copy()
                frozen[15:35] = frozen[15]
                cases["frozen"] = frozen
                black = clip.copy()
                black[30:] = 0
                cases["black"] = black
                for name, frames in cases.items():
                    r = scorer.score(write(Path(tmp) / f"{name}{n}.mp4", frames))
                    types = {d.type for d in r.defects}
                    for t in ("frozen", "black"):
                        truth[t].append(name == t)
                        found[t].append(t in types)
                    clean_flagged += name == "clean" and bool(types)
                for kind, ladder in LADDERS.items():
                    scores = []
                    for s in ladder:
                        frames = {"blur": lambda: synth.gaussian_blur(clip, s),
                                  "noise": lambda: synth.sensor_noise(clip, s, np.random.default_rng(1)),
                                  "compression": lambda: clip,
                                  "scale": lambda: synth.rescale(clip, s, cv2.INTER_AREA, cv2.INTER_CUBIC)}[kind]()
                        q = s if kind == "compression" else 0.9
                        scores.append(scorer.score(write(Path(tmp) / f"m{n}{kind}{s}.mp4", frames, q)).score)
                    mono[kind].append(scores)
        report["3_frozen_black"] = {t: f1(np.array(found[t]), np.array(truth[t], int)) for t in truth}
        report["3_frozen_black"]["clean_clips_with_a_defect"] = clean_flagged
        report["3_frozen_black"]["clean_clips"] = len(stills)
        report["4_monotonic"] = {
            k: {"strengths": LADDERS[k], "monotonic_share": float(np.mean([all(np.diff(s) < 0) for s in v])),
                "mean_scores": np.round(np.mean(v, axis=0), 1).tolist()} for k, v in mono.items()}
    long_labels = a.data / "long_val.json"
    if long_labels.exists():
        clips = [c for c in json.loads(long_labels.read_text()) if (a.data / "long" / c["file"]).exists()]
        scores = {}
        for frames in ("default", "all"):
            with vqa.Scorer(frames=frames) as scorer:
                scores[frames] = np.array([scorer.score(a.data / "long" / c["file"]).score for c in clips])
        vmaf = np.array([c["vmaf"] for c in clips])
        tech = np.array([c["spec"]["kind"] in TECHNICAL_KINDS for c in clips])
        report["6_default_vs_all_frames"] = {
            "clips": len(clips), "technical_clips": int(tech.sum()),
            **{f"srcc_{f}": srcc(scores[f], vmaf) for f in scores},
            **{f"srcc_technical_{f}": srcc(scores[f][tech], vmaf[tech]) for f in scores},
            "mean_abs_score_diff": float(np.abs(scores["default"] - scores["all"]).mean()),
            "max_abs_score_diff": float(np.abs(scores["default"] - scores["all"]).max())}
        print(json.dumps(report["6_default_vs_all_frames"], indent=1), flush=True)
    f1s = [report["1_validation_set"][f"f1_{d}"] for d in MODEL_DEFECTS] + \
          [report["3_frozen_black"][t] for t in ("frozen", "black")]
    report["macro_f1_eight_types"] = float(np.mean(f1s))
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("3_frozen_black", "4_monotonic", "macro_f1_eight_types")}, indent=1))


if __name__ == "__main__":
    main()

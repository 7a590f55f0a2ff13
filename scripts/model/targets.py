"""Issue 16's targets, measured from the records vqa.Scorer wrote for the labelled test set.

    python scripts/model/targets.py --clips test.json --records v3_records.jsonl [--records v2_records.jsonl]

``test.json`` is what ``make_dataset.py --test-ladders N --test M`` wrote (VMAF labels, the
noise-penalised target, the clip's spec); the records are ``evaluate.py test --records``.
Nothing here pools frames or applies thresholds: every number is read off the records.

The VMAF a viewer would give (``viewer_vmaf``) is the clip's VMAF against its reference as
shot (exposure counted: a darkened clip is poor to a viewer) less the noise penalty of
make_dataset.py (noise counted as a viewer sees it). Bands on it: 90+, 70-90, 50-70, 30-50,
under 30, matched to the categories excellent, good, fair, poor, bad.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from make_dataset import LADDERS
from train import TECHNICAL_KINDS, f1, srcc

CATEGORIES = ("excellent", "good", "fair", "poor", "bad")
BANDS = (90.0, 70.0, 50.0, 30.0)  # lower bounds of the VMAF bands, matched to CATEGORIES


def band(vmaf: float) -> int:
    return next((i for i, bound in enumerate(BANDS) if vmaf >= bound), len(BANDS))


def viewer_vmaf(clip: dict) -> float:
    return clip.get("vmaf_pristine", clip["vmaf"]) - (clip["vmaf"] - clip["target"])


def load_records(path: Path) -> dict[str, dict]:
    return {r["file"]: r for r in map(json.loads, path.read_text().splitlines())}


def types(record: dict) -> set[str]:
    return {d["type"] for d in record.get("defects", [])}


def share(found: np.ndarray) -> float | None:
    """The share of True in ``found``; None where there is nothing to count (not NaN, which JSON lacks)."""
    return float(found.mean()) if found.size else None


def targets(clips: list[dict], records: dict[str, dict]) -> dict:
    recs = [records[c["file"]] for c in clips]
    if not all(r["status"] == "ok" for r in recs):
        raise SystemExit("some test clips failed to score")
    score = np.array([r["score"] for r in recs])
    vmaf = np.array([c["vmaf"] for c in clips])
    target = np.array([c["target"] for c in clips])
    kind = np.array([c["spec"]["kind"] for c in clips])
    real = np.array([c["spec"].get("real", "") for c in clips])
    tech = np.isin(kind, TECHNICAL_KINDS) & (real == "")
    out: dict = {"clips": len(clips), "sources": len({c["source"] for c in clips})}
    out["srcc_vs_vmaf_technical"] = {"clips": int(tech.sum()), "value": srcc(score[tech], vmaf[tech])}
    out["srcc_vs_target_technical"] = {"clips": int(tech.sum()), "value": srcc(score[tech], target[tech])}

    steps: dict[int, dict] = {}
    for c, s in zip(clips, score):
        if "ladder" in c["spec"]:
            family, level = c["spec"]["ladder"]
            steps.setdefault(c["spec"]["seed"], {})[(family, level)] = s
    falling = {f: [bool(np.all(np.diff([st[("clean", 0)]] + [st[(f, k)] for k in range(len(LADDERS[f]))]) < 0))
                   for st in steps.values()] for f in LADDERS}
    out["ladders_falling_from_clean"] = {
        "ladders": len(steps), "all_families": share(np.array([x for v in falling.values() for x in v])),
        **{f: share(np.array(v)) for f, v in falling.items()}}

    clean_real = [r for r, x in zip(recs, real) if x == "clean"]
    flagged = [(c["source"], sorted(types(r))) for c, r, x in zip(clips, recs, real) if x == "clean" and types(r)]
    out["clean_real_with_a_defect"] = {"clips": len(clean_real), "flagged": len(flagged),
                                       "share": len(flagged) / max(1, len(clean_real)), "which": flagged}
    noisy = [("noise" in types(r)) for r, x in zip(recs, real) if x == "pair_noisy"]
    quiet = [("noise" in types(r)) for r, x in zip(recs, real) if x == "pair_clean"]
    out["polyu_pairs"] = {"pairs": len(noisy), "noisy_reported_noise": float(np.mean(noisy)) if noisy else None,
                          "clean_reported_noise": float(np.mean(quiet)) if quiet else None}

    coded = np.isin(kind, ("compression", "smear")) & (real == "")
    comp = np.array(["compression" in types(r) for r in recs])
    low, high = coded & (vmaf < 70), vmaf >= 90
    out["compression"] = {"codec_clips_vmaf_under_70": int(low.sum()), "found": share(comp[low]),
                          "clips_vmaf_90_or_more": int(high.sum()), "reported": share(comp[high])}

    for d in ("dark", "overexposed"):
        lab = np.array([c["labels"][d] for c in clips])
        found = np.array([d in types(r) for r in recs])
        night = np.array(["night" in c["spec"] or c["source"].startswith("lowlight") for c in clips]) & (lab == 0)
        out[f"f1_{d}"] = {"value": f1(found, lab), "positives": int((lab == 1).sum()),
                          "night_or_low_light_negatives": int(night.sum()),
                          "night_or_low_light_flagged": int(found[night].sum())}
    six = {}
    for d in ("blur", "noise", "compression", "low_resolution", "dark", "overexposed"):
        lab = np.array([c["labels"][d] for c in clips])
        six[d] = f1(np.array([d in types(r) for r in recs]), lab)
    out["f1_six_model_defects"] = six

    cat = np.array([CATEGORIES.index(r["category"]) for r in recs])
    viewer = np.array([band(viewer_vmaf(c)) for c in clips])
    plain = np.array([band(v) for v in vmaf])
    out["category_within_one_band"] = {"clips": len(clips),
                                       "viewer_vmaf": float(np.mean(np.abs(cat - viewer) <= 1)),
                                       "vmaf": float(np.mean(np.abs(cat - plain) <= 1)),
                                       "exact_viewer_vmaf": float(np.mean(cat == viewer))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=Path, required=True)
    ap.add_argument("--records", type=Path, action="append", required=True)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    clips = json.loads(a.clips.read_text())
    res = {p.stem: targets(clips, load_records(p)) for p in a.records}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

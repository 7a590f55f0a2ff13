"""Judgement v4's decision block: defect thresholds by cross-validation across sources, the
penalties of the defects the network does not see fitted to VMAF, and the targets of issue 32
measured on validation and test side by side, through the shipped rules (vqa.aggregate).

Input: folders that ``judgement.py make`` and ``judgement.py score`` filled (clips.jsonl, the
clips' per-frame VMAF, and the frame results the pipeline handed to aggregate).

    python scripts/model/decide.py fit --val V4/val --manifest models/vqa.json --out RESULTS/fit.json
    python scripts/model/decide.py fit --dark-only --val V4/val ...   # the dark rule alone
    python scripts/model/decide.py compare --other int8 --val V4/val --test V4/test --out RESULTS/int8.json
    python scripts/model/decide.py measure --val V4/val --test V4/test --decision v4=models/vqa.json \\
        --decision v3=OLD_VQA_JSON --out docs/model/results/judgement-v4/targets.json
    python scripts/model/decide.py ramp --other int8 --val V4/val --manifest models/vqa.json --out RESULTS/ramp.json

The rules, fixed before any test clip was scored:

- **Labels.** Ladder clips of a family are positives of its defect (blur and noise from their
  second level, compression and low resolution from their third, dark and overexposed at every
  level); clean ladders and the clean real pictures are negatives of every defect; the photos
  of low-light scenes are dark (make_dataset.LOW_LIGHT_SCENES, picked by eye; the daylight photos
  of that folder count for nothing), the PolyU noisy halves noise. Everything else is left out
  of that defect's count (a blurred clip may fairly be called low resolution).
- **Thresholds.** Per head (for dark, jointly with the mean luma and the median luma under
  which a frame is dark whatever the head says), five folds grouped by source: in each, the threshold with the best
  F1 on the other four folds (of a tie, the middle one); the head gets the median of the five. The out-of-fold F1 is
  reported beside it.
- **Penalties**, on validation ladder frames inside a reported segment, the network's score
  less the frame's VMAF: dark and overexposed as isotonic curves of mean luma (darker costs
  no less, brighter costs no less), frozen as the median, black as the median VMAF of a
  black frame (a frame's quality, not a loss).
- **Penalty ramp** (``ramp``, after the rest of the block): the dark and overexposed penalties
  rise across ``penalty_ramp`` logits centred on the heads' thresholds (vqa.aggregate). Of
  RAMPS, the smallest width with which, on validation, the other precision (INT8) moves scores
  by at most half its targets (mean 0.25, max 1.0 points; held-out gaps ran 1.5 times
  validation's) and no target is worse than with the step (SRCC and within-one-class by at
  most 0.005; the counts and shares not at all). None such: the smallest maximum, said so.

Long because the steps belong together: each reads the same clips through the same rules and
labels, so a threshold, a penalty and a target are measured alike.
"""
from __future__ import annotations

import argparse
import json
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np

from judgement import FPS, LADDERS, real_kind
from train import f1, srcc

from vqa import aggregate as agg
from vqa.types import MODEL_DEFECTS

BANDS = (90.0, 70.0, 50.0, 30.0)
GRID = np.round(np.concatenate([np.arange(0.05, 0.95, 0.05), np.arange(0.95, 0.999, 0.01), [0.995, 0.999]]), 3)
HEAD_OF = {"blur": "blur", "noise": "noise", "compression": "compression", "scale": "low_resolution",
           "dark": "dark", "overexposed": "overexposed"}
FIRST_POSITIVE = {"blur": 1, "noise": 1, "compression": 2, "scale": 2, "dark": 0, "overexposed": 0}


def load(folder: Path) -> list[dict]:
    """The folder's clips that were scored, each with its frame results under ``frames``."""
    clips = [json.loads(line) for line in (folder / "clips.jsonl").read_text().splitlines()]
    frames: dict = {}
    for p in sorted(folder.glob("frames*.pkl")):
        frames.update(pickle.loads(p.read_bytes()))
    out = [{**c, "frames": frames[c["file"]]} for c in clips if c["file"] in frames]
    # a ladder counts only when every step was scored
    whole = 1 + sum(len(v) for v in LADDERS.values())
    steps: dict[int, int] = {}
    for c in out:
        if c["family"] != "real":
            steps[c["seed"]] = steps.get(c["seed"], 0) + 1
    return [c for c in out if c["family"] == "real" or steps[c["seed"]] == whole]


def load_all(folders: list[Path]) -> list[dict]:
    """Several folders' clips together. Ladders made in different folders share seeds (and keys)
    but not their pictures, so each folder's seeds are kept apart; a real picture, the same file
    in every folder that holds it, counts once."""
    out: list[dict] = []
    seen: set[str] = set()
    for i, folder in enumerate(folders):
        for c in load(folder):
            if c["family"] == "real":
                if c["key"] not in seen:
                    seen.add(c["key"])
                    out.append(c)
            else:
                out.append({**c, "seed": f"{i}:{c['seed']}"})
    return out


def label(clip: dict, head: str) -> int:
    """1 positive, 0 negative, -1 left out (the module's rules)."""
    fam = clip["family"]
    if fam == "real":
        kind = real_kind(clip["source"], clip["real"])
        if kind == "clean":
            return 0
        if kind == "daylight":
            return -1
        return int({"low_light": "dark", "noisy": "noise"}[kind] == head) or -1
    if fam == "clean":
        return 0
    if HEAD_OF.get(fam) == head:
        return 1 if clip["level"] >= FIRST_POSITIVE[fam] else -1
    if fam == "dark_part" and head == "dark":
        return -1
    return -1


def with_thresholds(decision: agg.Decision, probs: dict[str, float]) -> agg.Decision:
    return replace(decision, defect_probability={**decision.defect_probability, **probs})


ALONE = (0.0, 20.0, 30.0, 40.0, 45.0, 50.0, 55.0, 60.0)  # dark_luma_alone's candidates
MEDIAN_ALONE = (None, 20.0, 30.0, 40.0, 45.0, 50.0, 60.0)  # dark_luma_p50_alone's (None: no rule)


def evidence(clip: dict, decision: agg.Decision) -> dict:
    """Per head, the threshold at which the clip would first report that defect: the largest
    probability that two frames in a row reach, on frames the head may speak for; for dark,
    one such number for each pair of bounds (ALONE on the mean luma, MEDIAN_ALONE on the
    median): a frame under either counts as certain."""
    fr, plan, duration = clip["frames"]
    opened = replace(with_thresholds(decision, {k: 0.0 for k in MODEL_DEFECTS}), dark_luma_alone=0.0,
                     dark_luma_p50_alone=None)
    a = agg.assess(fr, plan, duration, opened)
    mean = np.array([f.stats.luma_mean for f in fr])
    median = np.array([np.inf if f.stats.luma_p50 is None else f.stats.luma_p50 for f in fr])

    def pairs(p: np.ndarray) -> float:
        pair = np.minimum(p[:-1], p[1:]) if len(p) > 1 else p
        return float(pair.max()) if pair.size else 0.0

    out: dict = {}
    for k, kind in enumerate(MODEL_DEFECTS):
        p = np.where(a.covered[kind], a.probability[:, k], 0.0)  # frames allowed and not black
        out[kind] = pairs(p)
        if kind == "dark":
            out["dark_alone"] = [[pairs(np.where(((mean <= b) | (median <= (-1 if q is None else q))) & ~a.black,
                                                 1.0, p)) for q in MEDIAN_ALONE] for b in ALONE]
    return out


def best_threshold(ev: np.ndarray, lab: np.ndarray) -> float:
    """The best F1's threshold; where several tie, the middle one (the widest margin both ways)."""
    scores = np.array([f1(ev >= t, lab) for t in GRID])
    best = np.flatnonzero(scores >= scores.max() - 1e-9)
    return float(GRID[best[len(best) // 2]])


def choose_thresholds(clips: list[dict], decision: agg.Decision, folds: int = 5) -> dict:
    sources = sorted({c["source"] for c in clips})
    fold_of = {s: i % folds for i, s in enumerate(np.random.default_rng(4).permutation(sources))}
    fold = np.array([fold_of[c["source"]] for c in clips])
    ev = [evidence(c, decision) for c in clips]
    out: dict = {}
    lab = np.array([label(c, "dark") for c in clips])
    dark = np.array([e["dark_alone"] for e in ev])  # (clips, ALONE, MEDIAN_ALONE)
    grid = [(b, q, t) for b in range(len(ALONE)) for q in range(len(MEDIAN_ALONE)) for t in GRID]

    def dark_f1(rows: np.ndarray, b: int, q: int, t: float) -> float:
        return f1(dark[rows, b, q] >= t, lab[rows])

    picks_d, oof_d = [], np.zeros(len(clips), bool)
    for k in range(folds):
        train, held = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        scores = np.array([dark_f1(train, b, q, t) for b, q, t in grid])
        best = np.flatnonzero(scores >= scores.max() - 1e-9)
        b, q, t = grid[best[len(best) // 2]]
        picks_d.append((ALONE[b], MEDIAN_ALONE[q], float(t)))
        oof_d[held] = dark[held, b, q] >= t
    alone = float(np.median([p[0] for p in picks_d]))
    medians = [p[1] for p in picks_d]
    # the median bound: the fold majority's "no rule", else the median of the folds' bounds
    median = None if sum(m is None for m in medians) > folds // 2 else \
        float(np.median([m for m in medians if m is not None]))
    t_dark = float(np.median([p[2] for p in picks_d]))
    b = ALONE.index(min(ALONE, key=lambda x: abs(x - alone)))
    q = MEDIAN_ALONE.index(median if median is None else
                           min((m for m in MEDIAN_ALONE if m is not None), key=lambda x: abs(x - median)))
    out["dark_luma_alone"] = ALONE[b]
    out["dark_luma_p50_alone"] = MEDIAN_ALONE[q]
    dark_report = {"threshold": t_dark, "luma_mean_alone": ALONE[b], "luma_p50_alone": MEDIAN_ALONE[q],
                   "fold_choices": picks_d, "f1_out_of_fold": f1(oof_d, lab),
                   "f1_validation": f1(dark[:, b, q] >= t_dark, lab),
                   "positives": int((lab == 1).sum()), "negatives": int((lab == 0).sum())}
    for head in MODEL_DEFECTS:
        if head == "dark":
            out[head] = dark_report
            continue
        lab = np.array([label(c, head) for c in clips])
        e = np.array([x[head] for x in ev])
        if (lab == 1).sum() == 0:
            out[head] = {"threshold": decision.defect_probability[head], "kept": "no positives"}
            continue
        picks, oof = [], np.zeros(len(clips), bool)
        for k in range(folds):
            train, held = fold != k, fold == k
            t = best_threshold(e[train], lab[train])
            picks.append(t)
            oof[held] = e[held] >= t
        t = float(np.median(picks))
        out[head] = {"threshold": t, "fold_thresholds": picks, "f1_out_of_fold": f1(oof, lab),
                     "f1_validation": f1(e >= t, lab), "positives": int((lab == 1).sum()),
                     "negatives": int((lab == 0).sum())}
    return out


def frame_vmaf(clip: dict) -> np.ndarray:
    fr = clip["frames"][0]
    idx = np.clip(np.round(np.array([f.pts_s for f in fr]) * FPS).astype(int), 0, len(clip["frame_vmaf"]) - 1)
    return np.array(clip["frame_vmaf"])[idx]


def fit_penalties(clips: list[dict], decision: agg.Decision) -> tuple[agg.Penalties, dict]:
    from sklearn.isotonic import IsotonicRegression

    rows: dict[str, list] = {"dark": [], "overexposed": [], "frozen": [], "black": []}
    for c in clips:
        if c["family"] == "real":
            continue
        fr, plan, duration = c["frames"]
        a = agg.assess(fr, plan, duration, decision)
        vm = frame_vmaf(c)
        mean = np.array([f.stats.luma_mean for f in fr])
        for kind in rows:
            for i in np.flatnonzero(a.covered[kind] & (~a.covered["black"] if kind != "black" else True)):
                rows[kind].append((mean[i], a.network[i], vm[i]))
    report: dict = {k: {"frames": len(v)} for k, v in rows.items()}

    def curve(kind: str, falling: bool, top: float) -> agg.Curve:
        r = np.array(rows[kind]) if rows[kind] else np.zeros((0, 3))
        knots = np.linspace(0, 255, 52)
        if len(r) < 20:
            return agg.Curve(tuple(knots.tolist()), tuple([0.0] * len(knots)))
        iso = IsotonicRegression(increasing=not falling, y_min=0, y_max=100, out_of_bounds="clip")
        iso.fit(r[:, 0], np.clip(r[:, 1] - r[:, 2], 0, 100))
        pts = np.round(iso.predict(knots), 1)
        report[kind].update(luma_range=[float(r[:, 0].min()), float(r[:, 0].max())],
                            mean_loss=float(np.mean(np.clip(r[:, 1] - r[:, 2], 0, 100))))
        return agg.Curve(tuple(knots.round(1).tolist()), tuple(pts.tolist()))

    frozen = np.array(rows["frozen"]) if rows["frozen"] else np.zeros((0, 3))
    black = np.array(rows["black"]) if rows["black"] else np.zeros((0, 3))
    pen = agg.Penalties(
        black_frame=round(float(np.median(black[:, 2])), 1) if len(black) else 0.0,
        frozen_points=round(float(np.clip(np.median(frozen[:, 1] - frozen[:, 2]), 0, 100)), 1) if len(frozen) else 0.0,
        dark=curve("dark", True, 100), overexposed=curve("overexposed", False, 100))
    return pen, report


def fit(a) -> None:
    manifest = json.loads(a.manifest.read_text())
    decision = agg.Decision.from_manifest(manifest["decision"])
    clips = load_all(a.val)
    chosen = choose_thresholds(clips, decision)
    alone, median = chosen.pop("dark_luma_alone"), chosen.pop("dark_luma_p50_alone")
    if a.dark_only:  # the dark rule only; every other number stays as the manifest has it
        chosen = {"dark": chosen["dark"]}
    decision = replace(with_thresholds(decision, {k: v["threshold"] for k, v in chosen.items()}),
                       dark_luma_alone=alone, dark_luma_p50_alone=median)
    report: dict = {}
    if not a.dark_only:
        pen, report = fit_penalties(clips, replace(decision, penalties=agg.Penalties(
            0.0, 0.0, agg.Curve((0.0, 255.0), (0.0, 0.0)), agg.Curve((0.0, 255.0), (0.0, 0.0)))))
        decision = replace(decision, penalties=pen)
    manifest["decision"] = decision.to_manifest()
    res = {"command": "python scripts/model/decide.py " + " ".join(str(x) for x in a.argv),
           "validation_clips": len(clips), "sources": len({c["source"] for c in clips}),
           "thresholds": chosen, "penalty_frames": report if report else "kept (--dark-only)",
           "decision": decision.to_manifest()}
    text = json.dumps(res, indent=1)
    if a.write:  # the manifest and the record of how its block was chosen, together
        a.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
        (a.manifest.parent / "judgement.json").write_text(text + "\n")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


def band(v: float) -> int:
    return next((i for i, b in enumerate(BANDS) if v >= b), len(BANDS))


def measure_set(clips: list[dict], decision: agg.Decision) -> dict:
    recs = []
    for c in clips:
        fr, plan, duration = c["frames"]
        score, cat, defects = agg.aggregate(fr, plan, duration, decision)
        recs.append((score, cat, {d.type for d in defects}))
    score = np.array([r[0] for r in recs])
    cat = np.array([agg.CATEGORIES.index(r[1]) for r in recs])
    fam = np.array([c["family"] for c in clips])
    ladder = fam != "real"
    vmaf = np.array([c.get("vmaf", np.nan) for c in clips])
    out: dict = {"clips": len(clips), "ladders": len({c["seed"] for c in clips if c["family"] != "real"}),
                 "sources": len({c["source"] for c in clips})}
    no_noise = ladder & (fam != "noise")
    spatial = np.isin(fam, ("clean", "blur", "compression", "scale"))
    out["srcc_vs_vmaf_every_family"] = srcc(score[ladder], vmaf[ladder])
    out["srcc_vs_vmaf_every_family_but_noise"] = srcc(score[no_noise], vmaf[no_noise])
    out["srcc_vs_vmaf_spatial_coding"] = srcc(score[spatial], vmaf[spatial])
    out["by_family"] = {f: {"clips": int((fam == f).sum()), "mean_score": float(score[fam == f].mean()),
                            "mean_vmaf": float(np.nanmean(vmaf[fam == f]))} for f in ["clean", *LADDERS]}
    out["category_is_band_of_score"] = float(np.mean([agg.CATEGORIES.index(agg.category(s, decision)) == k
                                                      for s, k in zip(score, cat)]))
    vb = np.array([band(v) if not np.isnan(v) else -9 for v in vmaf])
    out["category_within_one_vmaf_band"] = float(np.mean(np.abs(cat[ladder] - vb[ladder]) <= 1))
    out["category_within_one_vmaf_band_but_noise"] = float(np.mean(np.abs(cat[no_noise] - vb[no_noise]) <= 1))
    out["category_exact_vmaf_band"] = float(np.mean(cat[ladder] == vb[ladder]))
    real = np.array([c.get("real", "") for c in clips])
    clean = real == "clean"
    flagged = [(c["source"], sorted(r[2])) for c, r, x in zip(clips, recs, clean) if x and r[2]]
    out["clean_real_with_a_defect"] = {"clips": int(clean.sum()), "flagged": len(flagged),
                                       "share": len(flagged) / max(1, int(clean.sum())), "which": flagged}
    kind = np.array([real_kind(c["source"], c["real"]) if c["family"] == "real" else "" for c in clips])

    def found_dark(which: np.ndarray) -> dict:
        return {"clips": int(which.sum()),
                "share": float(np.mean([("dark" in r[2]) for r, x in zip(recs, which) if x])) if which.any() else None,
                "scores": {c["source"]: float(s) for c, s, x in zip(clips, score, which) if x}}

    out["low_light_found_dark"] = found_dark(kind == "low_light")
    out["daylight_of_low_light_folder_found_dark"] = found_dark(kind == "daylight")
    out["low_light_folder_found_dark"] = found_dark((kind == "low_light") | (kind == "daylight"))
    pooled_pred, pooled_lab, per = [], [], {}
    for head in ("blur", "noise", "dark"):
        lab = np.array([label(c, head) for c in clips])
        # the real defects: noise and dark on real pictures; blur has no real positives, so its ladders count
        keep = (lab >= 0) & ((real != "") | (fam == "clean") | (fam == "blur")) if head == "blur" else \
            (lab >= 0) & (real != "")
        pred = np.array([head in r[2] for r in recs])
        per[head] = {"f1": f1(pred[keep], lab[keep]), "positives": int((lab[keep] == 1).sum())}
        pooled_pred.append(pred[keep])
        pooled_lab.append(lab[keep])
    out["real_defects_f1"] = {"pooled": f1(np.concatenate(pooled_pred), np.concatenate(pooled_lab)), **per}
    heads = {}
    for head in MODEL_DEFECTS:
        lab = np.array([label(c, head) for c in clips])
        heads[head] = f1(np.array([head in r[2] for r in recs]), lab)
    out["f1_every_head"] = heads
    steps: dict[int, dict] = {}
    for c, s in zip(clips, score):
        if c["family"] != "real":
            steps.setdefault(c["seed"], {})[(c["family"], c["level"])] = s
    falling = [bool(np.all(np.diff([st[("clean", 0)]] + [st[("noise", k)] for k in range(len(LADDERS["noise"]))]) < 0))
               for st in steps.values()]
    out["noise_ladders_falling"] = float(np.mean(falling)) if falling else None
    share = {f: [float(st[("clean", 0)] - st[(f, k)]) for st in steps.values() for k in range(len(LADDERS[f]))]
             for f in ("black", "frozen", "dark_part")}
    out["points_lost_by_share"] = {f: {str(lv): float(np.mean([st[("clean", 0)] - st[(f, k)] for st in steps.values()]))
                                       for k, lv in enumerate(LADDERS[f])} for f in share}
    return out


def measure(a) -> None:
    sets = {"validation": load_all(a.val), "test": load_all(a.test)}
    res: dict = {"command": "python scripts/model/decide.py " + " ".join(str(x) for x in a.argv)}
    for item in a.decision:
        name, path = item.split("=", 1)
        dec = agg.Decision.from_manifest(json.loads(Path(path).read_text())["decision"]) if name != "v3" else \
            v3_decision(Path(path))
        res[name] = {k: measure_set(v, dec) for k, v in sets.items() if v}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


def other_rows(folders: list[Path], other: str, decision: agg.Decision) -> list[tuple]:
    """(file, family, default's score, other's score, same category, default's frames, plan and
    duration, other's frames) for the clips scored both ways."""
    rows = []
    for folder in folders:
        base = {c["file"]: c for c in load(folder)}
        theirs = pickle.loads((folder / f"{other}_frames.pkl").read_bytes())
        for file in sorted(set(base) & set(theirs)):
            s_base, c_base, _ = agg.aggregate(*base[file]["frames"], decision)
            s_other, c_other, _ = agg.aggregate(*theirs[file], decision)
            rows.append((file, base[file]["family"], s_base, s_other, c_base == c_other, base[file]["frames"],
                         theirs[file][0]))
    return rows


def why(frames: tuple, other: list, decision: agg.Decision) -> dict:
    """One clip's gap split in two: the network's scores alone (the other's scores with the
    default's heads), and the decisions (the rest: the heads' flags and what they cost), with
    each frame whose cover differs."""
    fr, plan, duration = frames
    mixed = [replace(f, outputs=np.concatenate([g.outputs[:1], f.outputs[1:]])) for f, g in zip(fr, other)]
    s_base, s_mixed, s_other = (agg.aggregate(x, plan, duration, decision)[0] for x in (fr, mixed, other))
    a, b = agg.assess(fr, plan, duration, decision), agg.assess(other, plan, duration, decision)
    flips = []
    for kind in a.covered:
        k = MODEL_DEFECTS.index(kind) if kind in MODEL_DEFECTS else None
        for i in np.flatnonzero(a.covered[kind] != b.covered[kind]):
            flips.append({"frame": int(i), "defect": kind, "covered": [bool(a.covered[kind][i]), bool(b.covered[kind][i])],
                          "quality": [round(float(a.quality[i]), 1), round(float(b.quality[i]), 1)],
                          "luma_mean": round(float(fr[i].stats.luma_mean), 1),
                          **({} if k is None else {"probability": [round(float(a.probability[i, k]), 3),
                                                                   round(float(b.probability[i, k]), 3)],
                                                   "threshold": decision.defect_probability[kind]})})
    return {"network": round(s_mixed - s_base, 1), "decisions": round(s_other - s_mixed, 1),
            "mean_frame_score_diff": round(float((b.network - a.network).mean()), 2), "cover_differs": flips}


RAMPS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)  # penalty_ramp's candidates, logits
# the targets a ramp must not make worse: higher is better for all but the clean pictures' share
SRCC_LIKE = ("srcc_vs_vmaf_every_family", "srcc_vs_vmaf_every_family_but_noise", "srcc_vs_vmaf_spatial_coding",
             "category_within_one_vmaf_band")


def _targets(m: dict) -> dict[str, float]:
    return {**{k: m[k] for k in SRCC_LIKE}, "category_is_band_of_score": m["category_is_band_of_score"],
            "clean_real_with_a_defect": -m["clean_real_with_a_defect"]["share"],
            "low_light_found_dark": m["low_light_found_dark"]["share"] or 0.0,
            "real_defects_f1_pooled": m["real_defects_f1"]["pooled"],
            "noise_ladders_falling": m["noise_ladders_falling"] or 0.0}


def ramp(a) -> None:
    """Choose ``penalty_ramp`` on validation by the module's rule."""
    manifest = json.loads(a.manifest.read_text())
    step = replace(agg.Decision.from_manifest(manifest["decision"]), penalty_ramp=0.0)
    clips = load_all(a.val)
    base = _targets(measure_set(clips, step))
    table, chosen = [], None
    for width in (0.0, *RAMPS):
        dec = replace(step, penalty_ramp=width)
        d = np.array([abs(r[2] - r[3]) for r in other_rows(a.val, a.other, dec)])
        t = _targets(measure_set(clips, dec))
        worse = [k for k in t if base[k] - t[k] > (0.005 if k in SRCC_LIKE else 1e-9)]
        ok = bool(width > 0 and d.mean() <= 0.25 and d.max() <= 1.0 and not worse)
        table.append({"penalty_ramp": width, "mean_abs_score_diff": float(d.mean()),
                      "max_abs_score_diff": float(d.max()), "targets": t, "worse_than_step": worse, "passes": ok})
        if ok and chosen is None:
            chosen = width
    note = "the smallest width that passes"
    if chosen is None:
        chosen = min((r for r in table if r["penalty_ramp"] > 0), key=lambda r: r["max_abs_score_diff"])["penalty_ramp"]
        note = "none passes: the smallest maximum"
    res = {"command": "python scripts/model/decide.py " + " ".join(str(x) for x in a.argv),
           "rule": "the module's Penalty ramp", "penalty_ramp": chosen, "why": note, "validation": table}
    text = json.dumps(res, indent=1)
    if a.write:  # the manifest and judgement.json's copy of its block stay one
        manifest["decision"] = replace(step, penalty_ramp=chosen).to_manifest()
        a.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
        fitted_path = a.manifest.parent / "judgement.json"
        fitted = json.loads(fitted_path.read_text())
        fitted.update(decision=manifest["decision"], penalty_ramp=res)
        fitted_path.write_text(json.dumps(fitted, indent=1) + "\n")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


def compare(a) -> None:
    """Another backend or precision against the default under the manifest's decisions: each
    clip's two records, from the frame results ``judgement.py score`` kept of the same files
    with the defaults (frames.pkl) and with ``--precision``/``--backend`` (``--other``: the
    file's prefix, int8 for int8_frames.pkl, cuda-fp16 for cuda-fp16_frames.pkl). The ten largest
    gaps each say why (``why``)."""
    decision = agg.Decision.from_manifest(json.loads(a.manifest.read_text())["decision"])
    res: dict = {"command": "python scripts/model/decide.py " + " ".join(str(x) for x in a.argv)}
    for name, folders in (("validation", a.val), ("test", a.test)):
        rows = other_rows(folders, a.other, decision)
        if not rows:
            continue
        d = np.array([abs(r[2] - r[3]) for r in rows])
        res[name] = {"clips": len(rows), "mean_abs_score_diff": float(d.mean()), "max_abs_score_diff": float(d.max()),
                     "same_category": float(np.mean([r[4] for r in rows])),
                     "largest": [{"file": r[0], "family": r[1], "default": r[2], a.other: r[3],
                                  "why": why(r[5], r[6], decision)}
                                 for r in sorted(rows, key=lambda r: -abs(r[2] - r[3]))[:10]]}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


def v3_decision(manifest: Path) -> agg.Decision:
    """Version 3's thresholds under v4's rules with no penalties: the score as v3 gave it (black
    frames that make a segment aside). v3's category caps are not v4's rule, so are not measured."""
    block = json.loads(manifest.read_text())["decision"]
    block["dark"].setdefault("luma_mean_alone", 0.0)
    block["penalties"] = agg.Penalties(0.0, 0.0, agg.Curve((0.0, 255.0), (0.0, 0.0)),
                                       agg.Curve((0.0, 255.0), (0.0, 0.0))).to_manifest()
    return agg.Decision.from_manifest(block)


def main() -> None:
    import sys
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    f = sub.add_parser("fit", help="choose thresholds and fit penalties on validation")
    f.add_argument("--val", type=Path, nargs="+", required=True)
    f.add_argument("--manifest", type=Path, default=Path("models/vqa.json"))
    f.add_argument("--write", action="store_true",
                   help="write the decision block into the manifest, and the fit beside it (judgement.json)")
    f.add_argument("--dark-only", action="store_true",
                   help="choose the dark rule (threshold, mean and median luma bounds) and keep the rest of the block")
    f.add_argument("--out", type=Path, default=None)
    m = sub.add_parser("measure", help="issue 32's targets on validation and test, side by side")
    m.add_argument("--val", type=Path, nargs="*", default=[])
    m.add_argument("--test", type=Path, nargs="*", default=[])
    m.add_argument("--decision", action="append", required=True, metavar="NAME=MANIFEST",
                   help="v3=MANIFEST reads a version 3 manifest (its thresholds, no penalties)")
    m.add_argument("--out", type=Path, default=None)
    q = sub.add_parser("compare", help="another backend or precision against the default, under the manifest's decisions")
    q.add_argument("--other", default="int8", help="the other results' file prefix: int8, cuda-fp16, ...")
    q.add_argument("--val", type=Path, nargs="*", default=[],
                   help="folders scored twice: judgement.py score, and score with --precision or --backend")
    q.add_argument("--test", type=Path, nargs="*", default=[])
    q.add_argument("--manifest", type=Path, default=Path("models/vqa.json"))
    q.add_argument("--out", type=Path, default=None)
    r = sub.add_parser("ramp", help="choose the penalty ramp on validation (after fit)")
    r.add_argument("--other", default="int8", help="the other results' file prefix")
    r.add_argument("--val", type=Path, nargs="+", required=True)
    r.add_argument("--manifest", type=Path, default=Path("models/vqa.json"))
    r.add_argument("--write", action="store_true",
                   help="write penalty_ramp into the manifest's decision block and the choice into judgement.json")
    r.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    a.argv = sys.argv[1:]
    {"fit": fit, "measure": measure, "compare": compare, "ramp": ramp}[a.step](a)


if __name__ == "__main__":
    main()

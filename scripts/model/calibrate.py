"""Choose vqa.aggregate's decision thresholds on validation content, through the shipped pipeline.

Clips are made here from validation sources (scripts/model/content.py's val split), the way training
clips are, but at high codec quality (0.6-1) so that their labels need no VMAF: blur, noise,
low resolution, dark and overexposed come from what was applied. (Compression's label needs
the codec's VMAF, so its threshold is not chosen here.) Each clip is scored by ``vqa.Scorer``;
the frame results the pipeline hands to ``vqa.aggregate.aggregate`` are kept, and aggregate is
run again under each candidate setting, so the rules measured are the shipped ones.

For each head: the threshold with the best F1 (judged with its two grid neighbours, so an
edge before a drop loses to a plateau; ties: nearest 0.5) among those that flag at most
``--cap`` of the validation sources shown as they are (``--real``: every validation still and
clip clean, and the PolyU pairs' halves, counted among the negatives). For dark also the bound
on the 98th percentile of luma (the decision's ``dark_luma_p98``). ``--keep`` leaves a head's
shipped threshold in place and reports the rule's choice beside it (for a check outside
validation that turned it down: models/README.md says which and why). Candidates are tried
as ``dataclasses.replace`` of the model's ``Decision``; nothing global changes. ``--cache``
keeps the clips and the pipeline's frame results, so choosing again needs no rescoring.
``--manifest`` writes the choice into the ``decision`` block of the manifest
(``defect_probability`` and ``dark.luma_p98_max``; models/README.md documents the block):

    python scripts/model/calibrate.py --content P_VAL --clips 400 --real --cap 0.01 --keep noise \
        --cache /tmp/cal --out models/calibration.json --manifest models/vqa.json

``--categories VAL`` is a step of its own: the category bounds (the decision's
``category_thresholds``), chosen on validation's 400 clips with their VMAF labels
(``threshold_test.py make --split val``, then ``score``: VAL holds test.jsonl and frames.pkl).
The bounds are the viewer's VMAF bands (scripts/model/targets.py: 90, 70, 50, 30) less one shift
for all; the shift kept is the one whose categories fall within one class of the clip's band
most often (the issue's measure), ties: more exactly in their band, then the smaller shift.
It is merged into ``--out`` (a "categories" block) and written into ``--manifest``:

    python scripts/model/calibrate.py --categories /tmp/valc --out models/calibration.json --manifest models/vqa.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

import make_dataset as md
import synth
from train import f1

import vqa
from vqa import aggregate as agg
from vqa.types import MODEL_DEFECTS

HEADS = ("blur", "noise", "low_resolution", "dark", "overexposed")
THRESHOLDS = np.round(np.r_[np.arange(0.3, 0.951, 0.05), 0.97, 0.98, 0.99], 2)
DARK_P98 = (None, 220.0, 200.0, 180.0, 160.0, 150.0, 140.0)
CATEGORY_SHIFTS = tuple(np.round(np.arange(0.0, 15.01, 2.5), 1))  # below the VMAF bands, in points


def key(spec: dict) -> str:
    """A clip's name: its seed, and which half of a PolyU pair (the two share a seed)."""
    return f"{spec['seed']}{spec.get('real', '').removeprefix('pair')}"


def _make(job: tuple[dict, str, Path]) -> tuple[str, list[int]]:
    spec, tmp, root = job
    if md._ROOT is None:
        md.use_content(root, md.load_content(root, "val"))
    clip = md.distorted_clip(spec, np.random.default_rng(spec["seed"]), noise_free=True)
    path = Path(tmp) / f"cal_{key(spec)}.{synth.CODECS[spec['codec']][0]}"
    path.write_bytes(clip.data)
    sigma = 0.0 if clip.quiet is None else float(
        synth.noise_sigma(synth.to_working(clip.dist), synth.to_working(clip.quiet)).mean())
    labels = md.defect_labels(spec, synth.to_working(clip.x), vmaf_codec=100.0, sigma_eff=sigma)
    labels[MODEL_DEFECTS.index("compression")] = -1
    return str(path), labels


def plan(content: Path, clips: int, seed: int, real: bool) -> list[dict]:
    """Every validation source once as it is (``real``: make_dataset.real_specs, clean real
    pictures and each PolyU pair's clean and noisy halves), then ``clips`` random clips like
    training's at high codec quality (no compression or phone smearing: their labels need VMAF)."""
    sources = md.load_content(content, "val")
    sizes = [(e["width"], e["height"], e["kind"]) for e in sources]
    specs = md.real_specs(sizes, seed) if real else []
    rng = np.random.default_rng(seed)
    drawn = 0
    while drawn < clips:
        spec = md.draw_spec(rng, sizes, seed * 1_000_003 + drawn, frames=md.FRAMES)
        if spec["kind"] in ("compression", "smear"):
            continue
        spec["quality"] = float(rng.uniform(0.6, 1.0))
        specs.append(spec)
        drawn += 1
    return specs


def made_clips(specs: list[dict], content: Path, cache: Path, workers: int) -> list[tuple[str, list[int]]]:
    """Make (or find in ``cache``) every clip; returns (path, labels) per spec."""
    cache.mkdir(parents=True, exist_ok=True)
    index = cache / "labels.json"
    known = json.loads(index.read_text()) if index.exists() else {}
    todo = [s for s in specs if key(s) not in known]
    if todo:
        with mp.get_context("spawn").Pool(workers) as pool:
            for n, (path, lab) in enumerate(pool.imap(_make, [(s, str(cache), content) for s in todo], chunksize=1)):
                known[Path(path).stem.removeprefix("cal_")] = [Path(path).name, lab]
                if n % 25 == 0 or n == len(todo) - 1:
                    index.write_text(json.dumps(known))
                    print(f"made {n + 1}/{len(todo)}", flush=True)
    return [(str(cache / known[key(s)][0]), known[key(s)][1]) for s in specs]


def scored(made: list[tuple[str, list[int]]], cache: Path, model_dir, backend: str, workers: int):
    """The frame results the pipeline hands to aggregate for each clip (kept in ``cache`` to
    re-run aggregate under each candidate), and the shipped decision."""
    store = cache / "frames.pkl"
    done = pickle.loads(store.read_bytes()) if store.exists() else {}
    captured = []
    original = agg.aggregate

    def spy(frames, plan_, duration_s, decision):
        captured.append((frames, plan_, duration_s))
        return original(frames, plan_, duration_s, decision)

    for mod in list(sys.modules.values()):  # wherever the pipeline imported it from
        if getattr(mod, "aggregate", None) is original:
            mod.aggregate = spy
    try:
        with vqa.Scorer(model_dir=model_dir, backend=backend, workers=workers, worker_memory_mb=None) as scorer:
            shipped = scorer.spec.decision
            for n, (path, _) in enumerate(made):
                if Path(path).name in done:
                    continue
                before = len(captured)
                r = scorer.score(path)
                if r.ok and len(captured) == before + 1:
                    done[Path(path).name] = captured[-1]
                if n % 50 == 0:
                    store.write_bytes(pickle.dumps(done))
                    print(f"scored {n}/{len(made)}", flush=True)
    finally:
        for mod in list(sys.modules.values()):
            if getattr(mod, "aggregate", None) is spy:
                mod.aggregate = original
    store.write_bytes(pickle.dumps(done))
    return done, shipped


def choose(inputs: list, labels: np.ndarray, clean: np.ndarray, real: np.ndarray, shipped, cap: float | None,
           keep: tuple[str, ...] = ()) -> dict:
    """Per head: the threshold (and for dark the luma bound) with the best F1, the real pictures
    counted among the negatives, among those that flag at most ``cap`` of the real pictures as
    they are (None: no cap; none meets it: the fewest such false alarms). F1 is judged on its
    mean over the threshold and its grid neighbours, so that a threshold on the edge of a drop
    (a few validation clips away from losing the positives) is not chosen over a plateau.
    Ties: nearest 0.5. Heads in ``keep`` keep the shipped threshold (a check outside validation
    turned the rule's choice down); the rule's choice is reported beside it."""
    def found(kind: str, decision) -> np.ndarray:
        return np.array([kind in {d.type for d in agg.aggregate(*x, decision)[2]} for x in inputs])

    def trying(kind: str, threshold: float, **bounds):
        return dataclasses.replace(shipped, defect_probability={**shipped.defect_probability, kind: threshold},
                                   **bounds)

    def share(hit: np.ndarray, sel: np.ndarray) -> float:
        return float(hit[sel].mean()) if sel.any() else 0.0

    report = {}
    for kind in HEADS:
        col = labels[:, MODEL_DEFECTS.index(kind)]
        best = None
        for p98 in (DARK_P98 if kind == "dark" else (shipped.dark_luma_p98,)):
            hits = [found(kind, trying(kind, float(t), dark_luma_p98=p98)) for t in THRESHOLDS]
            scores = [f1(h, col) for h in hits]
            for i, t in enumerate(THRESHOLDS):
                smooth = float(np.mean(scores[max(0, i - 1):i + 2]))
                fa = share(hits[i], real)
                ok = cap is None or fa <= cap
                key = (ok, round(smooth, 4) if ok else -fa, -abs(t - 0.5), p98 is None)
                if best is None or key > best[0]:
                    best = (key, float(t), p98, scores[i], smooth, share(hits[i], clean), fa)
        old = found(kind, shipped)
        report[kind] = {"threshold": best[1], "f1": best[3], "f1_with_neighbours": best[4],
                        "clean_false_alarms": best[5], "real_clean_false_alarms": best[6],
                        "positives": int((col == 1).sum()), "negatives": int((col == 0).sum()),
                        "shipped_threshold": shipped.defect_probability[kind],
                        "f1_shipped": f1(old, col), "clean_false_alarms_shipped": share(old, clean),
                        "real_clean_false_alarms_shipped": share(old, real)}
        if kind == "dark":
            report[kind]["luma_p98_bound"] = best[2]
            report[kind]["shipped_luma_p98_bound"] = shipped.dark_luma_p98
    for kind in keep:
        row = report[kind]
        row["rule_threshold"], row["threshold"], row["kept"] = row["threshold"], row["shipped_threshold"], True
        for k in ("f1", "clean_false_alarms", "real_clean_false_alarms"):
            row[f"rule_{k}"], row[k] = row[k], row[f"{k}_shipped"]
        row.pop("f1_with_neighbours")
        if kind == "dark":
            row["rule_luma_p98_bound"], row["luma_p98_bound"] = row["luma_p98_bound"], row["shipped_luma_p98_bound"]
    chosen = dataclasses.replace(shipped, defect_probability={
        **shipped.defect_probability, **{k: v["threshold"] for k, v in report.items()}},
        dark_luma_p98=report["dark"]["luma_p98_bound"])
    for name, dec in (("shipped", shipped), ("chosen", chosen)):
        anyd = np.array([bool(set(HEADS) & {d.type for d in agg.aggregate(*x, dec)[2]}) for x in inputs])
        report.setdefault("any_defect_on_clean", {})[name] = {"clean": share(anyd, clean),
                                                              "real_clean": share(anyd, real)}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, default=Path(".device/content_tv"))
    ap.add_argument("--clips", type=int, default=400, help="random clips, besides the real pictures")
    ap.add_argument("--real", action="store_true",
                    help="also every validation source as it is (clean real pictures, PolyU pairs)")
    ap.add_argument("--cap", type=float, default=None,
                    help="most share of the real pictures as they are that a head may flag (None: no cap)")
    ap.add_argument("--keep", default="",
                    help="heads (comma-separated) whose shipped threshold stays: the choice is reported, not written")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep the made clips and the frame results here, to choose again without rescoring")
    ap.add_argument("--seed", type=int, default=424242)
    ap.add_argument("--out", type=Path, default=None, help="write the choice and its F1s here (JSON)")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="write the chosen thresholds into this manifest's decision block")
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--backend", default="openvino")
    ap.add_argument("--workers", type=int, default=2, help="processes that make clips, and decode workers")
    ap.add_argument("--make-only", action="store_true",
                    help="make the clips into --cache and stop (score them elsewhere, in parts: "
                         "threshold_test.py score --clips CACHE; merge the parts into CACHE/frames.pkl)")
    ap.add_argument("--categories", type=Path, default=None, metavar="VAL",
                    help="choose the category bounds alone, on these validation clips with VMAF labels "
                         "(threshold_test.py make --split val, then score); no clips are made")
    a = ap.parse_args()
    if a.categories:
        from threshold_test import decision_of
        if a.manifest is None:
            raise SystemExit("--categories needs --manifest: the decision block the rest is judged under")
        report = choose_categories(a.categories, decision_of(a.manifest))
        report["command"] = "python scripts/model/calibrate.py " + " ".join(sys.argv[1:])
        print(json.dumps({k: v for k, v in report.items() if k != "trials"}, indent=1))
        if a.out:  # beside the defect thresholds' choice, if the file holds one
            out = json.loads(a.out.read_text()) if a.out.exists() else {}
            out["categories"] = report
            a.out.write_text(json.dumps(out, indent=1) + "\n")
        if a.manifest:
            write_decision(a.manifest, {}, report["chosen"])
        return
    specs = plan(a.content, a.clips, a.seed, a.real)
    cache = a.cache or Path(tempfile.mkdtemp(prefix="vqa-cal-"))
    made = made_clips(specs, a.content, cache, a.workers)
    print(f"{len(made)} validation clips made", flush=True)
    if a.make_only:
        return
    frames, shipped = scored(made, cache, a.model_dir, a.backend, a.workers)
    keep = [i for i, (p, _) in enumerate(made) if Path(p).name in frames]
    inputs = [frames[Path(made[i][0]).name] for i in keep]
    labels = np.array([made[i][1] for i in keep])
    kinds = [specs[i]["kind"] for i in keep]
    clean = np.array([k == "clean" for k in kinds])
    real = np.array([specs[i].get("real") == "clean" for i in keep])
    print(f"{len(inputs)} scored ({int(clean.sum())} clean, {int(real.sum())} real pictures as they are)", flush=True)
    report = choose(inputs, labels, clean, real, shipped, a.cap, tuple(filter(None, a.keep.split(","))))
    out = {"command": "python scripts/model/calibrate.py " + " ".join(sys.argv[1:]), "backend": a.backend,
           "clips": len(inputs), "clean_clips": int(clean.sum()), "real_clean_clips": int(real.sum()),
           "cap": a.cap, "kept": a.keep or None, "seed": a.seed, "chosen": {k: v for k, v in report.items() if k in HEADS},
           "any_defect_on_clean": report["any_defect_on_clean"]}
    print(json.dumps(out, indent=1))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")
    if a.manifest:
        write_decision(a.manifest, out["chosen"])


def choose_categories(val: Path, decision: agg.Decision) -> dict:
    """The shift of the category bounds below the VMAF bands (``--categories``; the module's
    docstring gives the rule), judged on the clips of ``val`` under ``decision`` otherwise."""
    import targets as tg
    from threshold_test import load_clips, records
    clips = load_clips(val)
    frames = pickle.loads((val / "frames.pkl").read_bytes())
    clips = [c for c in clips if c["file"] in frames]
    names = [name for _, name in decision.category_thresholds]
    trials = []
    for shift in CATEGORY_SHIFTS:
        bounds = tuple((bound - float(shift), name) for bound, name in zip(tg.BANDS, names))
        got = tg.targets(clips, records(frames, dataclasses.replace(decision, category_thresholds=bounds)))
        agree = got["category_within_one_band"]
        trials.append({"shift": float(shift), "bounds": {name: b for b, name in bounds},
                       "within_one": agree["viewer_vmaf"], "exact": agree["exact_viewer_vmaf"]})
    best = max(trials, key=lambda t: (round(t["within_one"], 6), round(t["exact"], 6), -t["shift"]))
    shipped = {name: bound for bound, name in decision.category_thresholds}
    return {"clips": len(clips), "set": str(val), "chosen": best["bounds"], "shift": best["shift"],
            "within_one": best["within_one"], "exact": best["exact"], "shipped": shipped, "trials": trials}


def write_decision(manifest: Path, chosen: dict, categories: dict | None = None) -> None:
    """Put the chosen thresholds (``calibration.json``'s "chosen") into the manifest's decision
    block; every other field of the manifest stays as it is."""
    data = json.loads(manifest.read_text())
    block = data["decision"]
    for kind, choice in chosen.items():
        block["defect_probability"][kind] = choice["threshold"]
    if "dark" in chosen:
        block["dark"]["luma_p98_max"] = chosen["dark"]["luma_p98_bound"]
    if categories is not None:
        block["category_thresholds"] = categories
    manifest.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()

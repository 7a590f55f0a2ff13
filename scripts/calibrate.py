"""Choose vqa.aggregate's decision thresholds on validation content, through the shipped pipeline.

Clips are made here from validation sources (scripts/content.py's val split), the way training
clips are, but at high codec quality (0.6-1) so that their labels need no VMAF: blur, noise,
low resolution, dark and overexposed come from what was applied. (Compression's label needs
the codec's VMAF, so its threshold is not chosen here.) Each clip is scored by ``vqa.Scorer``;
the frame results the pipeline hands to ``vqa.aggregate.aggregate`` are kept, and aggregate is
run again under each candidate setting, so the rules measured are the shipped ones.

For each head: the probability threshold with the best F1 (ties: the one nearest 0.5). For
dark also the bound on the 98th percentile of luma (the decision's ``dark_luma_p98``).
Candidates are tried as ``dataclasses.replace`` of the model's ``Decision``; nothing global
changes. ``--manifest`` writes the choice into the ``decision`` block of the manifest
(``defect_probability`` and ``dark.luma_p98_max``; models/README.md documents the block):

    python scripts/calibrate.py --content .device/content_tv --clips 400 \
        --out models/calibration.json --manifest models/vqa.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import make_dataset as md  # noqa: E402
import synth  # noqa: E402
from train import f1  # noqa: E402

import vqa  # noqa: E402
from vqa import aggregate as agg  # noqa: E402
from vqa.types import MODEL_DEFECTS  # noqa: E402

HEADS = ("blur", "noise", "low_resolution", "dark", "overexposed")
THRESHOLDS = np.round(np.arange(0.3, 0.951, 0.05), 2)
DARK_P98 = (None, 220.0, 200.0, 180.0, 160.0, 150.0, 140.0)


def _make(job: tuple[dict, str, Path]) -> tuple[str, list[int]]:
    spec, tmp, root = job
    if md._ROOT is None:
        md.use_content(root, md.load_content(root, "val"))
    clip = md.distorted_clip(spec, np.random.default_rng(spec["seed"]), noise_free=True)
    path = Path(tmp) / f"cal_{spec['seed']}.{synth.CODECS[spec['codec']][0]}"
    path.write_bytes(clip.data)
    sigma = 0.0 if clip.quiet is None else float(
        synth.noise_sigma(synth.to_working(clip.dist), synth.to_working(clip.quiet)).mean())
    labels = md.defect_labels(spec, synth.to_working(clip.x), vmaf_codec=100.0, sigma_eff=sigma)
    labels[MODEL_DEFECTS.index("compression")] = -1
    return str(path), labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, default=Path(".device/content_tv"))
    ap.add_argument("--clips", type=int, default=400)
    ap.add_argument("--seed", type=int, default=424242)
    ap.add_argument("--out", type=Path, default=None, help="write the choice and its F1s here (JSON)")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="write the chosen thresholds into this manifest's decision block")
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--backend", default="openvino")
    ap.add_argument("--workers", type=int, default=2, help="processes that make clips, and decode workers")
    a = ap.parse_args()
    sources = md.load_content(a.content, "val")
    sizes = [(e["width"], e["height"], e["kind"]) for e in sources]
    rng = np.random.default_rng(a.seed)
    specs = []
    while len(specs) < a.clips:
        spec = md.draw_spec(rng, sizes, a.seed * 1_000_003 + len(specs), frames=md.FRAMES)
        if spec["kind"] in ("compression", "smear"):
            continue
        spec["quality"] = float(rng.uniform(0.6, 1.0))
        specs.append(spec)
    tmp = tempfile.mkdtemp(prefix="vqa-cal-")
    with mp.get_context("spawn").Pool(a.workers) as pool:
        made = pool.map(_make, [(s, tmp, a.content) for s in specs], chunksize=4)
    print(f"{len(made)} validation clips made", flush=True)

    # The frame results the pipeline hands to aggregate, kept to re-run it under each candidate.
    captured = []
    original = agg.aggregate

    def spy(frames, plan, duration_s, decision):
        captured.append((frames, plan, duration_s))
        return original(frames, plan, duration_s, decision)

    for mod in list(sys.modules.values()):  # wherever the pipeline imported it from
        if getattr(mod, "aggregate", None) is original:
            mod.aggregate = spy
    inputs, labels = [], []
    with vqa.Scorer(model_dir=a.model_dir, backend=a.backend, workers=a.workers, worker_memory_mb=None) as scorer:
        shipped = scorer.spec.decision
        for path, lab in made:
            before = len(captured)
            r = scorer.score(path)
            if r.ok and len(captured) == before + 1:
                inputs.append(captured[-1])
                labels.append(lab)
    labels = np.array(labels)
    print(f"{len(inputs)} scored", flush=True)

    def found(kind: str, decision) -> np.ndarray:
        return np.array([kind in {d.type for d in original(*x, decision)[2]} for x in inputs])

    def trying(kind: str, threshold: float, **bounds):
        return dataclasses.replace(shipped, defect_probability={**shipped.defect_probability, kind: threshold},
                                   **bounds)

    report = {}
    for kind in HEADS:
        col = labels[:, MODEL_DEFECTS.index(kind)]
        best = None
        for p98 in (DARK_P98 if kind == "dark" else (shipped.dark_luma_p98,)):
            for t in THRESHOLDS:
                score = f1(found(kind, trying(kind, float(t), dark_luma_p98=p98)), col)
                key = (round(score, 4), -abs(t - 0.5), p98 is None)
                if best is None or key > best[0]:
                    best = (key, float(t), p98, score)
        report[kind] = {"threshold": best[1], "f1": best[3], "positives": int((col == 1).sum()),
                        "negatives": int((col == 0).sum()), "f1_at_0.5": f1(found(kind, trying(kind, 0.5)), col)}
        if kind == "dark":
            report[kind]["luma_p98_bound"] = best[2]
    out = {"clips": len(inputs), "chosen": report}
    print(json.dumps(out, indent=1))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")
    if a.manifest:
        write_decision(a.manifest, report)


def write_decision(manifest: Path, chosen: dict) -> None:
    """Put the chosen thresholds (``calibration.json``'s "chosen") into the manifest's decision
    block; every other field of the manifest stays as it is."""
    data = json.loads(manifest.read_text())
    block = data["decision"]
    for kind, choice in chosen.items():
        block["defect_probability"][kind] = choice["threshold"]
    if "dark" in chosen:
        block["dark"]["luma_p98_max"] = chosen["dark"]["luma_p98_bound"]
    manifest.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()

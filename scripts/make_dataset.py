"""Generate the labelled training and validation sets.

Each clip: a mosaic of pristine stills panned into a short clip at a real video resolution,
a random mix of distortions, an encode with one of five codecs, a decode, and VMAF labels
from vmaf-torch computed on every frame:

- ``vmaf``: the distorted clip against its clean version with the same exposure applied.
  Exposure is deliberately left out of the score (VMAF collapses on a darkened clip although
  a night scene is not a bad video); dark and overexposed are reported as defects instead.
- ``vmaf_codec``: the decoded clip against what went into the encoder, i.e. the damage the
  codec alone did; it decides the ``compression`` defect label.

Defect labels are 1, 0, or masked (-1) where the applied strength is too mild to call.
Validation content (``split_content``) never appears in training.

    python scripts/make_dataset.py --content CONTENT_DIR --out data/ --train 1500 --val 300
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synth  # noqa: E402
from vqa.preprocess import GRID, fragments  # noqa: E402
from vqa.types import MODEL_DEFECTS  # noqa: E402

FRAMES = 12
TRAIN_FRAMES = range(0, FRAMES, 2)  # frames of a training clip that become samples
VIEWS_PER_FRAME = 2  # random fragment placements per training frame
KINDS = (("clean", .12), ("compression", .28), ("blur", .12), ("noise", .12), ("scale", .12),
         ("exposure", .10), ("mix", .14))
CODEC_MIX = (("h264", .55), ("hevc", .15), ("vp9", .12), ("av1", .10), ("mpeg4", .08))


def split_content(root: Path) -> tuple[list[Path], list[Path]]:
    """Deterministic split by image: the last images of each set are validation content."""
    train, val = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".webp"))
        if folder.name.startswith("set5"):
            val += files
            continue
        if folder.name.startswith("bsds"):
            val += [f for f in files if f.name.startswith("val_")]
            train += [f for f in files if not f.name.startswith("val_")]
            continue
        cut = int(len(files) * 0.85)
        train += files[:cut]
        val += files[cut:]
    return train, val


def _pick(rng, table):
    names, weights = zip(*table)
    return names[rng.choice(len(names), p=np.array(weights) / sum(weights))]


def draw_spec(rng: np.random.Generator, n_content: int, seed: int, *, frames: int = FRAMES,
              max_height: int | None = None) -> dict:
    """Everything that defines one clip, drawn from ``rng``; the clip is a function of it."""
    sizes = [s for s in synth.RESOLUTIONS if max_height is None or s[1] <= max_height]
    w, h, _ = sizes[rng.choice(len(sizes), p=np.array([s[2] for s in sizes]) / sum(s[2] for s in sizes))]
    if rng.random() < 0.1:
        w, h = h, w
    kind = _pick(rng, KINDS)
    spec = {"seed": seed, "kind": kind, "width": int(w), "height": int(h), "frames": frames,
            "fps": int(rng.choice([24, 25, 30])),
            "content": [int(i) for i in rng.choice(n_content, size=4, replace=False)],
            "codec": _pick(rng, CODEC_MIX)}
    parts = {"mix": list(rng.choice(["blur", "noise", "scale", "exposure"], size=int(rng.integers(2, 4)),
                                     replace=False))}.get(kind, [kind])
    if "blur" in parts:
        if rng.random() < 0.5:
            spec["blur_sigma"] = float(rng.uniform(0.6, 5.0))
        else:
            spec["motion_blur"] = [int(rng.integers(3, 26)), float(rng.uniform(0, 180))]
    if "noise" in parts:
        spec["noise_sigma"] = float(np.exp(rng.uniform(np.log(2), np.log(32))))
    if "scale" in parts:
        spec["scale"] = [float(rng.uniform(1.3, 4.5)),
                         int(rng.choice([cv2.INTER_AREA, cv2.INTER_LINEAR, cv2.INTER_CUBIC])),
                         int(rng.choice([cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_LANCZOS4, cv2.INTER_NEAREST],
                                        p=[.4, .35, .2, .05]))]
    if "exposure" in parts:
        if rng.random() < 0.55:
            spec["exposure"] = [float(rng.uniform(0.12, 0.55)), float(rng.uniform(1.0, 1.8))]
        else:
            spec["exposure"] = [float(rng.uniform(1.6, 3.5)), float(rng.uniform(0.6, 1.0))]
    spec["quality"] = float(rng.uniform(0, 1) if kind in ("compression", "mix") else rng.uniform(0.6, 1))
    return spec


def defect_labels(spec: dict, x: np.ndarray, vmaf_codec: float) -> list[int]:
    """1 / 0 / -1 (masked) per MODEL_DEFECTS, from what was applied and how strongly."""
    blur = 1 if spec.get("blur_sigma", 0) >= 1.5 or spec.get("motion_blur", [0])[0] >= 7 else (
        0 if "blur_sigma" not in spec and "motion_blur" not in spec else -1)
    noise_sigma = spec.get("noise_sigma", 0)
    noise = 1 if noise_sigma >= 6 and vmaf_codec >= 40 else (0 if noise_sigma == 0 else -1)
    compression = 1 if vmaf_codec < 65 else (0 if vmaf_codec > 85 else -1)
    factor = spec.get("scale", [1.0])[0]
    low_res = 1 if factor >= 2 else (0 if factor == 1.0 else -1)
    if low_res == 0 and spec.get("blur_sigma", 0) >= 2.5:
        low_res = -1  # a strong defocus looks like an upscale; don't force the call
    if blur == 0 and factor >= 2.5:
        blur = -1
    y = 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]
    mean, clipped = float(y.mean()), float((y > 245).mean())
    gain = spec.get("exposure", [1.0])[0]
    dark = 1 if gain < 1 and mean < 60 else (0 if gain == 1.0 and mean > 40 else -1)
    over = 1 if gain > 1 and (clipped > 0.2 or mean > 190) else (0 if gain == 1.0 and clipped < 0.1 else -1)
    return [blur, noise, compression, low_res, dark, over]


_CONTENT: list[Path] = []
_VMAF = None


def _init(content: list[Path], device: str) -> None:
    global _CONTENT, _VMAF
    os.environ["SVT_LOG"] = "1"  # SVT-AV1 prints its configuration per encode otherwise
    import torch
    from vmaf_torch import VMAF
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    _CONTENT = content
    _VMAF = VMAF(temporal_pooling=False, enable_motion=True, clip_score=True).to(device).eval()
    _VMAF.device = device


def _vmaf(ref: np.ndarray, dist: np.ndarray) -> np.ndarray:
    import torch
    dev = _VMAF.device
    with torch.no_grad():
        r = torch.from_numpy(synth.luma(ref))[:, None].to(dev)
        d = torch.from_numpy(synth.luma(dist))[:, None].to(dev)
        return _VMAF(r, d).flatten().float().cpu().numpy()


def distorted_clip(spec: dict, content: list[Path], rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    """(reference, encoder input, decoded output, encoded bytes) of the clip ``spec`` defines.

    ``rng`` must be ``default_rng(spec["seed"])``; the caller keeps drawing from it afterwards.
    """
    images = [cv2.cvtColor(cv2.imread(str(content[i % len(content)])), cv2.COLOR_BGR2RGB)
              for i in spec["content"]]
    frames = spec.get("frames", FRAMES)
    clean = synth.render(images, spec["width"], spec["height"], frames, rng)
    x = clean
    if "blur_sigma" in spec:
        x = synth.gaussian_blur(x, spec["blur_sigma"])
    if "motion_blur" in spec:
        x = synth.motion_blur(x, *spec["motion_blur"])
    ref = clean
    if "exposure" in spec:
        x = synth.exposure(x, *spec["exposure"])
        ref = synth.exposure(clean, *spec["exposure"])
    if "noise_sigma" in spec:
        x = synth.sensor_noise(x, spec["noise_sigma"], rng)
    if "scale" in spec:
        x = synth.rescale(x, *spec["scale"])
    data = synth.encode(x, spec["codec"], spec["quality"], spec["fps"])
    return ref, x, synth.decode(data)[:frames], data


def make_clip(job: tuple[dict, bool]) -> dict:
    spec, is_val = job
    rng = np.random.default_rng(spec["seed"])
    ref, x, dist, data = distorted_clip(spec, _CONTENT, rng)
    vmaf = _vmaf(ref, dist)
    vmaf_codec = _vmaf(x, dist)
    labels = defect_labels(spec, x, float(vmaf_codec.mean()))
    if is_val:
        views = np.stack([fragments(f) for f in dist])
        frame_vmaf = vmaf
    else:
        idx = list(TRAIN_FRAMES)
        views = np.stack([fragments(dist[i], rng.uniform(0, 1, size=(GRID, GRID, 2)))
                          for i in idx for _ in range(VIEWS_PER_FRAME)])
        frame_vmaf = np.repeat(vmaf[idx], VIEWS_PER_FRAME)
    return {"spec": spec, "views": views, "frame_vmaf": frame_vmaf.astype(np.float32),
            "vmaf": float(vmaf.mean()), "vmaf_codec": float(vmaf_codec.mean()), "labels": labels,
            "bytes": data if is_val else b""}


def generate(content: list[Path], n: int, is_val: bool, seed: int, workers: int, device: str,
             out: Path, **spec_options) -> None:
    rng = np.random.default_rng(seed)
    jobs = [(draw_spec(rng, len(content), seed * 1_000_003 + i, **spec_options), is_val) for i in range(n)]
    name = "val" if is_val else "train"
    views, fvmaf, owner, records = [], [], [], []
    clips_dir = out / f"{name}_clips"
    if is_val:
        clips_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(content, device)) as pool:
        for k, r in enumerate(pool.imap(make_clip, jobs, chunksize=2)):
            views.append(r["views"])
            fvmaf.append(r["frame_vmaf"])
            owner.append(np.full(len(r["views"]), k, np.int32))
            rec = {"clip": k, "spec": r["spec"], "vmaf": r["vmaf"], "vmaf_codec": r["vmaf_codec"],
                   "labels": dict(zip(MODEL_DEFECTS, r["labels"]))}
            if is_val:
                ext = synth.CODECS[r["spec"]["codec"]][0]
                rec["file"] = f"{name}_{k:04d}.{ext}"
                (clips_dir / rec["file"]).write_bytes(r["bytes"])
            records.append(rec)
            if k % 100 == 0:
                print(f"{name}: {k}/{n} clips, {time.time() - t0:.0f} s", flush=True)
    labels = np.array([[rec["labels"][d] for d in MODEL_DEFECTS] for rec in records], np.int8)
    np.savez(out / f"{name}.npz", views=np.concatenate(views), frame_vmaf=np.concatenate(fvmaf),
             clip=np.concatenate(owner), clip_vmaf=np.array([r["vmaf"] for r in records], np.float32),
             clip_labels=labels)
    (out / f"{name}.json").write_text(json.dumps(records, indent=0))
    print(f"{name}: {n} clips in {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=1500)
    ap.add_argument("--val", type=int, default=300)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--frames", type=int, default=FRAMES, help="frames per clip")
    ap.add_argument("--max-height", type=int, default=None, help="leave out taller resolutions")
    ap.add_argument("--all-validation", action="store_true",
                    help="every still under --content is validation content (for extra validation sets)")
    a = ap.parse_args()
    options = {"frames": a.frames, "max_height": a.max_height} if (a.frames, a.max_height) != (FRAMES, None) else {}
    a.out.mkdir(parents=True, exist_ok=True)
    train, val = split_content(a.content)
    if a.all_validation:
        train, val = [], sorted(p for p in a.content.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".webp"))
    print(f"content: {len(train)} train images, {len(val)} validation images", flush=True)
    for content, n, is_val, seed in ((val, a.val, True, a.seed + 1), (train, a.train, False, a.seed)):
        if n == 0 or (a.out / f"{'val' if is_val else 'train'}.npz").exists():
            continue  # nothing asked, or made by an earlier, interrupted run with the same arguments
        generate(content, n, is_val, seed, a.workers, a.device, a.out, **options)


if __name__ == "__main__":
    main()

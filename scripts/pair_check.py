"""Validation's PolyU pair check (train.py's pair_check) for several weights, on a valpairs set
make_dataset.py --mix v5 wrote (here: ``--val 1`` makes it and one validation clip).

    python scripts/pair_check.py --data D --weights v3=models/vqa-effl0.pt v5=V5/vqa-effl0.pt --out OUT.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train  # noqa: E402
from vqa.infer.network import QualityNet  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="holds valpairs.npz and valpairs.json")
    ap.add_argument("--weights", nargs="+", required=True, metavar="NAME=STATE_DICT")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    pairs = dict(np.load(a.data / "valpairs.npz"))
    records = json.loads((a.data / "valpairs.json").read_text())
    out = {}
    for item in a.weights:
        name, path = item.split("=", 1)
        net = QualityNet()
        net.load_state_dict(torch.load(path, weights_only=True, map_location="cpu"))
        out[name] = train.pair_check(train.predict(net.to(a.device), pairs["views"], a.device, batch=64), pairs, records)
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

"""How fast vqa.infer.nv12 prepares NV12 pictures on a device, and whether the device agrees
with the CPU on the same pictures.

    PYTHONPATH=$PWD python scripts/bench/nv12_speed.py --device cuda --out nv12_speed.json

Pictures are synthetic 1280x720 NV12 frames (a smooth luma pattern with random chroma), made
on the device, so nothing but torch is needed. Each batch size is timed over ``--rounds``
rounds after a warm-up, with the device synchronised: views alone, statistics alone, both.
Agreement: one batch prepared on the device and on the CPU, views and statistics compared.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from vqa.infer.nv12 import NV12Preparer
from vqa.preprocess import TRAINING


def frames(n: int, h: int, w: int, device: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    luma = (16 + 219 * (0.5 + 0.4 * torch.sin(xx / 9.0) * torch.cos(yy / 13.0))).to(torch.uint8)
    out = torch.empty((n, h * 3 // 2, w), dtype=torch.uint8)
    for k in range(n):
        out[k, :h] = torch.roll(luma, shifts=k, dims=1)
        out[k, h:] = torch.randint(40, 216, (h // 2, w), generator=g, dtype=torch.uint8)
    return out.to(device)


def timed(fn, rounds: int, device: str) -> float:
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(rounds):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    h, w = 720, 1280
    prep = NV12Preparer(TRAINING, a.device)
    rows = []
    for n in (int(b) for b in a.batches.split(",")):
        batch = frames(n, h, w, a.device)
        views = timed(lambda b=batch: prep.views(b, "bt709"), a.rounds, a.device)
        stats = timed(lambda b=batch: prep.stats(b, "bt709"), a.rounds, a.device)
        rows.append({"batch": n, "views_frames_per_s": round(n / views), "stats_frames_per_s": round(n / stats),
                     "both_frames_per_s": round(n / (views + stats))})
        print(json.dumps(rows[-1]), flush=True)
    batch = frames(16, h, w, "cpu", seed=1)
    cpu = NV12Preparer(TRAINING, "cpu")
    dv = (prep.views(batch.to(a.device), "bt709").cpu().int() - cpu.views(batch, "bt709").int()).abs()
    ds, cs = prep.stats(batch.to(a.device), "bt709"), cpu.stats(batch, "bt709")
    agree = {"view_pixels_differing": int((dv > 0).sum()), "view_max_diff": int(dv.max()),
             "luma_mean_max_diff": max(abs(x.luma_mean - y.luma_mean) for x, y in zip(ds, cs)),
             "thumb_max_diff": max(int(np.abs(x.thumb.astype(int) - y.thumb).max()) for x, y in zip(ds, cs))}
    name = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    a.out.write_text(json.dumps({"device": name, "frame": f"{w}x{h}", "speed": rows,
                                 "device_against_cpu": agree}, indent=1) + "\n")
    print(json.dumps(agree))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

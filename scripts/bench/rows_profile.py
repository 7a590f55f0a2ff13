"""Where a batch of ring rows spends its time on the GPU (issue 20): the staging copy on the
CPU, the copy to the device, the finish (vqa.infer.finish, float32, as launched and captured in a
CUDA graph, and float64) and the graph's replay, each timed alone with CUDA events over ``--reps``
batches.

    python scripts/bench/rows_profile.py --precision fp16 --batch-size 32 128 --region 43 --out F.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from vqa.infer import MOSAIC_MAX_REGION, open_inferencer
from vqa.model import load_model_spec
from vqa.preprocess import TRAINING


def gpu_ms(fn, reps: int, stream) -> float:
    with torch.cuda.stream(stream):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(reps):
            fn()
        end.record(stream)
    end.synchronize()
    return round(start.elapsed_time(end) / reps, 4)


def profile(gpu, n: int, region: int, reps: int) -> dict:
    side, used = MOSAIC_MAX_REGION * TRAINING.grid, (region * TRAINING.grid) ** 2 * 3
    rows = np.full((n, side * side * 3), 128, np.uint8)
    pinned = torch.empty(rows.shape, dtype=torch.uint8).pin_memory()
    t0 = time.perf_counter()
    for _ in range(reps):
        pinned.numpy()[:, :used] = rows[:, :used]
    staging = (time.perf_counter() - t0) / reps * 1e3
    graph = gpu._graph(n)
    dev = torch.empty(rows.shape, dtype=torch.uint8, device="cuda")
    copy = lambda: dev.copy_(pinned, non_blocking=True)  # noqa: E731
    finish = lambda: gpu._finish(dev, [region] * n, graph.dev_in)  # noqa: E731
    row = {"batch_size": n, "region": region, "row_bytes": rows.shape[1], "staging_cpu_ms": round(staging, 4),
           "h2d_ms": gpu_ms(copy, reps, gpu._stream), "finish_fp32_ms": gpu_ms(finish, reps, gpu._stream),
           "replay_ms": gpu_ms(graph.graph.replay, reps, gpu._stream)}
    graph_of_finish = torch.cuda.CUDAGraph()  # the finish alone, without its launches' cost
    with torch.cuda.stream(gpu._stream):
        finish()
        gpu._stream.synchronize()
        with torch.cuda.graph(graph_of_finish, stream=gpu._stream):
            finish()
    row["finish_fp32_graph_ms"] = gpu_ms(graph_of_finish.replay, reps, gpu._stream)
    torch.backends.cuda.matmul.allow_tf32 = True  # finish falls back to float64
    row["finish_fp64_ms"] = gpu_ms(finish, reps, gpu._stream)
    torch.backends.cuda.matmul.allow_tf32 = False
    row["views_per_s_replay_alone"] = round(n / row["replay_ms"] * 1e3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--batch-size", type=int, nargs="+", default=[32])
    ap.add_argument("--region", type=int, default=43)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    gpu = open_inferencer(load_model_spec(), backend="cuda", precision=a.precision)
    table = []
    for n in a.batch_size:
        table.append(profile(gpu, n, a.region, a.reps))
        print(json.dumps(table[-1]), flush=True)
    gpu.close()
    if a.out:
        a.out.write_text(json.dumps({"precision": a.precision, "rows": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()

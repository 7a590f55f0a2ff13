"""OpenVINO's streams and thread pinning on many cores (issue 18): does the fp32 model do more
views per second per thread in single-thread streams, or with its threads left unpinned beside
the decode workers, than in the streams the THROUGHPUT hint picks?

    python scripts/bench/ov_streams.py grid --threads 8 --out grid.json     # views/s per configuration
    python scripts/bench/ov_streams.py folder FOLDER --workers 8 --streams threads --pinning off --out run.json

``grid`` compiles the shipped fp32 IR once per configuration and submits batches of random
views as the pool engine does (requests in flight at once). ``folder`` scores FOLDER's videos
once with the default plan (``vqa.bench.folder``'s timing: from the first video to the last,
start-up excluded), every OpenVINO compile in this process given the configuration:
``--streams threads`` makes one stream per inference thread, ``--streams N`` N streams,
``auto`` leaves the hint's choice; ``--pinning on|off`` sets ENABLE_CPU_PINNING.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def extra_config(config: dict, streams: str, pinning: str) -> dict:
    """``config`` (OpenVINO compile properties) with the streams and pinning asked for."""
    config = dict(config)
    if streams == "threads":
        config["NUM_STREAMS"] = int(config.get("INFERENCE_NUM_THREADS", 1))
    elif streams != "auto":
        config["NUM_STREAMS"] = int(streams)
    if pinning != "default":
        config["ENABLE_CPU_PINNING"] = pinning == "on"
    return config


def patch_openvino(streams: str, pinning: str) -> None:
    """Every ``openvino.Core.compile_model`` in this process gets ``extra_config``'s properties."""
    import openvino

    original = openvino.Core.compile_model

    def compile_model(self, model, device_name=None, config=None):
        return original(self, model, device_name, extra_config(config or {}, streams, pinning))

    openvino.Core.compile_model = compile_model


def views_per_s(threads: int, streams: str, pinning: str, batch: int, seconds: float) -> dict:
    import openvino

    config = extra_config({"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": threads,
                           "INFERENCE_PRECISION_HINT": "f32"}, streams, pinning)
    compiled = openvino.Core().compile_model(str(ROOT / "models" / "vqa-effl0.xml"), "CPU", config)
    jobs = max(1, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
    queue = openvino.AsyncInferQueue(compiled, jobs)
    views = np.random.default_rng(0).integers(0, 256, (batch, 224, 224, 3), np.uint8)
    for _ in range(2 * jobs):
        queue.start_async({0: views})
    queue.wait_all()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(16):
            queue.start_async({0: views})
        queue.wait_all()
        calls += 16
    elapsed = time.perf_counter() - start
    return {"threads": threads, "streams_asked": streams, "pinning": pinning, "batch_size": batch,
            "num_streams": int(compiled.get_property("NUM_STREAMS")), "requests": jobs,
            "views_per_s": round(calls * batch / elapsed, 1),
            "views_per_s_per_thread": round(calls * batch / elapsed / threads, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--threads", type=int, nargs="+", default=[8])
    g.add_argument("--streams", nargs="+", default=["auto", "threads", "half"],
                   help="auto, threads, half (threads // 2) or a number")
    g.add_argument("--pinning", nargs="+", default=["default", "off"])
    g.add_argument("--batch-size", type=int, nargs="+", default=[4])
    g.add_argument("--seconds", type=float, default=3.0)
    g.add_argument("--out", type=Path)
    f = sub.add_parser("folder")
    f.add_argument("folder", type=Path)
    f.add_argument("--workers", type=int, help="decode workers (inference gets the other cores)")
    f.add_argument("--streams", default="auto")
    f.add_argument("--pinning", default="default", choices=["default", "on", "off"])
    f.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.cmd == "folder":
        patch_openvino(args.streams, args.pinning)
        from vqa.bench.folder import folder_videos, score_folder

        paths = folder_videos(args.folder)
        row = score_folder(paths, frames="default", workers=args.workers, model_dir=None,
                            backend=("openvino", "fp32"))
        row.update(streams=args.streams, pinning=args.pinning, videos=len(paths),
                   videos_per_min=round(60 * len(paths) / row["seconds"], 1), load_avg=os.getloadavg())
        print(json.dumps(row))
        if args.out:
            args.out.write_text(json.dumps(row) + "\n")
        return
    rows = []
    for threads in args.threads:
        for streams in args.streams:
            asked = str(max(1, threads // 2)) if streams == "half" else streams
            for pinning in args.pinning:
                for batch in args.batch_size:
                    row = views_per_s(threads, asked, pinning, batch, args.seconds)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

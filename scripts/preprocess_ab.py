"""Time a frame's preprocessing with this checkout's vqa/preprocess.py against another's, in turns.

    python scripts/preprocess_ab.py CLIP --old OLD/vqa/preprocess.py [--passes 4]

Decodes CLIP on one FFmpeg thread once per case and pass: decoding alone, + the RGB
conversion (swscale, as the PyAV reader does it), + ``fragments`` and ``frame_stats`` of the
old file, + those of this checkout's. Prints ms a frame, best and median over the passes
(README, "Cheaper frame statistics and 16 workers on the GPU").
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import av
from av.video.reformatter import VideoReformatter

REPO = Path(__file__).resolve().parents[1]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip")
    ap.add_argument("--old", type=Path, required=True, help="the other vqa/preprocess.py")
    ap.add_argument("--passes", type=int, default=4)
    a = ap.parse_args()
    old, new = load(a.old, "old_preprocess"), load(REPO / "vqa" / "preprocess.py", "new_preprocess")
    reformatter = VideoReformatter()

    def rgb(frame):
        return reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray()

    def cut(module):
        def run(frame):
            x = rgb(frame)
            module.fragments(x)
            module.frame_stats(x)
        return run

    cases = {"decode": lambda f: None, "+rgb": rgb, "+old view and stats": cut(old), "+new view and stats": cut(new)}
    ms: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(a.passes):
        for name, work in cases.items():
            with av.open(a.clip) as container:
                stream = container.streams.video[0]
                stream.thread_count = 1
                t, n = time.perf_counter(), 0
                for frame in container.decode(stream):
                    work(frame)
                    n += 1
                ms[name].append((time.perf_counter() - t) / max(1, n) * 1e3)
    for name, v in ms.items():
        print(f"{name:22s} ms a frame: best {min(v):.2f}, median {statistics.median(v):.2f}")


if __name__ == "__main__":
    main()

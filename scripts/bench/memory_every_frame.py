"""Memory of scoring every frame of a long clip in this process (``workers=0``): RSS over time.

    python scripts/bench/memory_every_frame.py /tmp/two_hours.mp4 --make --hours 2 --fps 5 --size 64x48

``--make`` writes the clip first (moving noise, H.264, PyAV). Then one ``vqa.Scorer(workers=0,
frames="all")`` scores it while a thread samples this process's RSS once a second; prints one
JSON object: the samples (seconds, MiB), the peak, and the RSS after the model loaded. Memory
that stays flat over the clip is the target: each frame's thumbnail is let go as the frames
arrive (vqa.aggregate.FreezeChain), and what is kept per frame is a few numbers.
Which vqa runs is PYTHONPATH's business, so two checkouts can be compared.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path


def make_clip(path: Path, hours: float, fps: int, width: int, height: int) -> None:
    import av
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height * 4, width * 4, 3), np.uint8)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": "30", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(int(hours * 3600 * fps)):
            y, x = (k * 3) % (height * 3), (k * 7) % (width * 3)  # a pan: every frame differs
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(base[y:y + height, x:x + width]), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip", type=Path)
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--fps", type=int, default=5)
    ap.add_argument("--size", default="64x48")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    a = ap.parse_args()
    if a.make:
        w, h = map(int, a.size.split("x"))
        make_clip(a.clip, a.hours, a.fps, w, h)
    import vqa

    samples: list[tuple[float, float]] = []
    done = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not done.wait(a.every):
            samples.append((round(time.monotonic() - start, 1), round(rss_mb(), 1)))

    with vqa.Scorer(workers=0, frames="all") as scorer:
        loaded = rss_mb()
        threading.Thread(target=sample, daemon=True).start()
        record = scorer.score(str(a.clip))
        done.set()
    print(json.dumps({"vqa": vqa.__file__, "status": record.status, "frames": record.frames,
                      "duration_s": record.video.duration_s if record.video else None,
                      "rss_after_load_mb": round(loaded, 1), "peak_mb": max(r for _, r in samples),
                      "seconds": round(time.monotonic() - start, 1), "samples": samples}))


if __name__ == "__main__":
    main()

"""Write the benchmark clip: textured, moving, natural-looking content encoded with x264.

    python scripts/bench/make_bench_clip.py /tmp/bench720.mp4                  # 720 frames of 1080p24
    python scripts/bench/make_bench_clip.py small.mp4 --frames 48 --size 640x360

The picture is one large canvas made once (smoothed noise at several scales over colour
gradients, with anti-aliased discs, boxes and lines at power-law sizes, as in a dead-leaves
chart), then every frame is a pan and slow zoom over it with one cv2.warpAffine, plus a few
shapes that move on their own. So rendering costs one warp per frame and the encoder sees
what it sees in real footage: global motion, detail at every scale, occlusion edges.
Deterministic for a given --seed (x264 is deterministic for fixed options and thread count; --threads fixes it).
"""
from __future__ import annotations

import argparse
import re
import sys
import time

from vqa.bench.clip import CRF, PRESET, write_bench_clip


def _size(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m or int(m[1]) < 16 or int(m[2]) < 16 or int(m[1]) % 2 or int(m[2]) % 2:
        raise argparse.ArgumentTypeError(f"size must be WIDTHxHEIGHT, both even and >= 16, got {text!r}")
    return int(m[1]), int(m[2])


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output file (.mp4, .mkv, ...)")
    p.add_argument("--frames", type=_positive, default=720)
    p.add_argument("--size", type=_size, default=(1920, 1080), help="WIDTHxHEIGHT (default 1920x1080)")
    p.add_argument("--fps", type=float, default=24.0)
    p.add_argument("--gop", type=_positive, default=48, help="keyframe interval in frames (x264 'g')")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=_positive, default=None, help="encoder threads (default: all cores)")
    args = p.parse_args(argv)
    if args.fps <= 0:
        p.error(f"--fps must be > 0, got {args.fps}")
    t0 = time.perf_counter()
    write_bench_clip(args.out, frames=args.frames, size=args.size, fps=args.fps, gop=args.gop, seed=args.seed,
                     threads=args.threads)
    print(f"wrote {args.out}: {args.frames} frames {args.size[0]}x{args.size[1]} @ {args.fps:g} fps, "
          f"gop {args.gop}, crf {CRF} preset {PRESET} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

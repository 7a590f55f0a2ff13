"""`vqa score CLIP` of several checkouts in turns, each round between two decodes of every
frame of CLIP (the floor of `vqa bench CLIP --study command`), one JSON line per round.

    python scripts/bench/command_turns.py /tmp/b1080.mp4 main=/path/to/main new=/path/to/branch --rounds 12
    python scripts/bench/command_turns.py CLIP 'pool=CHECKOUT' 'here=CHECKOUT|--workers 0'

On a shared machine one study run per checkout cannot tell a tenth apart: the load moves
more than that between them. Here every round times each checkout (in alternating order)
beside the same floor, so the ratios of a round are comparable, and the medians over
rounds say what differs. Each checkout runs in a fresh `python -m vqa.cli` with its own
PYTHONPATH; the floor always runs from this checkout. Words after a `|` are added to
that checkout's `vqa score`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLOOR = ("import sys\n"
         "from vqa.bench.common import decode_floor\n"
         "from vqa.decode import open_video\n"
         "from vqa.sample import plan_frames\n"
         "from vqa.threads import usable_cores\n"
         "with open_video(sys.argv[1]) as reader:\n"
         "    info = reader.info\n"
         "print(decode_floor(sys.argv[1], plan_frames(info, 'all'), usable_cores())[0])\n")


def _floor(clip: str) -> float:
    done = subprocess.run([sys.executable, "-c", FLOOR, clip], env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def _score(spec: str, clip: str) -> float:
    checkout, _, extra = spec.partition("|")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vqa.cli", "score", clip, "--quiet", "--format", "jsonl", *extra.split()],
                   cwd=checkout, env=dict(os.environ, PYTHONPATH=checkout), capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("clip")
    p.add_argument("checkouts", nargs="+", help="LABEL=CHECKOUT[|extra words for vqa score]")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    specs = dict(c.split("=", 1) for c in args.checkouts)
    labels, rows = list(specs), []
    for r in range(args.rounds):
        row: dict = {"round": r, "load_avg": round(os.getloadavg()[0], 2)}
        before = _floor(args.clip)
        for label in labels if r % 2 == 0 else labels[::-1]:
            row[label] = round(_score(specs[label], args.clip), 3)
        after = _floor(args.clip)
        row["floor_s"] = round((before + after) / 2, 3)
        row.update({f"ratio_{label}": round(row[label] / row["floor_s"], 3) for label in labels})
        rows.append(row)
        print(json.dumps(row), flush=True)
    med = {label: {"vqa_score_s": round(statistics.median(r[label] for r in rows), 3),
                   "ratio": round(statistics.median(r[f"ratio_{label}"] for r in rows), 3),
                   f"over_{labels[0]}": round(statistics.median(r[label] / r[labels[0]] for r in rows), 3)}
           for label in labels}
    print(json.dumps({"medians": med, "floor_s": round(statistics.median(r["floor_s"] for r in rows), 3),
                      "load_avg": [rows[0]["load_avg"], round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
    main()

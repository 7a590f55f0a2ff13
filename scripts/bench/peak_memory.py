"""Peak memory of a command and every process it starts, sampled 10 times a second.

    python scripts/bench/peak_memory.py vqa score clip.mp4 --format jsonl

Reports the peak of the summed PSS (proportional set size: shared pages, such as the
shared-memory ring and the libraries every worker maps, are split between the processes that
share them, so nothing is counted twice) and of the summed RSS (an upper bound). Needs psutil.
"""
import subprocess
import sys
import time

import psutil


def tree_memory(root: psutil.Process) -> tuple[int, int]:
    pss = rss = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss += info.pss
        rss += info.rss
    return pss, rss


def main() -> None:
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    root = psutil.Process(child.pid)
    peak_pss = peak_rss = 0
    start = time.time()
    while child.poll() is None:
        try:
            pss, rss = tree_memory(root)
        except psutil.NoSuchProcess:
            break
        peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
        time.sleep(0.1)
    print(f"exit {child.returncode}  wall {time.time() - start:.1f} s  "
          f"peak PSS {peak_pss / 2**20:.0f} MiB  peak RSS {peak_rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

"""Readable tables of ``vqa.bench.run_benchmark``'s result: what ``vqa bench`` prints.
Kept apart from the studies, which return plain dicts (``--json`` prints those as they are)."""
from __future__ import annotations

from collections.abc import Sequence

from ..words import counted
from .common import NOISE_NOTE, ratio

def table(headers: Sequence[str], rows: Sequence[Sequence], right: Sequence[bool]) -> list[str]:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in cells]


def format_report(result: dict) -> str:
    """Readable, column-aligned tables of ``run_benchmark``'s result."""
    m = result.get("machine", {})
    lines = [f"vqa bench {result.get('clip', '')}",
             f"cores {m.get('cpu_count')} ({m.get('usable_cores')} usable), "
             f"load average {m.get('load_avg_start')} -> {m.get('load_avg_end')}",
             f"note: {NOISE_NOTE}"]
    if "batch" in result:
        b = result["batch"]
        lines += ["", f"Inference by batch size ({b['views']['distinct']} real views of "
                      f"{b['views']['size']} px, {b['seconds_per_point']:g} s per point after "
                      f"{b['warmup_calls']} warm-up calls)"]
        lines += table(["backend", "precision", "batch", "median ms", "p90 ms", "views/s", "calls"],
                        [(r["backend"], r["precision"], r["batch_size"], f"{r['latency_ms_median']:.1f}",
                          f"{r['latency_ms_p90']:.1f}", f"{r['views_per_s']:.1f}", r["calls"])
                         for r in b["rows"]], [False, False, True, True, True, True, True])
        lines += [f"best {k}: batch {v['batch_size']} at {v['views_per_s']:.1f} views/s"
                  for k, v in b["best"].items()]
        lines += [f"skipped {s['backend']}/{s['precision']}: {s['reason']}" for s in b["skipped"]]
    if "pipeline" in result:
        p = result["pipeline"]
        c, d, s = p["clip"], p["detail"], p["seconds"]
        lines += ["", f"Scoring the clip, frames={p['frames']} ({c['width']}x{c['height']} {c['codec']}, "
                      f"{c['frame_count']} frames at {c['fps']:g} fps); each measured once"]
        what = {
            "naive": lambda x: "cv2.VideoCapture + fragments + pytorch batch 1, one process",
            "engine": lambda x: (f"vqa.Scorer as `vqa score` runs it: {counted(x['workers'], 'worker')}, openvino "
                                 f"{counted(x['inference_threads'], 'thread')}, batch {x['batch_size']}"),
            "decode_floor": lambda x: f"pyav, {counted(x['threads'], 'FFmpeg thread')}, to RGB only",
            "infer_floor": lambda x: f"openvino fp32 batch {x['batch_size']}, views in memory",
        }
        rows: list[tuple] = []
        for k in ("naive", "engine", "decode_floor", "infer_floor"):
            if k in d:
                rows.append((k, f"{s[k]:.2f}", f"{p['fps'][k]:.1f}", what[k](d[k])))
            else:
                rows.append((k, None, None, f"skipped: {p['skipped'].get(k, '')}"))
        lines += table(["measurement", "seconds", "frames/s", "how"], rows, [False, True, True, False])
        r = p["ratios"]
        speedup = r["engine_speedup_over_naive"]
        lines.append(f"engine speed-up over naive: {'-' if speedup is None else f'{speedup:.2f}x'};  "
                     f"engine / (decode floor + inference floor): {r['engine_over_floor_sum']:.2f}")
        if "default_sampling" in p:
            ds = p["default_sampling"]
            lines.append(f"default sampling ({ds['frames_sampled']} frames): the engine scores the clip in "
                         f"{ds['engine_s']:.2f} s, {ratio(ds['engine_s'], ds['decode_floor_all_s'])}x the "
                         f"{ds['decode_floor_all_s']:.2f} s that decoding every frame takes alone")
        lines.append(f"load average {p['load_avg']['start']} -> {p['load_avg']['end']}")
    lines += _engine_report(result)
    return "\n".join(lines)


def _engine_report(result: dict) -> list[str]:
    lines = []
    if "startup" in result:
        s, ph = result["startup"], result["startup"]["phases_alone_s"]
        lines += ["", f"Start-up of `vqa score CLIP` (median of {s['runs']} fresh processes, compile cache warm)"]
        lines += table(["phase", "seconds", "what"], [
            ("imports", f"{ph['imports_s']:.2f}", "import vqa and openvino"),
            ("hashing", f"{ph['hashing_s']:.2f}", "sha256 of the OpenVINO model files"),
            ("compile", f"{ph['compile_s']:.2f}", "OpenVINO compile_model, from its cache"),
            ("spawn", f"{ph['spawn_s']:.2f}", f"{s['workers']} decode workers until ready"),
        ], [False, True, False])
        lines.append(f"overhead before any frame is scored: {s['overhead_s']:.2f} s (target "
                     f"{s['target_overhead_s']} s): the interpreter's start and exit {s['interpreter_s']:.2f} s, "
                     f"then imports, hashing, and the compile overlapped with the spawn {s['ready_s']:.2f} s")
        lines.append(f"then the first record {s['first_record_s']:.2f} s, close {s['close_s']:.2f} s; "
                     f"`vqa score CLIP --quiet` took {s['cli_wall_s']:.2f} s in all")
    if "concurrency" in result:
        c = result["concurrency"]
        sharing = f"{counted(c['videos'], 'video')}, {counted(c['workers'], 'worker')}"
        lines += ["", f"Threads sharing one Scorer ({sharing}): one score_many "
                      f"{c['score_many_s']:.2f} s, {c['threads']} threads calling score() {c['threads_s']:.2f} s: "
                      f"{c['threads_over_score_many']:.2f}x its throughput (target {c['target']}); "
                      f"records identical: {c['records_identical']}"]
    if "streaming" in result:
        st = result["streaming"]
        rss = ", ".join(f"{r['rss_mb']:.0f}" for r in st["rss_mb"])
        lines += ["", f"Streaming {st['paths']:,} paths that do not exist through score_many: "
                      f"{st['seconds']:.1f} s ({st['records_per_s']:,}/s); first record after "
                      f"{st['first_record']['seconds']:.3f} s with {st['first_record']['paths_read']} paths read; "
                      f"RSS at each tenth (MiB): {rss}; growth {st['rss_growth_mb']} MiB"]
    return lines

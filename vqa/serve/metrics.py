"""The service's counters, and their Prometheus text exposition (format 0.0.4), by hand: a
few counters, two gauges and one histogram do not need a client library.

Labels are bounded: statuses and error codes are the engine's fixed sets, so the text stays
the same size whatever the traffic.
"""
from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable

# Seconds from a video's submission to its record: short clips land in the first buckets,
# a long --frames all video in the last.
BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.videos: Counter[tuple[str, str]] = Counter()  # (source, status) -> videos
        self.errors: Counter[str] = Counter()  # error code -> videos
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status) -> requests
        self._buckets = [0] * (len(BUCKETS_S) + 1)
        self._sum_s = 0.0
        self._count = 0

    def record(self, record: dict, source: str) -> None:
        """One record handed out: ``source`` is "job" or "upload"."""
        code = (record.get("error") or {}).get("code")
        with self._lock:
            self.videos[source, record["status"]] += 1
            if code:
                self.errors[code] += 1

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._buckets[bisect.bisect_left(BUCKETS_S, seconds)] += 1
            self._sum_s += seconds
            self._count += 1

    def mean_s(self, default: float = 1.0) -> float:
        with self._lock:
            return self._sum_s / self._count if self._count else default

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[route, status] += 1

    def text(self, gauges: dict[str, tuple[str, Callable[[], dict[str, float]]]]) -> str:
        """The exposition; ``gauges``: name -> (help, a function giving label value -> number)."""
        with self._lock:
            lines = _family("vqa_videos_total", "counter", "Videos with a record, by where they came from and status",
                            {f'source="{s}",status="{st}"': n for (s, st), n in sorted(self.videos.items())})
            lines += _family("vqa_errors_total", "counter", "Videos that got an error record, by code",
                             {f'code="{c}"': n for c, n in sorted(self.errors.items())})
            lines += _family("vqa_http_requests_total", "counter", "Requests answered, by route and status",
                             {f'route="{r}",status="{s}"': n for (r, s), n in sorted(self.requests.items())})
            lines += ["# HELP vqa_video_seconds Seconds from a video's submission to its record",
                      "# TYPE vqa_video_seconds histogram"]
            total = 0
            for bound, n in zip((*BUCKETS_S, "+Inf"), self._buckets):
                total += n
                lines.append(f'vqa_video_seconds_bucket{{le="{bound}"}} {total}')
            lines += [f"vqa_video_seconds_sum {self._sum_s:.6f}", f"vqa_video_seconds_count {self._count}"]
        for name, (help_text, read) in gauges.items():
            lines += _family(name, "gauge", help_text, read())
        return "\n".join(lines) + "\n"


def _family(name: str, kind: str, help_text: str, values: dict[str, float]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{{{labels}}} {value:g}" if labels else f"{name} {value:g}" for labels, value in values.items()]
    return lines

"""The type check covers the package: at most 5% of vqa/'s lines sit under mypy's ignore_errors."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VQA = ROOT / "vqa"
MOST_IGNORED = 0.05


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _matcher(pattern: str) -> re.Pattern[str]:
    """mypy's override patterns: ``a.b`` is that module, ``a.b.*`` is a.b and everything under
    it, and a ``*`` between dots stands for any one or more components."""
    whole = pattern.endswith(".*")
    parts = (pattern[:-2] if whole else pattern).split(".")
    body = r"\.".join(r"[^.]+(\.[^.]+)*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(body + (r"(\..+)?" if whole else "") + r"\Z")


def _ignored_patterns() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert not config.get("ignore_errors"), "ignore_errors for the whole package"
    patterns: list[str] = []
    for override in config.get("overrides", []):
        if override.get("ignore_errors"):
            module = override["module"]
            patterns += [module] if isinstance(module, str) else module
    return patterns


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_pattern_reader_follows_mypy():
    assert _matcher("vqa.decode.*").match("vqa.decode")
    assert _matcher("vqa.decode.*").match("vqa.decode.pyav")
    assert not _matcher("vqa.decode.*").match("vqa.decoder")
    assert _matcher("vqa.bench").match("vqa.bench")
    assert not _matcher("vqa.bench").match("vqa.bench_folder")
    assert not _matcher("vqa.bench").match("vqa.bench.studies")
    assert _matcher("vqa.*.pool").match("vqa.engine.pool")
    assert not _matcher("vqa.*.pool").match("vqa.pool")


def test_at_most_5_percent_of_the_package_is_under_ignore_errors():
    matchers = [_matcher(p) for p in _ignored_patterns()]
    sizes = {_module(p): _lines(p) for p in VQA.rglob("*.py")}
    ignored = {m: n for m, n in sizes.items() if any(x.match(m) for x in matchers)}
    share = sum(ignored.values()) / sum(sizes.values())
    assert share <= MOST_IGNORED, (
        f"{share:.1%} of vqa/'s {sum(sizes.values())} lines are under ignore_errors, at most "
        f"{MOST_IGNORED:.0%} may be: {dict(sorted(ignored.items(), key=lambda kv: -kv[1]))}")

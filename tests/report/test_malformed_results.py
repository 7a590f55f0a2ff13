"""Issue 17, item 14: ``vqa report`` over hostile results. A record nested 200,000 levels deep,
a defect at 1e308 seconds (its middle overflows to infinity), a timeline point there, an
integer of 400 digits: each is exit 2 with one line naming the line of RESULTS, never a
traceback. A NaN is a missing number, as before."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.support.synthetic_records import synthetic_records

from vqa import cli


def report(tmp_path, lines: list[str], *, array: bool = False):
    results = tmp_path / "results.jsonl"
    # As vqa score writes them: --format json puts each record on a line of its own.
    results.write_text("[\n  " + ",\n  ".join(lines) + "\n]\n" if array else "\n".join(lines) + "\n")
    out = tmp_path / "page.html"
    return CliRunner().invoke(cli.cli, ["report", str(results), "-o", str(out), "--thumbnails", "1"]), out


def good() -> str:
    return json.dumps(synthetic_records(1, with_timeline=False)[0])


def with_defect_at(t: float) -> str:
    record = synthetic_records(1, with_timeline=True)[0]
    record["defects"] = [{"type": "blur", "severity": 0.9, "start_s": t, "end_s": t}]
    return json.dumps(record)


def with_point_at(t: float) -> str:
    record = synthetic_records(1, with_timeline=True)[0]
    record["timeline"].append({**record["timeline"][-1], "t_s": t})
    return json.dumps(record)


HOSTILE = {
    "nested 200,000 deep": '{"path": "deep.mp4", "x": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "nested 20 deep": '{"path": "deep.mp4", "x": ' + "[" * 20 + "]" * 20 + "}",
    "a defect at 1e308 s": with_defect_at(1e308),
    "a defect at infinity": with_defect_at(float("inf")),
    "a timeline point at 1e308 s": with_point_at(1e308),
    "a 400-digit integer": '{"path": "big.mp4", "status": "ok", "score": 1' + "0" * 400 + "}",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("array", [False, True], ids=["jsonl", "json"])
def test_a_hostile_record_is_exit_2_naming_its_line(tmp_path, case, array):
    result, out = report(tmp_path, [good(), HOSTILE[case]], array=array)
    assert result.exit_code == 2, (result.output, result.exception)
    named = ("record 2", "line 3") if array else ("line 2",)  # the array's line 3 holds record 2
    assert any(n in result.stderr for n in named), result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_a_nan_is_a_missing_number(tmp_path):
    record = synthetic_records(1, with_timeline=False)[0]
    record["video"]["fps"] = float("nan")
    result, out = report(tmp_path, [good(), json.dumps(record)])
    assert result.exit_code == 0, result.stderr
    assert out.exists()

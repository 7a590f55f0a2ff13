"""Report writers: every format round-trips, and records match the output contract."""
from __future__ import annotations

import copy
import csv
import io
import json

import jsonschema
import pytest

from vqa.errors import UsageError
from vqa.report import CONTRACT_SCHEMA, CSV_COLUMNS, FORMATS, format_defects, open_writer
from vqa.types import Defect, VideoInfo, VideoScore

AWKWARD_PATH = "dir, with comma/clip \"quoted\"\nnew line – café 視頻.mp4"


def ok_record(path: str = "clip.mp4") -> VideoScore:
    return VideoScore(
        path=path, status="ok", score=63.2049, category="good",
        defects=[Defect("compression", 0.4111, 0.0, 10.0), Defect("frozen", 1.0, 4.5, 6.25)],
        video=VideoInfo(width=1920, height=1080, fps=29.97, duration_s=12.5, frame_count=375,
                        codec="h264", rotation=90, pixel_format="yuv420p"),
        frames={"sampled": 64, "decoded": 64, "decode_errors": 0},
        model={"name": "vqa-effnet-lite0", "version": "1.0.0", "sha256": "ab" * 32},
        config={"sampling": "default", "backend": "openvino", "batch_size": 16},
        sampling={"mode": "default", "requested": 64, "runs": 8, "run_length": 8},
        warnings=["decoder substituted: opencv", "line one\nline two"],
    )


def error_record(path: str = "bad.mp4") -> VideoScore:
    return VideoScore(path=path, status="error",
                      config={"sampling": 32, "backend": "pytorch", "batch_size": 4},
                      error={"code": "E_NOT_VIDEO", "message": "no video stream, found: audio"})


RECORDS = [ok_record(), error_record(), ok_record(AWKWARD_PATH)]


def render(fmt: str, records, **kwargs) -> str:
    buf = io.StringIO()
    with open_writer(fmt, buf, **kwargs) as writer:
        for r in records:
            writer.write(r)
    return buf.getvalue()


def test_formats_listed():
    assert FORMATS == ("table", "json", "jsonl", "csv")


def test_unknown_format_is_usage_error():
    with pytest.raises(UsageError, match="jsonl"):
        open_writer("xml", io.StringIO())


def test_jsonl_round_trip_and_streams_each_record():
    buf = io.StringIO()
    writer = open_writer("jsonl", buf)
    writer.write(RECORDS[0])
    assert json.loads(buf.getvalue()) == RECORDS[0].to_dict()  # before close
    for r in RECORDS[1:]:
        writer.write(r)
    writer.close()
    lines = buf.getvalue().splitlines()
    assert [json.loads(x) for x in lines] == [r.to_dict() for r in RECORDS]
    assert "café 視頻" in buf.getvalue()  # ensure_ascii=False


@pytest.mark.parametrize("records", [RECORDS, []], ids=["three", "empty"])
def test_json_is_one_array(records):
    assert json.loads(render("json", records)) == [r.to_dict() for r in records]


def test_json_valid_even_if_closed_early():
    buf = io.StringIO()
    try:
        with open_writer("json", buf) as w:
            w.write(RECORDS[0])
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert json.loads(buf.getvalue()) == [RECORDS[0].to_dict()]


def test_csv_round_trip_with_awkward_path():
    rows = list(csv.DictReader(io.StringIO(render("csv", RECORDS), newline="")))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == 3
    ok, err, awkward = rows
    assert awkward["path"] == AWKWARD_PATH
    assert ok["score"] == "63.2" and ok["category"] == "good"
    assert ok["defects"] == "compression:0.411:0-10;frozen:1:4.5-6.25"
    assert (ok["width"], ok["height"], ok["fps"], ok["codec"]) == ("1920", "1080", "29.97", "h264")
    assert ok["error_code"] == "" and ok["warnings"].startswith("decoder substituted")
    assert "line one\nline two" in ok["warnings"]
    assert (err["status"], err["score"], err["category"]) == ("error", "", "")
    assert err["error_code"] == "E_NOT_VIDEO" and err["width"] == ""


def test_csv_quotes_a_lone_carriage_return():
    # The csv module quotes only the line terminator's characters ("\n" here): a name holding
    # "\r" was written bare, and a reader split its row in two.
    names = ["a\rb.mp4", "plain.mp4", "c\r\nd.mp4"]
    rows = list(csv.DictReader(io.StringIO(render("csv", [ok_record(n) for n in names]), newline="")))
    assert [r["path"] for r in rows] == names
    assert all(r["score"] == "63.2" for r in rows)
    assert render("csv", [ok_record("plain.mp4")]).splitlines()[1].startswith("plain.mp4,ok,")  # as before


def test_csv_header_written_even_with_no_records():
    assert render("csv", []).strip() == ",".join(CSV_COLUMNS)


def test_format_defects_empty():
    assert format_defects([]) == ""


def test_table_lines():
    text = render("table", RECORDS, path_width=12)
    lines = text.splitlines()
    assert lines[0].startswith("clip.mp4       score  63.2   good")
    assert "defects: compression (0.41, 0.0\u201310.0 s), frozen (1.00, 4.5\u20136.2 s)" in lines[0]
    assert lines[1] == "    warning: decoder substituted: opencv"
    assert lines[2] == "    warning: line one\\nline two"
    assert lines[3] == "bad.mp4        error E_NOT_VIDEO  no video stream, found: audio"
    # A newline in a path must not split the video's line.
    assert lines[4].startswith("dir, with comma/clip \"quoted\"\\nnew line")
    assert len(lines) == 7


def test_table_no_defects():
    rec = ok_record()
    rec.defects, rec.warnings = [], []
    assert render("table", [rec]).rstrip().endswith("defects: none")


@pytest.mark.parametrize("record", RECORDS, ids=["ok", "error", "awkward"])
def test_records_validate(record):
    jsonschema.validate(record.to_dict(), CONTRACT_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(CONTRACT_SCHEMA)


def test_extra_fields_allowed():
    d = ok_record().to_dict()
    d["timing"] = {"decode_s": 1.2}
    d["video"]["bit_depth"] = 10
    jsonschema.validate(d, CONTRACT_SCHEMA)


def _mutated(mutate):
    d = copy.deepcopy(ok_record().to_dict())
    mutate(d)
    return d


BAD = {
    "score_120": lambda d: d.update(score=120),
    "score_negative": lambda d: d.update(score=-1),
    "defect_type_foo": lambda d: d["defects"][0].update(type="foo"),
    "severity_above_1": lambda d: d["defects"][0].update(severity=1.5),
    "status_unknown": lambda d: d.update(status="maybe"),
    "category_unknown": lambda d: d.update(category="great"),
    "ok_without_score": lambda d: d.update(score=None),
    "ok_without_model_sha": lambda d: d["model"].pop("sha256"),
    "missing_warnings": lambda d: d.pop("warnings"),
    "error_code_lowercase": lambda d: d.update(status="error", error={"code": "e_bad", "message": ""}),
    "error_without_error": lambda d: d.update(status="error"),
    "sampling_zero": lambda d: d["config"].update(sampling=0),
}


@pytest.mark.parametrize("mutate", BAD.values(), ids=BAD.keys())
def test_invalid_records_rejected(mutate):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_mutated(mutate), CONTRACT_SCHEMA)


# --- the record's shape has one home: vqa.types ------------------------------------------------

def _object_schema(name: str) -> dict:
    spec = CONTRACT_SCHEMA["properties"][name]
    return next(s for s in spec.get("oneOf", [spec]) if s.get("type") == "object")


def test_the_schema_and_the_csv_columns_are_made_from_the_record_types():
    from dataclasses import fields

    from vqa.types import CONFIG_KEYS, RECORD_BLOCKS, VIDEO_RECORD_KEYS, block_keys

    names = [f.name for f in fields(VideoScore)]
    assert list(CONTRACT_SCHEMA["properties"]) == names
    assert set(CONTRACT_SCHEMA["required"]) == set(names) - {"sampling", "timeline"}
    assert list(_object_schema("video")["properties"]) == list(VIDEO_RECORD_KEYS)
    assert set(VIDEO_RECORD_KEYS) <= {f.name for f in fields(VideoInfo)}
    assert list(CONTRACT_SCHEMA["properties"]["defects"]["items"]["properties"]) == [f.name for f in fields(Defect)]
    for name, block in RECORD_BLOCKS.items():
        assert list(_object_schema(name)["properties"]) == list(block_keys(block)), name
    assert list(CONFIG_KEYS) == list(block_keys(RECORD_BLOCKS["config"]))
    nested = [f"{name}_{key}" for name in ("frames", "model", "config", "sampling")
              for key in block_keys(RECORD_BLOCKS[name], required_only=True)]
    assert list(CSV_COLUMNS) == [*names[:5], *VIDEO_RECORD_KEYS[:5], "error_code", "error_message", "warnings",
                                 *VIDEO_RECORD_KEYS[5:], *nested]


def test_a_scored_record_has_the_shape_of_its_types(scorer_for, make_clip, validate_record):
    from dataclasses import fields

    from vqa.types import RECORD_BLOCKS, VIDEO_RECORD_KEYS, block_keys

    record = scorer_for().score(make_clip("clean"))
    d = validate_record(record)
    assert list(d) == [f.name for f in fields(VideoScore) if f.name != "timeline"]  # no timeline asked for
    assert list(d["video"]) == list(VIDEO_RECORD_KEYS)
    for name, block in RECORD_BLOCKS.items():
        if name != "error":  # None: the clip scored
            assert list(d[name]) == list(block_keys(block, required_only=True)), name

"""vqa.codes: every code the package emits is registered, and the docs' tables are made from it."""
from __future__ import annotations

import json
import re
from pathlib import Path

from docs_pages import page

from vqa.codes import ErrorCode, WarningCode, markdown_table
from vqa.errors import BackendUnavailable, InputError, ModelError, OutputError, UsageError, VQAError

ROOT = Path(__file__).resolve().parents[1]


def test_every_code_written_in_the_package_is_registered():
    # "W_CODE" is how docstrings name the format of a warning, not a code.
    registered = {c.value for c in ErrorCode} | {c.value for c in WarningCode} | {"W_CODE"}
    found = {}
    for path in (ROOT / "vqa").rglob("*.py"):
        for code in re.findall(r"\b([EW]_[A-Z][A-Z0-9_]+)\b", path.read_text()):
            found.setdefault(code, path.relative_to(ROOT))
    unknown = {code: str(where) for code, where in found.items() if code not in registered}
    assert unknown == {}


def test_every_registered_code_is_used_somewhere():
    text = "".join(p.read_text() for p in (ROOT / "vqa").rglob("*.py") if p.name != "codes.py")
    unused = [c.value for c in [*ErrorCode, *WarningCode] if c.value not in text]
    assert unused == []


def test_the_docs_tables_are_made_from_the_registry():
    assert markdown_table(ErrorCode) in page("errors.md")
    assert markdown_table(ErrorCode, per_video=False) in page("errors.md")
    assert markdown_table(WarningCode) in page("output-contract.md")


def test_error_classes_carry_registered_codes():
    for cls in (VQAError, InputError, ModelError, BackendUnavailable, UsageError, OutputError):
        assert ErrorCode(cls.code)


def test_a_code_is_its_string_everywhere_a_record_goes():
    code = ErrorCode.E_TIMEOUT
    assert json.dumps({"code": code}) == '{"code": "E_TIMEOUT"}'
    assert f"{code}: x" == str(code) + ": x" == "E_TIMEOUT: x"
    assert WarningCode.W_CAPPED.say("stopped") == "W_CAPPED: stopped"
    assert WarningCode.parse("W_CAPPED: stopped") == (WarningCode.W_CAPPED, "stopped")

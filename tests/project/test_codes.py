"""vqa.codes: every code the package emits is registered, and the docs' tables are made from it."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from tests.support.docs_pages import page

from vqa.codes import ErrorCode, WarningCode, markdown_table
from vqa.errors import BackendUnavailable, InputError, ModelError, OutputError, UsageError, VQAError

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_written_in_the_package_is_registered():
    # "W_CODE" is how docstrings name the format of a warning, not a code.
    registered = {c.value for c in ErrorCode} | {c.value for c in WarningCode} | {"W_CODE"}
    found = {}
    for path in (ROOT / "vqa").rglob("*.py"):
        for code in re.findall(r"\b([EW]_[A-Z][A-Z0-9_]+)\b", path.read_text()):
            found.setdefault(code, path.relative_to(ROOT))
    unknown = {code: str(where) for code, where in found.items() if code not in registered}
    assert unknown == {}


def _docstrings(tree: ast.AST) -> set[int]:
    heads = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, heads) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_codes_are_spelled_only_in_the_registry():
    # A code written as a string ("E_USAGE", f"E_TIMEOUT: ...", help text naming one) is a second
    # home that can drift; code names ErrorCode.X / WarningCode.X instead. Docstrings and
    # comments may name codes in prose.
    spelled = []
    for path in sorted((ROOT / "vqa").rglob("*.py")):
        if path.name == "codes.py":
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        spelled += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and re.search(r"\b[EW]_[A-Z][A-Z0-9_]+\b", node.value)]
    assert spelled == []


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

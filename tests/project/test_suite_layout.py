"""The test suite's own shape (tests/README.md): test files live in subject folders, helpers in
tests/support/, each folder a package. A file merged in at tests/ itself fails here until it is
moved to its subject's folder."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DATA = {"golden"}  # folders of data, not code


def test_test_files_are_in_subject_folders_and_each_folder_is_a_package():
    stray = sorted(p.name for p in TESTS.glob("*.py") if p.name not in ("__init__.py", "conftest.py"))
    assert not stray, f"move these into a subject folder (tests/README.md), helpers into tests/support/: {stray}"
    folders = [p for p in TESTS.iterdir() if p.is_dir() and p.name not in DATA and not p.name.startswith((".", "_"))]
    assert folders
    assert not [p.name for p in folders if not (p / "__init__.py").is_file()], "each folder needs an __init__.py"
    readme = (TESTS / "README.md").read_text()
    assert not [p.name for p in folders if f"`{p.name}/`" not in readme], "tests/README.md names every folder"

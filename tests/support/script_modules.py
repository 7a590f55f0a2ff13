"""Import a tool of scripts/ in a test, as `python scripts/FOLDER/NAME.py` would see it.

A script imports the installed ``vqa`` and its siblings by their bare names (``import synth``):
run as a file, its own folder is first on ``sys.path``. Here each module is loaded from its
file instead, its siblings first (those it names, found by reading its imports), each under its
bare name in ``sys.modules``, so the tests need no ``sys.path`` of their own.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

# The checkout: the first folder up from here with both vqa/ and scripts/ (wherever tests/ keeps this file).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "vqa").is_dir() and (p / "scripts").is_dir())
SCRIPTS = ROOT / "scripts"


def load(folder: str, name: str) -> ModuleType:
    """``scripts/FOLDER/NAME.py`` as a module, e.g. ``load("model", "calibrate")``."""
    if name in sys.modules:
        return sys.modules[name]
    path = SCRIPTS / folder / f"{name}.py"
    for sibling in sorted(_siblings(path) - {name}):
        load(folder, sibling)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _siblings(path: Path) -> set[str]:
    """The bare names ``path`` imports (at any depth: a function's import too) that are files beside it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return {n for n in names if "." not in n and (path.parent / f"{n}.py").is_file()}

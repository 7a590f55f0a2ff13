"""The package's shape: no import cycle between vqa's modules, and a long module says why."""
from __future__ import annotations

import ast
from pathlib import Path

VQA = Path(__file__).resolve().parents[2] / "vqa"
LONG = 400


def _module(path: Path) -> str:
    parts = list(path.relative_to(VQA.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """vqa modules ``path`` imports, at any depth of its code (a function's import counts too:
    a cycle through a lazy import is still a cycle in the design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("vqa")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("vqa"):
                out.add(base)
                out |= {f"{base}.{a.name}" for a in node.names}
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in VQA.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # A package's __init__ is not a dependency of its submodules' own code.
        graph[name] = {m for m in _imports(path, name) if m in modules and m != name}
    return graph


def test_no_import_cycle():
    graph = _graph()
    for start in graph:
        if start == "vqa":  # the package face imports everything on purpose, nothing imports it back
            continue
        seen, todo = set(), [(start, [start])]
        while todo:
            node, trail = todo.pop()
            for nxt in graph[node] - {"vqa"}:
                assert nxt != start, " -> ".join([*trail, nxt])
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append((nxt, [*trail, nxt]))


def test_a_module_over_400_lines_says_why_at_its_top():
    for path in VQA.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > LONG:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "Over 400 lines" in doc, f"{path.relative_to(VQA.parent)}: {text.count(chr(10))} lines, no reason"

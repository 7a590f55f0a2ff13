"""The package's shape: no import cycle between vqa's modules, layers that import only downwards,
no module reaching into another's private names, and a long module says why."""
from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VQA = ROOT / "vqa"
LONG = 450  # lines; a module over this says why at its top, in a docstring line starting LONG_MARK
LONG_MARK = "Long because"

# The data path from a path to a record, bottom first: a module imports only from its own layer
# and the ones below it (a lazy import inside a function counts too). A new module must be placed.
LAYERS = [
    ("words", ["vqa.errors", "vqa.codes", "vqa.types", "vqa.words", "vqa.threads", "vqa.limits"]),
    ("files and lifetimes", ["vqa.files", "vqa.inputs", "vqa.outputs", "vqa.lifecycle", "vqa.futures", "vqa.spool"]),
    ("stages", ["vqa.decode", "vqa.decode.*", "vqa.sample", "vqa.preprocess", "vqa.aggregate", "vqa.model",
                "vqa.batch", "vqa.infer", "vqa.infer.*"]),
    ("options", ["vqa.config"]),
    ("engines", ["vqa.engine", "vqa.engine.*"]),
    ("the scorer's front", ["vqa.scorer", "vqa.scorer.*"]),
    ("records and jobs", ["vqa.report", "vqa.report_html", "vqa.report_html.*", "vqa.jobstore", "vqa.job"]),
    ("doors", ["vqa", "vqa.cli", "vqa.cli.*", "vqa.serve", "vqa.serve.*", "vqa.bench", "vqa.bench.*"]),
]


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


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in VQA.rglob("*.py")}


def _layer(name: str) -> int:
    found = [i for i, (_, patterns) in enumerate(LAYERS) if any(fnmatch(name, p) for p in patterns)]
    assert len(found) == 1, f"{name}: in {len(found)} layers of tests/test_layout.py's LAYERS, not one"
    return found[0]


def _base(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return base


def _uses(path: Path, name: str, modules: dict[str, Path]) -> list[tuple[int, str, str]]:
    """(line, module, name or "") for every vqa module ``path`` imports, at any depth: ``from a
    import b`` is module ``a.b`` where that is a module, else name ``b`` of module ``a``; and
    ``m._x`` is name ``_x`` of module ``m`` where ``m`` is bound to a vqa module (``import a.b as m``,
    ``from a import m``, or a dotted ``vqa.a.b._x``). A bare ``import vqa`` (for ``__version__``,
    ``__file__``: the package is loaded before any of its modules anyway) is no use of its names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "vqa":
                    continue
                if a.name != "vqa":
                    out.append((node.lineno, a.name, ""))
                bound[a.asname or "vqa"] = a.name if a.asname else "vqa"
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, package)
            if base.split(".")[0] != "vqa":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in modules:
                    out.append((node.lineno, full, ""))
                    bound[a.asname or a.name] = full
                else:
                    out.append((node.lineno, base, a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                module = ".".join([bound[value.id], *chain])
                if module in modules:
                    out.append((node.lineno, module, node.attr))
    return out


def test_every_layer_imports_only_its_own_and_lower_layers():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        mine = _layer(name)
        for line, module, _ in _uses(path, name, modules):
            if module in modules and _layer(module) > mine:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} ({LAYERS[mine][0]}) imports {module} "
                             f"({LAYERS[_layer(module)][0]})")
    assert not wrong, "\n".join(wrong)


def test_no_module_uses_another_modules_private_names():
    """A name starting with ``_`` is its module's own; a ``_module`` is its package's own (the
    package re-exports what others may use, as vqa.report_html does). The tools of scripts/ too:
    they use what vqa offers, not its insides."""
    modules = _modules()
    tools = {f"scripts.{p.parent.name}.{p.stem}": p for p in (ROOT / "scripts").rglob("*.py")}
    wrong = []
    for name, path in {**modules, **tools}.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line, module, attr in _uses(path, name, modules):
            where = f"{path.relative_to(ROOT)}:{line}"
            if attr.startswith("_") and not attr.startswith("__") and module != name:
                wrong.append(f"{where}: {module}.{attr}")
            parts = module.split(".")
            hidden = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
            if hidden and not (package + ".").startswith(".".join(parts[: hidden[0]]) + "."):
                wrong.append(f"{where}: {module} is private to its package")
    assert not wrong, "\n".join(wrong)


def test_the_import_reader_sees_every_kind_of_use(tmp_path):
    modules = {"vqa.a": Path(), "vqa.b": Path(), "vqa.p._m": Path()}
    path = tmp_path / "c.py"  # read as module vqa.c
    path.write_text("from vqa.a import _x\nfrom . import b\nimport vqa.a as a\nimport vqa\n"
                    "b._y; a._z; vqa.a._w; vqa.__version__\nfrom vqa.p._m import f\n")
    uses = {(m, n) for _, m, n in _uses(path, "vqa.c", modules)}
    assert uses == {("vqa.a", "_x"), ("vqa.b", ""), ("vqa.a", ""), ("vqa.b", "_y"), ("vqa.a", "_z"), ("vqa.a", "_w"),
                    ("vqa.p._m", "f")}


def test_a_module_over_450_lines_says_why_at_its_top():
    """vqa/ and scripts/ alike: the docstring of a module over LONG lines has a line that starts
    with LONG_MARK and gives the reason (one state machine, one format's defences, ...)."""
    silent = []
    for path in [*VQA.rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]:
        text = path.read_text()
        lines = text.count("\n")
        if lines > LONG:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(line.strip().startswith(LONG_MARK) and len(line.split()) > 3 for line in doc.splitlines()):
                silent.append(f"{path.relative_to(ROOT)}: {lines} lines, no '{LONG_MARK} ...' line in its docstring")
    assert not silent, "\n".join(silent)


# Tools removed on purpose (git keeps them): history may still name them.
REMOVED_TOOLS = {"scripts/device_v4.sh", "scripts/device_v5.sh", "scripts/pair_check.py", "scripts/preprocess_ab.py"}


def test_every_tool_the_project_names_in_scripts_exists():
    """A path under scripts/ named in the docs, the package, the tests or the tools themselves is
    a file there. History and the records of past runs (docs/history/, results/) keep the paths
    they had when they ran."""
    import re

    named = re.compile(r"scripts/[a-z0-9_/.-]+?\.(?:py|sh|json)\b")
    texts = [ROOT / "README.md", ROOT / "setup.cfg", ROOT / "pyproject.toml", *ROOT.glob("models/*.md"),
             *ROOT.glob("docs/**/*.md"), *VQA.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(p for p in (ROOT / "scripts").rglob("*") if p.suffix in (".py", ".sh"))]
    missing = []
    for path in texts:
        if not path.is_file() or {"history", "results"} & set(path.relative_to(ROOT).parts):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for found in named.findall(line):
                if found not in REMOVED_TOOLS and not (ROOT / found).is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {found}")
    assert not missing, "\n".join(missing)

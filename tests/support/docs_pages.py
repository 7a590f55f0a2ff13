"""The docs pages as a reader gets them: a page's text with the tables it includes from
docs/_generated/ (pymdownx.snippets' `--8<-- "name.md"` lines) put in place."""
from __future__ import annotations

import re
from pathlib import Path

# The checkout's root, wherever in tests/ this helper lives: the folder that holds mkdocs.yml.
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").is_file())
DOCS = ROOT / "docs"
GENERATED = DOCS / "_generated"
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def page(rel: str) -> str:
    """``rel``'s text (a path under docs/, or README.md) with its included tables."""
    path = ROOT / rel if rel == "README.md" else DOCS / rel
    return SNIPPET.sub(lambda m: (GENERATED / m.group(1)).read_text(), path.read_text())


def user_pages() -> list[str]:
    """The pages a user reads, history left out, as paths under docs/."""
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")
                  if not {"history", "_generated", "results"} & set(p.relative_to(DOCS).parts))

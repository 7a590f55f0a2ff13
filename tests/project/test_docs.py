"""The README and the docs site (issue 31): the README is a short door whose quick start is
what CI runs, the pages' tables agree with the code, and the built site fetches nothing."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.support.docs_pages import DOCS, GENERATED, ROOT, SNIPPET, page, user_pages

README = (ROOT / "README.md").read_text()


def quick_start() -> list[str]:
    """The commands of the README's Quick start block, comments dropped."""
    block = README.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_is_a_door():
    assert len(README.splitlines()) <= 200
    assert len((DOCS / "model" / "card.md").read_text().splitlines()) <= 250


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    install, tests = quick_start()
    assert install == "pip install . && vqa score sample_videos/"
    requirements, _, test_command = tests.partition(" && ")
    assert requirements == "pip install -r requirements-test.txt"
    ci = (ROOT / ".ci" / "run").read_text()
    ran = [shlex.split(line.split("#", 1)[0]) for line in ci.splitlines() if "pytest" in line.split("#", 1)[0]]
    # CI calls python3 where the README says python: the same test command either way.
    assert [["python" if w == "python3" else w for w in cmd] for cmd in ran] == [shlex.split(test_command)]


def test_one_install_spelling_and_no_test_count_by_hand():
    for name in ["README.md", *user_pages()]:
        text = page(name)
        # vqa is not on a package index: 'vqa[serve]' sends pip there.
        assert not re.search(r"pip install ['\"]?vqa\b", text), name
        assert not re.search(r"\b\d[\d,]* tests\b", text), f"{name} states a test count by hand"


def test_the_readme_links_to_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_every_included_table_is_generated():
    included = {m.group(1) for name in user_pages() for m in SNIPPET.finditer((DOCS / name).read_text())}
    assert included and included <= {p.name for p in GENERATED.glob("*.md")}


def test_the_pages_agree_with_the_code():
    """Regenerate every table (scripts/docs/tables.py) and compare: a page that says other than
    the code fails here, naming the file; run the script to bring it up to date."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs" / "tables.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


class _Assets(HTMLParser):
    """Every URL a browser would fetch on its own when it opens a page (not links to follow)."""

    FETCHED = {"script": ("src",), "img": ("src", "srcset"), "source": ("src", "srcset"), "iframe": ("src",),
               "video": ("src", "poster"), "audio": ("src",), "embed": ("src",), "object": ("data",)}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        names = self.FETCHED.get(tag, ())
        rel = values.get("rel") or ""
        if tag == "link" and "alternate" not in rel and "canonical" not in rel:
            names = ("href",)
        self.urls += [values[n] or "" for n in names if n in values]
        self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", values.get("style") or "")


def external(url: str) -> bool:
    return bool(re.match(r"\s*(https?:)?//", url))


def fetched_from_elsewhere(site: Path) -> list[str]:
    found = []
    for path in site.rglob("*.html"):
        parser = _Assets()
        parser.feed(path.read_text(errors="replace"))
        found += [f"{path.relative_to(site)}: {u}" for u in parser.urls if external(u)]
    for path in site.rglob("*.css"):
        text = path.read_text(errors="replace")
        urls = re.findall(r"url\(\s*['\"]?([^'\")]+)", text) + re.findall(r"@import\s+['\"]([^'\"]+)", text)
        found += [f"{path.relative_to(site)}: {u}" for u in urls if external(u)]
    return found


def test_the_asset_check_sees_what_a_browser_would_fetch(tmp_path):
    (tmp_path / "a.html").write_text('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
                                     '<script src="//cdn.example/x.js"></script><img src="assets/ok.png">'
                                     '<a href="https://example.org/">a link is not fetched</a>')
    (tmp_path / "b.css").write_text('@font-face{src:url("https://fonts.gstatic.com/x.woff2")}'
                                    ' .x{background:url(ok.png)}')
    assert len(fetched_from_elsewhere(tmp_path)) == 3


@pytest.mark.slow
def test_the_site_builds_strict_and_fetches_nothing(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (site / "reference" / "index.html").read_text().count('id="vqa.Scorer.score"') == 1  # mkdocstrings ran
    assert fetched_from_elsewhere(site) == []

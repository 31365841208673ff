"""The manual stays true to the code: the generated reference pages are current, every relative
link in README.md and docs/ resolves, and every `make` target and `python -m` module they quote
exists."""

import importlib.util
import re
from pathlib import Path

import pytest

from common.tools import docs

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)


def test_the_reference_pages_are_what_the_code_generates():
    assert docs.stale() == [], "run: make docs"


def test_a_stale_page_is_found(tmp_path, monkeypatch):
    for name, page in docs.PAGES.items():
        (tmp_path / name).write_text(page())
    monkeypatch.setattr(docs, "FOLDER", tmp_path)
    assert docs.stale() == []
    (tmp_path / "config.md").write_text((tmp_path / "config.md").read_text().replace("mlp", "x"))
    assert docs.stale() == ["config.md"]
    assert docs.main(["--check"]) == 1


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(REPO)}: {target} does not exist"


def _quoted(pattern: str) -> set[tuple[str, str]]:
    found = set()
    for page in PAGES:
        for code in CODE.findall(page.read_text(encoding="utf-8")):
            found |= {(str(page.relative_to(REPO)), name) for name in re.findall(pattern, code)}
    return found


def test_every_quoted_make_target_exists():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    quoted = _quoted(r"\bmake ([a-z][\w-]*)")
    assert quoted, "the pages quote make targets"
    missing = [(page, name) for page, name in quoted if name not in targets]
    assert not missing, f"make targets quoted but not in the Makefile: {missing}"


def test_every_quoted_python_module_exists():
    quoted = _quoted(r"python -m ([\w.]+)")
    assert len(quoted) > 10
    missing = [(page, name) for page, name in quoted if importlib.util.find_spec(name) is None]
    assert not missing, f"modules quoted but not found: {missing}"

"""The manual stays true to the code: the generated reference pages are current, every relative
link, file path and module named in README.md and docs/ exists in the tree, every `make` target
and `python -m` module they quote exists, and README.md names no commit (it says what is; how a
figure moved belongs in commit bodies)."""

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from common.tools import docs

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
TOP = "common|torch_impl|tf_impl|tests|slurm|configs|k8s|constraints|docs"
# a file of the tree named anywhere in a page's text: a path under a top folder, with a suffix
SUFFIX = r"\.(?:py|sh|yaml|yml|md|json|env|txt|png)"
FILE = re.compile(rf"(?<![\w./<$-])((?:{TOP})/[\w./-]*\w{SUFFIX})\b")
# a folder of the tree, quoted whole: `tests/golden/`
FOLDER = re.compile(rf"`((?:{TOP})/[\w/-]*/)`")
# a module, class or constant of the suite, quoted: `common.core.run.chief.FOLLOW_S`
DOTTED = re.compile(r"`((?:common|torch_impl|tf_impl)(?:\.\w+)+)`")
# a commit as git abbreviates it: 7 to 40 hex digits, at least one a letter and one a digit
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


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


def _module_exists(dotted: str) -> bool:
    """Whether `dotted` names a package or module of the tree, or something inside a module."""
    path = REPO
    for part in dotted.split("."):
        if (path / f"{part}.py").is_file():
            return True
        if not (path / part).is_dir():
            return False
        path = path / part
    return True


def stale_names(page: Path, text: str) -> list[str]:
    """The files, folders and modules `text` (a page of the manual) names that the tree lacks."""
    missing = [name for name in FILE.findall(text) if not (REPO / name).exists()]
    missing += [name for name in FOLDER.findall(text) if not (REPO / name).is_dir()]
    missing += [name for name in DOTTED.findall(text) if not _module_exists(name)]
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(REPO)))
def test_every_file_and_module_a_page_names_exists(page):
    missing = stale_names(page, page.read_text(encoding="utf-8"))
    assert not missing, f"{page.relative_to(REPO)} names what the tree lacks: {missing}"


def test_a_stale_path_or_module_is_found():
    page = REPO / "docs" / "runs.md"
    assert stale_names(page, "see `tests/golden/` and torch_impl/train.py") == []
    text = "`tf_impl.preemption_bench`, tests/tf/test_gone.py and `tests/nowhere/`"
    stale = ["tests/tf/test_gone.py", "tests/nowhere/", "tf_impl.preemption_bench"]
    assert stale_names(page, text) == stale


def test_the_readme_names_no_commit():
    found = COMMIT.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert not found, f"README.md names commits {found}: say what is, with its host and date"
    assert COMMIT.findall("measured at 3f7d584 on [F]") == ["3f7d584"]
    assert COMMIT.findall("4096x4096, 1000000 steps, facade") == []


def test_product_docstrings_say_what_and_why_in_a_few_lines():
    """A docstring of the product says what and why; measurements and their story go to docs/."""
    longest = 15
    long = []
    for root in ("common", "torch_impl", "tf_impl", "slurm"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef):
                    doc = ast.get_docstring(node, clean=False)
                    if doc and doc.count("\n") + 1 > longest:
                        long.append(f"{path.relative_to(REPO)}:{getattr(node, 'name', '')}")
    assert not long, f"docstrings over {longest} lines: {long}"

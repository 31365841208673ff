"""The code map, docs/reference/modules.md (`make docs`): every module of the product, folder by
folder, with the first paragraph of its docstring, read without importing anything."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAPPED = ("common", "torch_impl", "tf_impl", "slurm")  # the folders mapped


def module_summary(path: Path) -> str | None:
    """The first paragraph of a module's docstring, read without importing it (None: it has
    none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return " ".join(doc.split("\n\n")[0].split()) if doc else None


def page(header: str, cell: Callable[[str], str]) -> str:
    """The code map: every module of the product, folder by folder, with what its docstring
    says first."""
    lines = [
        header,
        "",
        "# The code map",
        "",
        "Every module of `common/`, `torch_impl/`, `tf_impl/` and `slurm/`, with the first "
        "paragraph of its docstring ([extending.md](../extending.md) says how the folders "
        "depend on each other, and what each kind of extension touches).",
    ]
    for root in MAPPED:
        folders: dict[Path, list[Path]] = {}
        for path in sorted((REPO / root).rglob("*.py")):
            if not path.name.startswith("__"):
                folders.setdefault(path.parent, []).append(path)
        for folder, paths in sorted(folders.items()):
            lines += ["", f"## `{folder.relative_to(REPO)}/`", ""]
            package = folder / "__init__.py"
            said = module_summary(package) if package.is_file() else None
            if said:
                lines += [said, ""]
            lines += ["| module | what it is |", "|---|---|"]
            for path in paths:
                summary = module_summary(path) or "(no docstring)"
                lines.append(f"| `{path.name}` | {cell(summary)} |")
    return "\n".join(lines) + "\n"

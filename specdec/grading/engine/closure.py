"""What a set of Python files imports, followed through the project's own packages.

The Gradescope zip (delivery/gradescope.py) must hold every project file that grading imports,
and its requirements.txt every third-party package: a list written by hand missed
specdec/costs.py, which a checks module imported inside a function, and every submission then
scored 0. So the list is computed: each file's `import` statements are read with `ast` at any
depth (an import inside a function counts: the command line imports gradescope.py there), and
each project module they name is read in turn. Importing `a.b.c` runs `a/__init__.py` and
`a/b/__init__.py` first, so those are followed too.

Static, so an over-approximation: an import in a function that never runs still counts. What
no `import` statement names (a module loaded by its name in a string) must be given as a root.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

PROJECT_PACKAGES = ("specdec", "reference", "gpu")  # followed; any other import is a requirement


@dataclass(frozen=True)
class Closure:
    files: tuple[Path, ...]  # the project files imported, relative to the root, sorted
    third_party: tuple[str, ...]  # the top-level modules imported from outside it, sorted


@cache  # a zip's build asks for the same files several times
def imported_modules(path: Path, package: str = "") -> frozenset[tuple[str, bool]]:
    """Every module an `import` in the file names, inside functions and classes too, each
    with whether it must exist: `from x import y` names x, which must, and x.y, which is a
    module only if y is not a name defined in x. `package` is the file's own package, for
    relative imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[tuple[str, bool]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.name, True) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node.module or "", node.level, package, path)
            if base != "__future__":
                names.add((base, True))
                names.update((f"{base}.{a.name}", False) for a in node.names if a.name != "*")
    return frozenset(names)


def absolute(module: str, level: int, package: str, path: Path) -> str:
    """`from ..x import y` in `package` -> the module's absolute name."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level > len(parts):  # level 1 is the package itself, 2 its parent, ...
        raise ValueError(f"{path}: a relative import goes above the top of {package!r}")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def module_files(name: str, root: Path) -> list[Path] | None:
    """The files that importing the project module `name` runs, in order (each package's
    `__init__.py`, then the module's own file); None: no such module under `root`."""
    parts = name.split(".")
    files = []
    for depth in range(1, len(parts) + 1):
        folder = root.joinpath(*parts[:depth])
        if (folder / "__init__.py").is_file():
            files.append(folder / "__init__.py")
        elif depth == len(parts) and folder.with_suffix(".py").is_file():
            files.append(folder.with_suffix(".py"))
        else:
            return None
    return files


def package_of(file: Path, root: Path) -> str:
    """The package a project file belongs to ('specdec.grading' for its modules and its
    `__init__.py` alike), for its relative imports."""
    parts = file.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1])


def import_closure(roots: list[Path], root: Path, lenders: tuple[Path, ...] = ()) -> Closure:
    """The project files (under `root`) that `roots` import, directly or through each other,
    the roots included, and the third-party modules any of them imports. `lenders` lend the
    closure their imports but are not part of it (a skeleton that students hand in)."""
    root = root.resolve()
    lenders = tuple(Path(f).resolve() for f in lenders)
    seen: set[Path] = set()
    third_party: set[str] = set()
    todo = [*(Path(r).resolve() for r in roots), *lenders]
    for file in list(todo):  # a module of a package runs its package's __init__.py first
        if file.is_relative_to(root) and file not in lenders and package_of(file, root):
            todo += module_files(package_of(file, root), root) or []
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        package = package_of(file, root) if file not in lenders else ""
        for name, required in sorted(imported_modules(file, package)):
            top = name.partition(".")[0]
            if top not in PROJECT_PACKAGES:
                if top not in sys.stdlib_module_names:
                    third_party.add(top)
                continue
            files = module_files(name, root)
            if files is None and required:
                raise ValueError(f"{file}: imports {name}, which is no module under {root}")
            todo += [f for f in files or [] if f not in seen]
    inside = sorted(f.relative_to(root) for f in seen - set(lenders))
    return Closure(tuple(inside), tuple(sorted(third_party)))


def distributions(modules: tuple[str, ...]) -> dict[str, str]:
    """Top-level modules -> the installed distribution that provides each, with its version
    ({'numpy': 'numpy==2.4.6'}). ValueError naming a module no installed package provides."""
    providers = metadata.packages_distributions()
    pins = {}
    for module in modules:
        if module not in providers:
            raise ValueError(
                f"the grader imports {module!r}, which no installed package provides: "
                f"install it here, so that the zip's requirements.txt can pin it"
            )
        name = providers[module][0]
        pins[module] = f"{name}=={metadata.version(name)}"
    return pins

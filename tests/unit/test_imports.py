"""Imports: the project's modules (reference, gpu, specdec) form no circle, and none of them
is imported inside a function unless ALLOWED below names the file, the module and why.

A circle makes the first module a reader opens depend on the order things happen to be
imported; an import hidden in a function hides a dependency from the top of the file, where a
reader looks for it. Both are read from the source (ast), never by importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reference", "gpu", "specdec")

# (file, imported module, why it stays inside a function). A lazy import is kept only for an
# optional dependency or a measured cost; the line itself carries the same reason as a comment.
ALLOWED = {
    # the twin: importing gpu imports CuPy and asks for a CUDA device (gpu/device/backend.py);
    # only --backend gpu pays it, never `specdec --help`, demo or bench on the CPU
    ("specdec/cli/inputs.py", "gpu.device.backend", "the twin: CuPy and a CUDA device"),
    ("specdec/cli/bench.py", "specdec.measure.gpu_bench", "the twin: CuPy and a CUDA device"),
    # the figures: matplotlib is an optional extra (`lab`) and takes about a second to import
    ("specdec/cli/bench.py", "specdec.figures", "matplotlib, only once a bench has finished"),
    ("specdec/measure/roofline.py", "specdec.figures", "matplotlib; its timers are imported alone"),
    ("specdec/measure/typical.py", "specdec.figures.style", "matplotlib, only for the figure"),
    # the grader's delivery modules also run as `python -m specdec.grading.delivery.<name>`,
    # which imports the package (and so delivery/cli.py) first: imported at cli.py's top,
    # such a module would be imported twice, once as itself and once as __main__
    ("specdec/grading/delivery/cli.py", "specdec.grading.delivery.classroom", "runs as -m"),
    ("specdec/grading/delivery/cli.py", "specdec.grading.delivery.gradescope", "runs as -m"),
    # the oracle's two costly imports, each written once (specdec/oracle/optional.py): the
    # twin, for its own drafters and batches (issue 51), which the reference's setups never
    # need; the compiled draw (numba, 1.1 s to import), paid only by the setups that use it
    ("specdec/oracle/optional.py", "gpu", "the twin: CuPy and a CUDA device"),
    ("specdec/oracle/optional.py", "specdec.fast_cpu.draw", "numba: 1.1 s to import"),
}


def module_files() -> dict[str, Path]:
    # dotted name -> file, for every module of the project's packages; a package is its __init__
    files = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_names(node, here: str, modules, packages=PACKAGES) -> list[str]:
    # the project modules an import statement in module `here` names: `from pkg import x` is
    # pkg.x when that is a module, else pkg (x is a name defined in pkg)
    def is_project(name: str) -> bool:
        return name.split(".")[0] in packages

    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if is_project(alias.name)]
    base = node.module or ""
    if node.level:  # relative: from the package `here` is in (or is, for an __init__)
        package = here if modules[here].name == "__init__.py" else here.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    if not is_project(base):
        return []
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


def top_level_imports(tree: ast.Module):
    # the import statements run when the module is imported: at module level, in an `if` or
    # `try` there, or in a class body; not inside a function
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))


def function_imports(tree: ast.Module):
    # -> (function name, import statement) for every import inside a function, at any depth
    seen = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)) and id(inner) not in seen:
                    seen.add(id(inner))
                    yield node.name, inner


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    # module -> the project modules its top-level imports name
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = {
            target
            for node in top_level_imports(tree)
            for target in imported_names(node, name, modules)
            if target != name
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    # one circle as [a, b, ..., a], or None: a depth-first walk that meets a module on its path
    state: dict[str, str] = {}  # "open" while on the path, "done" once all below are walked

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := walk(nxt, path)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := walk(start, [])):
            return cycle
    return None


def lazy_project_imports(modules: dict[str, Path]) -> list[tuple[str, str, str, int]]:
    # -> (file, imported module, function, line) for every project import inside a function
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(ROOT).as_posix()
        for function, node in function_imports(tree):
            for target in dict.fromkeys(imported_names(node, name, modules)):
                found.append((rel, target, function, node.lineno))
    return found


def test_no_import_cycle_among_the_projects_modules():
    """reference, gpu and specdec, as their top-level imports link them: no circle."""
    cycle = find_cycle(import_graph(module_files()))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


AREAS = ("reference", "gpu", "specdec/grading", "specdec")


def area_of(rel: str) -> str:
    return next(a for a in AREAS if rel.startswith(a + "/"))


@pytest.mark.parametrize("area", AREAS)
def test_no_project_import_inside_a_function(area):
    """Every project import sits at the top of its file, unless ALLOWED says why not."""
    allowed = {(file, module) for file, module, _ in ALLOWED}
    hidden = [
        f"{file}:{line} imports {module} inside {function}()"
        for file, module, function, line in lazy_project_imports(module_files())
        if area_of(file) == area and (file, module) not in allowed
    ]
    assert not hidden, "move these imports to the top of the file:\n" + "\n".join(hidden)


def test_every_allowed_lazy_import_still_exists_and_says_why():
    """An ALLOWED entry whose import has gone (moved to the top, or the file renamed) is
    dropped from the list, and each entry's reason is written on the import's own line."""
    found = {(file, module): line for file, module, _, line in lazy_project_imports(module_files())}
    for file, module, reason in sorted(ALLOWED):
        assert reason, (file, module)
        assert (file, module) in found, f"{file} no longer imports {module} in a function"
        line = (ROOT / file).read_text().splitlines()[found[file, module] - 1]
        assert "#" in line, f"{file}:{found[file, module]}: say on the line why it is lazy"


LAZY_LIMIT = 10  # project imports inside a function, across all three packages (issue 47)


def test_few_imports_hide_in_functions():
    """At most LAZY_LIMIT project imports sit inside functions: each costly import is written
    once (the oracle's two in specdec/oracle/optional.py), not at every place that needs it."""
    found = lazy_project_imports(module_files())
    listed = "\n".join(f"{file}:{line} {module}" for file, module, _, line in found)
    assert len(found) <= LAZY_LIMIT, f"{len(found)} imports inside functions:\n{listed}"


def test_the_checks_see_a_circle_and_a_hidden_import(tmp_path):
    """A circle through a package's __init__ and a relative import, and an import of the
    project inside a method, are found."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg import a\n")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "import numpy\nfrom pkg import VERSION\nclass C:\n    def f(self):\n"
        "        from reference.model import GPT\n"
    )
    modules = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        "pkg.a": tmp_path / "pkg" / "a.py",
        "pkg.b": tmp_path / "pkg" / "b.py",
    }
    graph = {
        name: {
            target
            for node in top_level_imports(ast.parse(path.read_text()))
            for target in imported_names(node, name, modules, packages=("pkg",))
        }
        for name, path in modules.items()
    }
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg"}}
    assert find_cycle(graph) == ["pkg", "pkg.a", "pkg.b", "pkg"]
    hidden = [
        (function, target)
        for function, node in function_imports(ast.parse(modules["pkg.b"].read_text()))
        for target in imported_names(node, "pkg.b", modules, packages=("pkg", "reference"))
    ]
    assert hidden == [("f", "reference.model")]


# The rooms, from the bottom up (docs/architecture.md): a module may import its own room or one
# below it. specdec's own room is its top level (costs, machine, timing, text, ...).
ROOMS = (
    "reference",
    "gpu",
    "specdec",
    "specdec.training",
    "specdec.figures",
    "specdec.fast_cpu",
    "specdec.drafting",
    "specdec.measure",
    "specdec.grading",
    "specdec.oracle",
    "specdec.cli",
)
TOP_LEVEL_LIMIT = 12  # modules directly in specdec/, __init__ included (issue 47)


def room_of(module: str, rooms=ROOMS) -> str:
    # the innermost room holding the module: specdec.measure.bench is in specdec.measure
    return max((r for r in rooms if module == r or module.startswith(r + ".")), key=len)


def arrows_up(modules: dict[str, Path], rooms=ROOMS, packages=PACKAGES) -> list[str]:
    # every import, at the top or inside a function, of a room above the importing module's
    found = []
    for name, path in modules.items():
        here = room_of(name, rooms)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in dict.fromkeys(imported_names(node, name, modules, packages)):
                there = room_of(target, rooms)
                if rooms.index(there) > rooms.index(here):
                    found.append(f"{path}:{node.lineno}: {here} imports {target}, of {there} above")
    return found


def test_no_arrow_runs_back_up_between_the_rooms():
    """reference < gpu < specdec's top level < training < figures < fast_cpu < drafting <
    measure < grading < oracle < cli: no module imports a room above its own, lazily or not."""
    arrows = arrows_up(module_files())
    assert not arrows, "imports of a room above:\n" + "\n".join(arrows)


def test_the_rooms_check_sees_an_arrow_up(tmp_path):
    """A planted import of a room above (inside a function, relative) is reported with its
    file, line and both rooms; an import of the room below is not."""
    for folder in ("pkg", "pkg/low", "pkg/high"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "high" / "a.py").write_text("from pkg.low import b\n")
    (tmp_path / "pkg" / "low" / "b.py").write_text("def f():\n    from ..high import a\n")
    modules = {
        name: tmp_path / (name.replace(".", "/") + ("/__init__.py" if init else ".py"))
        for name, init in [("pkg", 1), ("pkg.low", 1), ("pkg.high", 1)]
        + [("pkg.high.a", 0), ("pkg.low.b", 0)]
    }
    rooms = ("pkg", "pkg.low", "pkg.high")
    assert arrows_up(modules, rooms, packages=("pkg",)) == [
        f"{modules['pkg.low.b']}:2: pkg.low imports pkg.high.a, of pkg.high above"
    ]


def test_specdecs_top_level_stays_small():
    """specdec/ holds at most TOP_LEVEL_LIMIT modules of its own; the rest live in its rooms."""
    top = sorted(p.stem for p in (ROOT / "specdec").glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, f"{len(top)} modules in specdec/: {top}"


def test_the_measure_package_itself_imports_nothing():
    """`import specdec.measure` must not pay for numba or the twin: its __init__ holds only a
    docstring, and each measurement brings its own dependencies when it is imported."""
    tree = ast.parse((ROOT / "specdec" / "measure" / "__init__.py").read_text())
    imports = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not imports, f"specdec/measure/__init__.py imports at lines {imports}"

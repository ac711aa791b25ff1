"""The acceptance rule is reached from every loop by reading function calls (issue 47).

A reader who starts at a loop (`speculative_generate`, the tree loop, the batch loop, in the
reference and in the twin) and follows the calls it makes by name must arrive at the line
that computes the acceptance probability min(1, p/q), as they would by hand: no rule handed
over as a value and called under another name, no kernel looked up by a string.

The walk reads the source (ast), never imports it. From a function it follows every call
whose callee is a name -- `f(...)`, or `module.f(...)` with `module` an imported project
module -- resolved through the module's own functions and its imports (a re-export in an
`__init__.py` is followed to where the function is written). Methods (`obj.f(...)`) are not
followed: no loop needs one to reach its rule. A call through a variable, a dict, getattr or
a string is not a call by name, and stops the walk there.

The rule is the first function whose body holds `min(1, a / b)` (reference/verification.py
`acceptance_probability`: `min(1.0, float(p_x) / float(q_x))`) or `<xp>.minimum(1, a / b)`
(gpu/verification.py `decide_rows`: all positions at once): the constant 1 and a ratio.

The shortest paths when this test was written (hops: calls from the loop; `pytest -s` prints
them); before issue 47 the twin's chain and tree loops reached no rule this way at all:

    reference.speculative_generate  4: speculative_round -> verify_unchecked -> accepts
                                       -> acceptance_probability
    gpu.speculative_generate        5: speculative_round -> settle -> decide_packed -> decide
                                       -> decide_rows
    reference tree loop             4: tree_round -> verify_tree_unchecked -> accepts
                                       -> acceptance_probability
    gpu tree loop                   4: tree_round -> (the reference's) verify_tree_unchecked
                                       -> accepts -> acceptance_probability
    reference batch loop            4: batched_round -> verify_unchecked -> accepts
                                       -> acceptance_probability
    gpu batch loop                  3: drafted_round -> settle_rows -> decide_rows

The bound below leaves room for a shared round skeleton to add a hop at the top of a loop.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_HOPS = 7  # the longest above is 5: a bound, not a count

LOOPS = [
    ("reference", "speculative_generate"),
    ("gpu", "speculative_generate"),
    ("reference.tree.loop", "tree_speculative_generate"),
    ("gpu.tree", "tree_speculative_generate"),
    ("reference.batch", "speculative_generate_batch"),
    ("gpu.batch", "speculative_generate_batch"),
]


class Source:
    """The project's modules under `root`, parsed on demand: their functions and imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.parsed: dict[str, tuple[dict, dict] | None] = {}

    def path(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def module(self, name: str) -> tuple[dict, dict] | None:
        # -> (functions {name: FunctionDef}, imports {local name: (module, name | None)})
        if name not in self.parsed:
            path = self.path(name)
            self.parsed[name] = None if path is None else self.read(name, path)
        return self.parsed[name]

    def read(self, name: str, path: Path) -> tuple[dict, dict]:
        tree = ast.parse(path.read_text(), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        functions, imports = {}, {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[node.name] = node
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        imports[alias.asname] = (alias.name, None)
                    else:  # `import a.b` binds a
                        imports[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
        return functions, imports

    def function(self, module: str, name: str, seen=()) -> tuple[str, str] | None:
        # the (module, name) where the function `name` seen from `module` is written, or None
        found = self.module(module)
        if found is None or (module, name) in seen:
            return None
        functions, imports = found
        if name in functions:
            return module, name
        if name in imports:
            source, attr = imports[name]
            if attr is not None:
                return self.function(source, attr, (*seen, (module, name)))
        return None

    def module_named(self, module: str, name: str) -> str | None:
        # the project module the local `name` of `module` stands for, or None
        found = self.module(module)
        if found is None or name not in found[1]:
            return None
        source, attr = found[1][name]
        target = source if attr is None else f"{source}.{attr}"
        return target if self.path(target) is not None else None

    def callees(self, module: str, name: str) -> list[tuple[str, str]]:
        # the project functions the body of `module.name` calls by name, in source order
        node = self.module(module)[0][name]
        out = []
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            f, found = call.func, None
            if isinstance(f, ast.Name):
                found = self.function(module, f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                owner = self.module_named(module, f.value.id)
                found = None if owner is None else self.function(owner, f.attr)
            if found is not None and found not in out:
                out.append(found)
        return out

    def computes_rule(self, module: str, name: str) -> bool:
        return any(is_rule(n) for n in ast.walk(self.module(module)[0][name]))


def is_rule(node: ast.AST) -> bool:
    # min(1, a / b) or <xp>.minimum(1, a / b)
    if not isinstance(node, ast.Call) or len(node.args) != 2:
        return False
    f = node.func
    named = (isinstance(f, ast.Name) and f.id == "min") or (
        isinstance(f, ast.Attribute) and f.attr == "minimum"
    )
    one, ratio = node.args
    return (
        named
        and isinstance(one, ast.Constant)
        and one.value == 1
        and isinstance(ratio, ast.BinOp)
        and isinstance(ratio.op, ast.Div)
    )


def path_to_rule(source: Source, module: str, name: str) -> list[str] | None:
    """The shortest chain of calls by name from `module.name` to a function computing the
    rule, as ["module.function", ...] (the loop first), or None."""
    start = source.function(module, name)
    if start is None:
        raise LookupError(f"no function {name} in {module} under {source.root}")
    before = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if source.computes_rule(*here):
            chain = []
            while here is not None:
                chain.append(".".join(here))
                here = before[here]
            return chain[::-1]
        for callee in source.callees(*here):
            if callee not in before:
                before[callee] = here
                queue.append(callee)
    return None


@pytest.mark.parametrize("module, loop", LOOPS, ids=[f"{m}.{f}" for m, f in LOOPS])
def test_the_rule_is_reached_from_the_loop_by_direct_calls(module, loop):
    chain = path_to_rule(Source(ROOT), module, loop)
    assert chain is not None, f"{module}.{loop} never calls the acceptance rule by name"
    hops = len(chain) - 1
    print(f"\n{module}.{loop}: {hops} hops\n  " + "\n  -> ".join(chain))
    assert hops <= MAX_HOPS, f"{hops} hops from {module}.{loop} to the rule: {chain}"


def test_the_twin_and_the_reference_reach_their_own_rules():
    # the twin decides on the device (decide_rows), the reference on the host
    source = Source(ROOT)
    assert path_to_rule(source, "gpu", "speculative_generate")[-1] == "gpu.verification.decide_rows"
    reference = path_to_rule(source, "reference", "speculative_generate")
    assert reference[-1] == "reference.verification.acceptance_probability"


def plant(tmp_path: Path, loop_body: str) -> Source:
    # a package `lab` with a rule module and a loop module whose body is given
    package = tmp_path / "lab"
    package.mkdir()
    (package / "__init__.py").write_text("from lab.loop import generate\n")
    (package / "rule.py").write_text(
        "def acceptance(p, q):\n    return min(1.0, p / q)\n\n"
        "def decide(p, q):\n    return acceptance(p, q) > 0.5\n"
    )
    (package / "loop.py").write_text(
        "import lab.rule as rules\nfrom lab.rule import decide\n\n" + loop_body
    )
    return Source(tmp_path)


@pytest.mark.parametrize(
    "body, found",
    [
        ("def generate(p, q):\n    return decide(p, q)\n", True),
        ("def generate(p, q):\n    return rules.decide(p, q)\n", True),
        # the rule handed over in a variable, then called under that name
        (
            "def generate(p, q, fn=None):\n    f = decide if fn is None else fn\n"
            "    return f(p, q)\n",
            False,
        ),
        # looked up by a string
        ("def generate(p, q):\n    return getattr(rules, 'decide')(p, q)\n", False),
        (
            "def generate(p, q):\n    return RULES['decide'](p, q)\n\nRULES = {'decide': decide}\n",
            False,
        ),
        # handed to a runner as a value (what run_fused("decide_packed", body, ...) was)
        (
            "def run(name, fn, *args):\n    return fn(*args)\n\n"
            "def generate(p, q):\n    return run('decide', decide, p, q)\n",
            False,
        ),
    ],
    ids=["call", "module call", "variable", "getattr", "dict", "handed over"],
)
def test_the_walk_finds_the_rule_only_through_calls_by_name(tmp_path, body, found):
    chain = path_to_rule(plant(tmp_path, body), "lab", "generate")
    assert (chain is not None) == found, chain
    if found:
        assert chain[-1] == "lab.rule.acceptance"

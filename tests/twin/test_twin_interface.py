"""The twin mirrors the core: the same public names, the same signatures, its own files."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import gpu
import reference
import reference.tree as reference_tree

ROOT = Path(__file__).resolve().parents[2]


def shape_of(fn) -> list[tuple]:
    # a signature without its annotations: names, kinds and defaults of the parameters
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def public_methods(cls) -> dict[str, list[tuple]]:
    return {
        name: shape_of(member)
        for name, member in inspect.getmembers(cls)
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(member)
    }


def test_the_twin_exports_every_public_name_of_the_core():
    """Every one: no core name is exempt (EAGLE, the last one, is twinned too)."""
    assert sorted(gpu.__all__) == sorted(reference.__all__)


def assert_same_interface(ours, theirs, name: str) -> None:
    # functions: the same parameters, kinds and defaults; classes: the same public methods
    # with the same signatures (a twin class may be the reference's own)
    if inspect.isclass(theirs):
        assert inspect.isclass(ours), name
        twin_methods, core_methods = public_methods(ours), public_methods(theirs)
        assert twin_methods.keys() >= core_methods.keys(), name
        for method, signature in core_methods.items():
            assert twin_methods[method] == signature, f"{name}.{method}"
    else:
        assert shape_of(ours) == shape_of(theirs), name


def test_every_function_and_method_has_the_cores_signature():
    for name in reference.__all__:
        assert_same_interface(getattr(gpu, name), getattr(reference, name), name)


# what the loop, the lab and the oracle use of reference.tree: the twin's gpu.tree has them
TREE_NAMES = (
    "EagleTreeDrafter",
    "HeadsTreeDrafter",
    "ModelTreeDrafter",
    "tree_round",
    "tree_speculative_generate",
    "tree_verification_pass",
)


def test_the_twins_tree_module_has_the_tree_loops_names_and_signatures():
    """gpu.tree mirrors reference.tree's loop, round, pass and drafters; their twins are the
    twin's own (the tree, its rule and its checks are the reference's, imported)."""
    for name in TREE_NAMES:
        assert name in gpu.tree.__all__, name
        ours, theirs = getattr(gpu.tree, name), getattr(reference_tree, name)
        assert ours is not theirs, name
        assert_same_interface(ours, theirs, f"tree.{name}")
    for name in ("ModelTreeDrafter", "HeadsTreeDrafter", "EagleTreeDrafter"):
        assert issubclass(getattr(gpu.tree, name), getattr(reference_tree, name))


def test_the_twin_reuses_the_host_side_pieces_rather_than_copying_them():
    """Config, sampling parameters and result types are the reference's own objects."""
    for name in (
        "GPTConfig",
        "SamplingParams",
        "Verification",
        "SpeculativeStats",
        "SpeculativeResult",
        "RoundTrace",
        "Round",
        "Draft",
        "Drafter",
    ):
        assert getattr(gpu, name) is getattr(reference, name), name


def test_each_twin_file_opens_by_saying_what_differs():
    """Every file of gpu/ that mirrors a reference file says in its docstring what differs
    and why; the core has no array-module switch (tests/unit/test_layout.py: numpy only)."""
    for path in sorted((ROOT / "gpu").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        mirrored = (ROOT / "reference" / path.name).exists() or (
            ROOT / "reference" / path.stem
        ).is_dir()  # a module, or a package (gpu/tree.py mirrors reference/tree/)
        if mirrored and path.name != "__init__.py":
            assert "differs from reference/" in doc, f"gpu/{path.name} does not say what differs"
        else:
            assert doc, f"gpu/{path.name} has no docstring"

"""The twin's layout: gpu/ mirrors reference/ file for file, and its device machinery -- what
the reference has no file for -- lives in gpu/device/, each file saying what it is for.

(That no module of gpu/ imports in a circle, or imports the project inside a function, is
tests/unit/test_imports.py's, for every package of the project.)"""

from __future__ import annotations

import ast
from pathlib import Path

import gpu
from gpu import sampling, verification
from gpu.device import fused
from gpu.device.kernels import FusedOperation
from gpu.drafters import TWIN_MAKERS
from reference import drafters, eagle, early_exit, heads, lookup
from reference.tree import drafters as tree_drafters
from reference.tree import eagle as tree_eagle

ROOT = Path(__file__).resolve().parents[2]
GPU, REFERENCE = ROOT / "gpu", ROOT / "reference"


def test_every_top_level_file_of_gpu_mirrors_a_reference_file():
    """gpu/NAME.py exists only where reference/NAME.py does (or the package reference/NAME/:
    gpu/tree.py mirrors reference/tree/); the one sub-package is gpu/device/."""
    for path in sorted(GPU.glob("*.py")):
        if path.name == "__init__.py":
            continue
        twin_of = REFERENCE / path.name, REFERENCE / path.stem / "__init__.py"
        assert any(p.is_file() for p in twin_of), (
            f"gpu/{path.name} mirrors no file of reference/: a twin file is named after the "
            "reference file it mirrors; device machinery goes in gpu/device/"
        )
    folders = {p.name for p in GPU.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {"device"}, f"gpu/ holds other folders than device/: {folders}"


def test_the_device_package_twins_nothing_and_says_what_each_file_is_for():
    """No file of gpu/device/ shadows a reference name (it would belong one level up), and
    each opens with a docstring; the kernels' CUDA source ships beside the module that
    compiles it."""
    device = GPU / "device"
    for path in sorted(device.glob("*.py")):
        if path.name != "__init__.py":
            assert not (REFERENCE / path.name).exists(), f"gpu/device/{path.name} twins reference/"
        assert ast.get_docstring(ast.parse(path.read_text())), f"gpu/device/{path.name}"
    assert (device / "kernels.cu").is_file()
    assert gpu.device.kernels.SOURCE == device / "kernels.cu"


def test_every_reference_drafter_has_a_registered_twin():
    """Each twin registers itself where it is defined (gpu.drafters.register_twin): importing
    gpu registers them all, so `as_twin_drafter` knows every drafter of the reference that
    has a twin (a lookup drafter drafts on the host: it has none)."""
    assert set(TWIN_MAKERS) == {
        drafters.ModelDrafter,
        early_exit.EarlyExitDrafter,
        eagle.EagleDrafter,
        heads.HeadsDrafter,
        lookup.HybridDrafter,
        tree_drafters.ModelTreeDrafter,
        tree_drafters.HeadsTreeDrafter,
        tree_eagle.EagleTreeDrafter,
    }


def test_every_fused_operation_is_a_named_function_with_its_plan_and_kernel():
    """A fused operation is the function a reader finds by its name: its body is its own
    source, `@fused(plan)` names its plan, and its kernel is the kernels.cu function of that
    name (kernels.py `FusedOperation`); no call hands a body over or names a kernel by a
    string."""
    operations = {
        fused.embed: ("embed_rows", fused.embed_plan),
        fused.layer_norm_rows: ("layer_norm_rows", fused.layer_norm_plan),
        fused.fused_linear: ("fused_linear", fused.linear_plan),
        fused.cached_attention: ("cached_attention", fused.attention_plan),
        sampling.pick: ("pick_rows", fused.pick_plan),
        verification.decide_packed: ("decide_packed", fused.decide_plan),
    }
    cuda = (GPU / "device" / "kernels.cu").read_text()
    for operation, (kernel, plan) in operations.items():
        assert isinstance(operation, FusedOperation), operation
        assert (operation.kernel, operation.plan) == (kernel, plan)
        assert operation.body is operation.__wrapped__
        assert operation.__name__ == operation.body.__name__  # found by the name it is called
        assert f'extern "C" __global__ void {kernel}(' in cuda
    for path in sorted(GPU.rglob("*.py")):
        assert "run_fused" not in path.read_text(), f"{path}: a body handed over by a string"

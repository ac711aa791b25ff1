"""What a submitted file may import: its exercise's libraries (numpy, scipy, torch where it is
installed) and grading.toml's `libraries`; anything else is refused in words that name what is
offered and how a teacher adds a library (specdec/grading/engine/sandbox.py's `refusal`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specdec.grading.delivery.cli import main
from specdec.grading.engine.config import load_config
from specdec.grading.engine.grade import grade
from specdec.grading.engine.sandbox import Sandbox, offering
from specdec.grading.engine.submission import LoadError

from .zips import build_zip, requirements_of

REPO = Path(__file__).resolve().parents[2]
SOLUTION = (REPO / "notebooks/exercises/solutions/sampling_solution.py").read_text()
UNOFFERED = "matplotlib"  # installed here (a dev dependency), offered by no exercise


def submitted(tmp_path: Path, head: str, name: str = "my_sampling.py") -> str:
    """The sampling solution with `head` (import lines) at its top -> its spec."""
    file = tmp_path / name
    future = "from __future__ import annotations\n"
    file.write_text(SOLUTION.replace(future, future + textwrap.dedent(head), 1))
    return f"{file}:sampling_distribution"


def test_scipy_is_offered_to_every_exercise(tmp_path):
    # the solution with its softmax taken from scipy: graded in full, and passed
    spec = submitted(tmp_path, "")
    path = Path(spec.rpartition(":")[0])
    path.write_text(
        SOLUTION.replace("import numpy as np\n", "import numpy as np\nimport scipy.special\n", 1)
        .replace("def softmax(z: np.ndarray) -> np.ndarray:  # [V] -> [V]", "def unused(z):")
        .replace("p = softmax(z)", "p = scipy.special.softmax(z)")
    )
    assert "scipy.special.softmax(z)" in path.read_text()
    assert grade(spec).passed


@pytest.mark.parametrize("module", [UNOFFERED, "no_such_library_anywhere"])
def test_an_unoffered_import_is_refused_with_what_is_offered(tmp_path, module):
    spec = submitted(tmp_path, f"import {module}\n")
    with pytest.raises(LoadError) as raised:
        grade(spec)
    said = str(raised.value)
    assert f"No module named '{module}'" in said
    assert "numpy, scipy" in said and "standard library" in said
    assert f'`libraries = ["{module}"]` in grading.toml' in said


def test_an_import_inside_a_call_is_refused_in_the_same_words(tmp_path):
    # a module imported when the function runs, not when the file loads: the same message
    file = tmp_path / "late.py"
    file.write_text(f"def verify(p, q, d, rng):\n    import {UNOFFERED}\n    return 0, 0\n")
    sandbox = Sandbox(file, ("numpy", "scipy"))
    try:
        assert sandbox.load(["verify"])["found"]
        with pytest.raises(ModuleNotFoundError, match="grading.toml") as raised:
            sandbox.call(0, (None, None, None, None), {})
    finally:
        sandbox.close()
    assert "numpy, scipy and Python's standard library" in str(raised.value)


def test_a_module_of_an_offered_library_that_is_missing_is_not_called_unoffered(tmp_path):
    spec = submitted(tmp_path, "import scipy.no_such_module\n")
    with pytest.raises(LoadError, match="scipy.no_such_module") as raised:
        grade(spec)
    assert "grading.toml" not in str(raised.value)


def test_a_library_the_config_offers_can_be_imported(tmp_path, capsys):
    spec = submitted(tmp_path, f"import {UNOFFERED}\n")
    config = tmp_path / "grading.toml"
    config.write_text(f'libraries = ["{UNOFFERED}"]\n')
    assert main([spec, "--config", str(config)]) == 0  # specdec grade --config: passed
    assert "RESULT: PASS" in capsys.readouterr().out
    assert grade(spec, config=load_config(config)).passed  # grade() offers the config's
    with offering(load_config(config).libraries):  # and what an enclosing block offers
        assert grade(spec).passed


@pytest.mark.parametrize(
    "toml, message",
    [
        ('libraries = ["no_such_library_anywhere"]\n', "not installed where the grader runs"),
        ('libraries = "matplotlib"\n', "libraries must be a list of names"),
    ],
)
def test_a_library_that_is_not_installed_is_refused_when_the_config_is_read(
    tmp_path, toml, message
):
    (tmp_path / "bad.toml").write_text(toml)
    with pytest.raises(ValueError, match=message):
        load_config(tmp_path / "bad.toml")


def test_the_zip_pins_the_offered_libraries(tmp_path):
    # scipy (every exercise's) and the config's own, beside what the grader imports; torch,
    # offered where installed, is not shipped unless the config lists it
    plain = requirements_of(build_zip(tmp_path / "plain", "cache")).split()
    added = requirements_of(
        build_zip(tmp_path / "added", "cache", f'libraries = ["{UNOFFERED}"]\n')
    ).split()
    names = [line.split("==")[0].lower() for line in added]
    assert "scipy" in [line.split("==")[0] for line in plain] and "torch" not in names
    assert names == sorted(names) and set(added) - set(plain) == {
        next(line for line in added if line.startswith(f"{UNOFFERED}=="))
    }

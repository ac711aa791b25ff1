"""The plug-in point: --verify / --speculative load another implementation by name or file."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from reference.drafters import ModelDrafter
from reference.speculative import speculative_generate
from reference.verification import verify
from specdec.oracle.cases import AB_P, AB_Q, LOOP_SETUPS
from specdec.oracle.laws import as_outcome

pytestmark = pytest.mark.distribution

REPO = Path(__file__).resolve().parents[2]

STUDENT_VERIFY = textwrap.dedent(
    """
    from reference.verification import verify as _reference

    def verify(p_target, q_draft, draft_tokens, rng):
        v = _reference(p_target, q_draft, draft_tokens, rng)
        return (v.accepted, v.token)  # the tuple form of the contract
    """
)


def test_loads_a_module_function_by_name(load_plugin):
    assert load_plugin("reference.verification:verify") is verify
    assert load_plugin("reference.speculative:speculative_generate") is speculative_generate


def test_loads_a_function_from_a_file(load_plugin, tmp_path, monkeypatch):
    (tmp_path / "my_verify.py").write_text(STUDENT_VERIFY)
    fn = load_plugin(f"{tmp_path / 'my_verify.py'}:verify")
    accepted, token = fn(AB_P, AB_Q, np.array([0]), np.random.default_rng(0))
    assert accepted in (0, 1) and token in (0, 1)
    monkeypatch.chdir(tmp_path)  # the relative forms: a file path and a module name
    assert load_plugin("./my_verify.py:verify").__name__ == "verify"
    assert load_plugin("my_verify:verify").__name__ == "verify"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("reference.verification", "expected MODULE:FUNCTION"),
        ("reference.verification:", "expected MODULE:FUNCTION"),
        ("reference.verification:no_such_function", "has no attribute 'no_such_function'"),
        ("reference.verification:ROW_SUM_ATOL", "not a function"),
        ("no_such_module_xyz:verify", "cannot import module 'no_such_module_xyz'"),
        ("missing/dir/my_verify.py:verify", "no such file"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(load_plugin, spec, message):
    with pytest.raises(pytest.UsageError, match=message) as info:
        load_plugin(spec, "--verify")
    assert str(info.value).startswith(f"--verify={spec!r}")


def test_a_file_that_fails_to_import_says_so(load_plugin, tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('typo in my file')\n")
    with pytest.raises(pytest.UsageError, match="raised RuntimeError: typo in my file"):
        load_plugin(f"{tmp_path / 'broken.py'}:verify")


def test_the_fixtures_grade_what_the_options_name(
    pytestconfig, verify_impl, speculative_impl, tree_impl
):
    expected = {
        "verify": pytestconfig.getoption("verify") or "reference.verification:verify",
        "speculative": pytestconfig.getoption("speculative")
        or "reference.speculative:speculative_generate",
        "tree": pytestconfig.getoption("tree") or "reference.tree:tree_speculative_generate",
    }
    graded = ((verify_impl, "verify"), (speculative_impl, "speculative"), (tree_impl, "tree"))
    for fn, kind in graded:
        module, _, name = expected[kind].rpartition(":")
        assert fn.__name__ == name
        if not module.endswith(".py"):  # a dotted name: the very function it names
            assert fn is getattr(importlib.import_module(module), name), kind


def test_the_graded_verify_honours_the_contract(verify_impl):
    """A quick, clear failure before the statistics if the plug-in's output is malformed."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = np.array([rng.choice(2, p=AB_Q[0])])
        accepted, token = as_outcome(verify_impl(AB_P, AB_Q, x, rng), k=1, n_vocab=2)
        assert accepted in (0, 1) and token in (0, 1)


def test_the_graded_loop_honours_the_contract(speculative_impl):
    setup = LOOP_SETUPS["t1_k2"]
    result = speculative_impl(
        setup.target_model(),
        ModelDrafter(setup.draft_model()),
        list(setup.prompt),
        k=setup.k,
        max_new_tokens=setup.max_new_tokens,
        rng=np.random.default_rng(0),
        sampling=setup.sampling,
        eos_id=setup.eos_id,
    )
    assert len(result.tokens) == setup.max_new_tokens
    assert all(0 <= a <= setup.k for a in result.stats.accepted_per_round)


def run_pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_command_line_end_to_end(tmp_path):
    """`pytest --verify=file.py:verify` grades the file; a bad spec stops pytest at once."""
    student = tmp_path / "my_verify.py"
    student.write_text(STUDENT_VERIFY)
    this = "tests/distribution/test_plugin.py"
    ok = run_pytest(
        this + "::test_the_graded_verify_honours_the_contract",
        this + "::test_the_fixtures_grade_what_the_options_name",
        f"--verify={student}:verify",
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"verify = {student}:verify" in ok.stdout  # the report header names what is graded
    bad = run_pytest(this, "--verify=my_verify.py", "--co", cwd=REPO)
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--verify='my_verify.py': expected MODULE:FUNCTION" in bad.stderr

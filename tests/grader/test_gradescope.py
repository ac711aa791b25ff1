"""The Gradescope autograder (specdec/grading/delivery/gradescope.py), end to end: the zip is built,
unpacked into a temporary tree laid out as Gradescope lays out /autograder (source/,
submission/, results/), and its `run_autograder` is run as Gradescope runs it. results.json
must be written in every case, with a score and a plain reason."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from specdec.grading.engine.config import DEFAULT_WEIGHTS, GradingConfig, load_config

from . import zips
from .test_grade import WRONG_VERIFY

REPO = Path(__file__).resolve().parents[2]


def build_zip(tmp: Path, toml: str = "", *options: str) -> Path:
    config = tmp / "grading.toml"
    config.write_text(toml)
    out = tmp / "autograder.zip"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdec.grading.delivery.gradescope",
            "build",
            str(out),
            "--config",
            str(config),
            *options,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


def autograde(zip_path: Path, tmp: Path, files: dict[str, str]) -> dict:
    """Lay out /autograder in `tmp`, run run_autograder there with this Python (the clean-venv
    runs are test_gradescope_zips*.py's), return results.json."""
    with zipfile.ZipFile(zip_path) as archive:
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    for name in ("setup.sh", "run_autograder"):  # extractall drops the modes; Gradescope doesn't
        assert modes[name] & stat.S_IXUSR
    return zips.autograde(zip_path, Path(sys.executable), tmp / "autograder", files)


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    return build_zip(tmp_path_factory.mktemp("build"))


def test_the_zip_holds_gradescopes_files_and_the_grader(autograder):
    with zipfile.ZipFile(autograder) as archive:
        names = set(archive.namelist())
        requirements = archive.read("requirements.txt").decode()
        config = json.loads(archive.read("config.json"))
    assert {"setup.sh", "run_autograder", "requirements.txt", "config.json"} <= names
    assert {
        "specdec/grading/exercises/verify/checks.py",
        "specdec/standins.py",
        "reference/speculative.py",
    } <= names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    assert [line.split("==")[0] for line in requirements.split()] == [
        "numpy",
        "scipy",
        "threadpoolctl",
    ]
    assert config["require_rule"] is True and config["families"]["law"]["weight"] == 6
    done = subprocess.run(["bash", "-n", "-c", archive_text(autograder, "setup.sh")])
    assert done.returncode == 0  # setup.sh parses (it needs Gradescope's image to run)


def archive_text(path: Path, name: str) -> str:
    with zipfile.ZipFile(path) as archive:
        return archive.read(name).decode()


def test_a_correct_submission_gets_full_marks_from_the_unpacked_grader(tmp_path):
    # the zip of another exercise (--exercise sets the file, the function and the kind): its
    # solution is graded in a second, where a correct verify's full grading takes ~11 s (the
    # command line grades that one: tests/grader/test_grade.py)
    zipped = build_zip(tmp_path, "", "--exercise", "sampling")
    solution = REPO / "notebooks/exercises/solutions/sampling_solution.py"
    results = autograde(zipped, tmp_path, {"my_sampling.py": solution.read_text()})
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) == 10
    assert [t["name"].split(":")[0] for t in results["tests"]] == ["sampling"]
    assert all(t["visibility"] == "visible" and t["status"] == "passed" for t in results["tests"])
    # graded by the zip's copy of the grader, not the repository's
    assert results["extra_data"]["grader"].startswith(str(tmp_path / "autograder" / "source"))
    config = json.loads(zipfile.ZipFile(zipped).read("config.json"))
    assert (config["submission_file"], config["function"]) == (
        "my_sampling.py",
        "sampling_distribution",
    )


def test_a_wrong_submission_gets_each_family_with_its_reason(autograder, tmp_path):
    results = autograde(autograder, tmp_path, {"my_verify.py": WRONG_VERIFY})
    by_family = {t["name"].split(":")[0]: t for t in results["tests"]}
    assert by_family["law"]["score"] == 0 and "hint: " in by_family["law"]["output"]
    # it does use rng, but randomness is credited only to an exact verify (a garbage answer
    # drawn from rng would earn it otherwise), as is the in-loop family
    for family in ("randomness", "in-loop"):
        assert by_family[family]["score"] == 0
        assert "runs once the law family passed" in by_family[family]["output"]
    assert results["score"] == 0


@pytest.mark.parametrize(
    "files, reason",
    [
        ({"my_verify.py": "def verify(p, q, x, rng)\n    return 0, 0\n"}, "SyntaxError"),
        (
            {"my_verify.py": "def verfy(p_target, q_draft, draft_tokens, rng):\n    return 0, 0\n"},
            "has no function 'verify' (it defines: verfy)",
        ),
        ({"notes.txt": "I ran out of time"}, "no file my_verify.py in your submission"),
        (
            {"my_verify.py": "import numpy as np\nSCALE = 1 / 0\n"},
            "importing my_verify.py raised ZeroDivisionError: division by zero",
        ),
    ],
    ids=["syntax-error", "missing-function", "missing-file", "crash-on-import"],
)
def test_code_that_cannot_be_graded_scores_0_with_the_reason(autograder, tmp_path, files, reason):
    results = autograde(autograder, tmp_path, files)
    assert results["score"] == 0 and reason in results["output"], results["output"]
    assert all(t["score"] == 0 and reason in t["output"] for t in results["tests"])
    assert sum(t["max_score"] for t in results["tests"]) == 10  # the student sees out of what
    if reason == "SyntaxError":
        assert "my_verify.py, line 1: def verify(p, q, x, rng)" in results["output"]


ENDLESS = textwrap.dedent(
    """
    def verify(p_target, q_draft, draft_tokens, rng):
        accepted = 0
        while accepted < len(draft_tokens) + 1:  # never returns
            pass
        return accepted, 0
    """
)


def test_an_endless_loop_is_stopped_and_scores_0(tmp_path):
    short = build_zip(tmp_path, "timeout_s = 4\n")
    results = autograde(short, tmp_path, {"my_verify.py": ENDLESS})
    assert results["score"] == 0
    assert "grading was stopped after 4 s: your verify did not return" in results["output"]


def test_weights_visibility_and_the_rule_choice_come_from_the_config(tmp_path):
    toml = textwrap.dedent(
        """
        require_rule = false
        [families.law]
        weight = 8
        [families.randomness]
        visibility = "after_due_date"
        """
    )
    zip_path = build_zip(tmp_path, toml)
    config = json.loads(archive_text(zip_path, "config.json"))
    assert config["require_rule"] is False and config["families"]["law"]["weight"] == 8
    assert config["families"]["randomness"] == {"weight": 1.0, "visibility": "after_due_date"}
    loaded = load_config(tmp_path / "grading.toml")
    assert loaded.points("rule") == 0 and loaded.points("law") == 8


def test_the_default_config_file_holds_the_defaults():
    # specdec/grading/grading.toml documents the defaults that GradingConfig() holds in code
    from_file = load_config(REPO / "specdec/grading/grading.toml")
    assert from_file == GradingConfig()
    assert set(from_file.families) == set(DEFAULT_WEIGHTS)


@pytest.mark.parametrize(
    "toml, message",
    [
        ("require_rul = false\n", "unknown keys ['require_rul']"),
        ('[families.law]\nvisibility = "secret"\n', "families.law.visibility must be one of"),
        ("[families.law]\nweight = -1\n", "weights must be >= 0"),
    ],
)
def test_a_wrong_config_is_refused_when_the_zip_is_built(tmp_path, toml, message):
    (tmp_path / "bad.toml").write_text(toml)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(tmp_path / "bad.toml")


def test_results_json_is_not_written_into_the_repository_by_default():
    from specdec.grading import GRADESCOPE_RESULTS

    assert GRADESCOPE_RESULTS == "/autograder/results/results.json"
    assert "results.json" in (REPO / ".gitignore").read_text().split()

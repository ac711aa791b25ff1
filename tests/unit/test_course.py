"""`specdec course DIR`: the notebooks and exercises unpacked for a student, never over a file.

tests/install/test_wheel.py runs the same command from an installed wheel; these check the
rules on the package data of this checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.cli import main
from specdec.course import course_files, unpack_course

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_course_holds_every_notebook_its_source_and_every_exercise():
    chosen = {str(f.relative) for f in course_files()}
    assert NOTEBOOKS and set(NOTEBOOKS) <= chosen
    assert {name.replace(".ipynb", ".py") for name in NOTEBOOKS} <= chosen
    skeletons = {f"exercises/{p.name}" for p in (ROOT / "notebooks/exercises").glob("my_*.py")}
    assert len(skeletons) == 8 and skeletons <= chosen
    assert "exercises/README.md" in chosen
    assert "render.py" not in chosen and "__init__.py" not in chosen  # the checkout's tooling
    assert not any("solutions" in name for name in chosen), "solutions copied unasked"


def test_solutions_only_when_asked(tmp_path):
    written = unpack_course(tmp_path / "with", solutions=True)
    solutions = [p for p in written if p.parent.name == "solutions"]
    assert len(solutions) == 8
    assert (tmp_path / "with/exercises/solutions/verify_solution.py").read_bytes() == (
        ROOT / "notebooks/exercises/solutions/verify_solution.py"
    ).read_bytes()
    assert "--solutions" not in (tmp_path / "with/README.md").read_text()
    unpack_course(tmp_path / "without")
    assert not (tmp_path / "without/exercises/solutions").exists()
    assert "--solutions" in (tmp_path / "without/README.md").read_text()


def test_a_file_in_the_way_stops_everything(tmp_path):
    """One file the course would write is there already: nothing is written, nothing changed,
    and the error names it."""
    folder = tmp_path / "course"
    (folder / "exercises").mkdir(parents=True)
    mine = folder / "exercises" / "my_verify.py"
    mine.write_text("# my own work\n")
    with pytest.raises(ValueError, match=r"exercises/my_verify\.py.*nothing was written"):
        unpack_course(folder)
    assert sorted(p.name for p in folder.rglob("*")) == ["exercises", "my_verify.py"]
    assert mine.read_text() == "# my own work\n"


def test_a_folder_with_other_files_is_fine(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    unpack_course(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "05_acceptance_rejection.ipynb").is_file()


def test_the_command_says_what_it_wrote_and_refuses_clearly(tmp_path, capsys):
    assert main(["course", str(tmp_path / "c")]) == 0
    said = capsys.readouterr().out
    assert "13 notebooks" in said and "8 exercises" in said and "jupyter lab" in said
    with pytest.raises(SystemExit) as stopped:
        main(["course", str(tmp_path / "c")])
    assert stopped.value.code == 2
    assert "nothing was written" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SystemExit):
        main(["course", str(tmp_path / "a-file")])
    assert "is a file, not a folder" in capsys.readouterr().err

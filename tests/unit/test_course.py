"""`specdec course DIR`: the notebooks and exercises unpacked for a student, never over a file.

tests/install/test_wheel.py runs the same command from an installed wheel; these check the
rules on the package data of this checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec.cli import main
from specdec.course import course_files, unpack_course

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted(p.name for p in (ROOT / "notebooks/exercises/solutions").glob("*.py"))
ANSWERS = ROOT / "notebooks/exercises/solutions/check_yourself.md"


def test_the_course_holds_every_notebook_its_source_and_every_exercise():
    chosen = {str(f.relative) for f in course_files()}
    assert NOTEBOOKS and set(NOTEBOOKS) <= chosen
    assert {name.replace(".ipynb", ".py") for name in NOTEBOOKS} <= chosen
    skeletons = {f"exercises/{p.name}" for p in (ROOT / "notebooks/exercises").glob("my_*.py")}
    assert len(skeletons) >= 8 and skeletons <= chosen
    assert "exercises/README.md" in chosen
    assert "render.py" not in chosen and "__init__.py" not in chosen  # the checkout's tooling
    assert not any("solutions" in name for name in chosen), "solutions copied unasked"


def test_solutions_only_when_asked(tmp_path):
    written = unpack_course(tmp_path / "with", solutions=True)
    solutions = [p for p in written if p.parent.name == "solutions" and p.suffix == ".py"]
    assert len(solutions) == len(SOLUTIONS) >= 8
    assert (tmp_path / "with/exercises/solutions/check_yourself.md").is_file()  # self-study
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
    skeletons = len(list((ROOT / "notebooks/exercises").glob("my_*.py")))
    assert "15 notebooks" in said and f"{skeletons} exercises" in said and "jupyter lab" in said
    with pytest.raises(SystemExit) as stopped:
        main(["course", str(tmp_path / "c")])
    assert stopped.value.code == 2
    assert "nothing was written" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SystemExit):
        main(["course", str(tmp_path / "a-file")])
    assert "is a file, not a folder" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The students' copy and the instructors' bundle (docs/teaching.md)
# --------------------------------------------------------------------------------------------


def every_file(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_the_students_copy_holds_no_solution_and_no_answer(tmp_path):
    unpack_course(tmp_path / "students", instructor=tmp_path / "bundle")
    files = every_file(tmp_path / "students")
    assert not any("solutions" in p.parts or p.name == ANSWERS.name for p in files)
    solved = {(ROOT / "notebooks/exercises/solutions" / name).read_bytes() for name in SOLUTIONS}
    answers = ANSWERS.read_text()
    first_answer = answers.split("\n1. ", 1)[1][:60]  # a line only the answers hold
    for path in files:
        assert path.read_bytes() not in solved, f"{path} is a worked solution"
        if path.suffix in (".md", ".py", ".ipynb"):
            assert first_answer not in path.read_text(), f"{path} holds an answer"
    # while every notebook still asks its questions
    for name in NOTEBOOKS:
        source = tmp_path / "students" / name.replace(".ipynb", ".py")
        assert "Check yourself" in source.read_text()


def test_the_instructors_bundle_holds_every_solution_and_the_answers(tmp_path, capsys):
    assert main(["course", str(tmp_path / "students"), "--instructor", str(tmp_path / "b")]) == 0
    said = capsys.readouterr().out
    assert f"{len(SOLUTIONS)} worked solutions and the check-yourself answers" in said
    assert "(no solutions: --solutions adds them)" in said  # the students' line
    bundle = tmp_path / "b"
    assert sorted(p.name for p in (bundle / "solutions").glob("*.py")) == SOLUTIONS
    for name in SOLUTIONS:
        assert (bundle / "solutions" / name).read_bytes() == (
            ROOT / "notebooks/exercises/solutions" / name
        ).read_bytes()
    assert (bundle / "solutions" / ANSWERS.name).read_bytes() == ANSWERS.read_bytes()
    readme = (bundle / "README.md").read_text()
    assert "specdec grade-class" in readme and "gradescope" in readme
    assert not any(p.suffix == ".ipynb" for p in every_file(bundle))  # the course is not in it


def test_the_bundle_alone_and_the_bundle_apart(tmp_path, capsys):
    assert main(["course", "--instructor", str(tmp_path / "only")]) == 0
    assert (tmp_path / "only/solutions" / ANSWERS.name).is_file()
    assert not list((tmp_path / "only").glob("*.ipynb"))
    capsys.readouterr()
    for bundle in ("s", "s/teacher"):  # the same folder, or one inside the students' copy
        with pytest.raises(ValueError, match="two separate folders"):
            unpack_course(tmp_path / "s", instructor=tmp_path / bundle)
        assert not (tmp_path / "s").exists(), "something was written"
    with pytest.raises(SystemExit) as stopped:
        main(["course"])
    assert stopped.value.code == 2 and "--instructor BUNDLE" in capsys.readouterr().err


def test_every_check_yourself_question_has_its_answer():
    """Each notebook ends with three to five questions; the answers file has as many answers,
    under the notebook's number, and no notebook holds an answer."""
    sections = ANSWERS.read_text().split("\n## ")[1:]
    answers = {s[:2]: s for s in sections}
    sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert sources and sorted(answers) == [p.name[:2] for p in sources]
    for source in sources:
        last = source.read_text().rsplit("# %%", 1)[1]
        assert last.startswith(" [markdown]\n# ## Check yourself"), f"{source.name} ends otherwise"
        asked = re.findall(r"^# (\d)\. ", last, flags=re.M)
        given = re.findall(r"^(\d)\. ", answers[source.name[:2]], flags=re.M)
        assert 3 <= len(asked) <= 5 and asked == given, (source.name, asked, given)

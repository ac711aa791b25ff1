"""How a grade reaches people: the command line (cli.py: `specdec grade`, `python -m
specdec.grading`), a class at once (classroom.py: `specdec grade-class`) and Gradescope
(gradescope.py: the autograder zip, and the run it makes per submission)."""

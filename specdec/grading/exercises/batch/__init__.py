"""The ragged-batch exercise (notebooks/exercises/my_batch.py, ragged_pass). checks.py: three
families, every check exact (positions, the attention mask, the slots written), each held
against the rule written there from its statement, with switches for the usual mistakes that
the hints are read from. It imports nothing of the project: the rule is a few lines of NumPy,
and tests/grader/test_exercise_batch.py holds it against reference/batch.py."""

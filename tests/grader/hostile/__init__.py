"""Hostile submissions to the verify exercise: each file is a whole `my_verify.py` that tries
to get a grade it did not earn, or to harm the machine or other students. The catalogue in
tests/grader/hostile_catalogue.py says what each tries and what the grader must answer;
tests/grader/test_hostile.py hands each one to the grader by every route a student's file
takes (specdec grade, grade-class, the Gradescope zip).

They are data, never imported by the tests: several of them exit or fork when imported."""

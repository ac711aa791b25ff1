"""Hostile: imports the reference's verify and hands it in as its own.

The grader must answer: 0, saying the import failed (ModuleNotFoundError: No module named
'reference'): the worker holds no project package."""

from reference.verification import verify  # noqa: F401

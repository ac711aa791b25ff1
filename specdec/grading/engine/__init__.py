"""The engine: what grades any exercise, knowing none of them (specdec/grading/__init__.py
maps the files). It imports nothing from an exercise's folder, from delivery/ or from
project.py: an exercise's checks are found through the registry (exercises/__init__.py)."""

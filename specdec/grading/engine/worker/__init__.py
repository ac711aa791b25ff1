"""The worker: the only process where a submitted file runs (worker.py), the format it speaks
(wire.py) and how it is held (confinement.py). sandbox.py copies these three files, and
nothing else of the grader, into a scratch folder's `worker/` and starts `python -I -S
worker/worker.py` there: they import only each other, the standard library and NumPy."""

"""The course, shipped in the wheel as the package data of `specdec.notebooks`.

The notebooks (rendered `.ipynb` and their jupytext `.py` sources) and the exercises, which
`specdec course DIR` unpacks for a student (specdec/course.py). Nothing here is imported.
"""

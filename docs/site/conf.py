"""Sphinx configuration of the course website: `make site` writes site/ (docs/site.md).

The source folder is the repository root (`sphinx-build -c docs/site . site`), so the pages'
own relative links (`../notebooks/05_acceptance_rejection.ipynb`, `figures/pipeline.png`)
resolve in the site as they do on GitHub, with no rewriting. The notebooks are the committed
`.ipynb` files with their outputs, never executed here. The navigation, the notebooks' banners
and the folder links come from course.py, which reads them off docs/index.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

project = "specdec-lab"
html_title = "specdec-lab: speculative decoding from scratch"
author = "specdec-lab"
copyright = "specdec-lab authors (MIT)"

extensions = ["myst_nb", "course"]
root_doc = "docs/index"
include_patterns = [
    "docs/*.md",
    "docs/bench-*/**.md",
    "notebooks/[0-9][0-9]_*.ipynb",
    "notebooks/exercises/README*.md",
    "README.md",
    "README.zh-CN.md",
]
# folders Sphinx would otherwise walk looking for sources (the venvs hold thousands of files)
exclude_patterns = [".venv", "build", "site", ".git", "**/.ipynb_checkpoints"]

# MyST: GitHub's heading anchors (docs link to `algorithm.md#tree-drafts`) and $…$ math
myst_heading_anchors = 6
myst_enable_extensions = ["dollarmath"]
nb_execution_mode = "off"  # the committed outputs, drawn on the machine that rendered them
nb_merge_streams = True

# MathJax from the django-static-mathjax package, copied into _static by course.py
mathjax3_config = {"options": {"enableMenu": False}}

html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_navbar_depth": 1,
    "use_download_button": False,  # each notebook's banner links its .ipynb and source
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
# the theme's light/dark switch starts from this (without it the theme logs an error)
html_context = {"default_mode": "auto"}
html_static_path = ["static"]
html_css_files = ["course.css"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
# a search result's summary is fetched from its page: browsers refuse that from file://
html_show_search_summary = False

suppress_warnings = [
    "misc.highlighting_failure",  # checkpoints.md shows a header with a `…` in it, not JSON
]

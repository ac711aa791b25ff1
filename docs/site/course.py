"""What makes the docs and notebooks one course website (a Sphinx extension; docs/site.md).

Everything here is read from the pages themselves, so the site follows them without a second
list to keep in step:

- the navigation: docs/index.md (the course map) lists the notebooks and the other pages in
  its own order; the site's sidebar follows that order;
- the banner of each notebook page: which article sections it teaches (the course map's
  table), its `.ipynb` and jupytext source, and its exercise (notebooks/exercises/README.md);
- links to a folder (`../notebooks`, `solutions/`), which GitHub shows as a listing: the site
  sends them to a section of the course map, or to a listing page written here.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import mathjax  # django-static-mathjax: MathJax 3 as plain files
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

ROOT_DOC = "docs/index"
# one file, all of TeX input and SVG output, with no font files or extensions to load later:
# 2 MB of the package's 24 MB
MATHJAX_FILE = "tex-svg-full.js"

# a folder link and the part of the course map that shows that folder's contents
FOLDER_SECTIONS = {
    "notebooks": "docs/index.html#the-notebooks",
    "docs/figures": "docs/index.html#figures",
}
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)")
# an anchor of its own on a line of a page (`<a id="leviathan2023"></a>`, as docs/references.md
# writes one per entry): GitHub links to it as it is; the site reads it as a MyST target, so
# that `references.md#leviathan2023` resolves (and a dead one still fails the build)
HTML_ANCHOR = re.compile(r'^<a id="([A-Za-z][\w-]*)"></a>[ \t]*$', re.MULTILINE)


def notebook_number(name: str) -> str | None:
    m = re.match(r"(\d\d)_\w+$", name)
    return m.group(1) if m else None


def course_map(index_md: str) -> dict:
    """The course map's own order and facts.

    Returns {"sections": {"05": [("4", "Accept with …"), …]}, "notebooks": [docnames in the
    order of its notebooks table], "pages": [docs/ docnames in the order of "Other pages"]}.
    """
    sections: dict[str, list[tuple[str, str]]] = {}
    notebooks: list[str] = []
    pages: list[str] = []
    part = ""
    for line in index_md.splitlines():
        if line.startswith("## "):
            part = line[3:].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if part == "" and len(cells) >= 3 and cells[0].isdigit():
            # | § | Article section | Notebook | Code | Tests |
            title = cells[1]
            for nb in re.findall(r"\.\./notebooks/(\d\d)_\w+\.ipynb", cells[2]):
                if (cells[0], title) not in sections.setdefault(nb, []):
                    sections[nb].append((cells[0], title))
        elif part == "The notebooks":
            m = re.match(r"\| \[\w+\]\(\.\./(notebooks/\d\d_\w+)\.ipynb\)", line)
            if m and m.group(1) not in notebooks:
                notebooks.append(m.group(1))
        elif part == "Other pages":
            m = re.match(r"- \[[^\]]+\]\(([\w-]+)\.md\)", line)
            if m:
                pages.append("docs/" + m.group(1))
    return {"sections": sections, "notebooks": notebooks, "pages": pages}


def exercises_by_notebook(readme_md: str) -> dict[str, list[str]]:
    """{"07": ["notebooks/exercises/my_loop.py:speculative_generate", …]}, from the README's
    table (| idea | `notebooks/exercises/my_X.py:NAME` | NN | time |)."""
    out: dict[str, list[str]] = {}
    for spec, nb in re.findall(r"`(notebooks/exercises/my_\w+\.py:\w+)` \| (\d\d) \|", readme_md):
        out.setdefault(nb, []).append(spec)
    return out


def notebook_banner(docname: str, course: dict, exercises: dict[str, list[str]]) -> str:
    """MyST text put under a notebook's title: what it teaches, its files, its exercise."""
    name = docname.split("/")[-1]
    nb = notebook_number(name)
    taught = course["sections"].get(nb, [])
    lines = [f"§{num} {title}" for num, title in taught] or ["no article section of its own"]
    files = (f"{{download}}`{name}.ipynb` (with its outputs), "
             f"{{download}}`{name}.py` (jupytext source)")
    specs = exercises.get(nb, [])
    if specs:
        grade = ", ".join(
            f"{{download}}`{spec.split(':')[0].removeprefix('notebooks/')}` "
            f"(`specdec grade {spec}`)"
            for spec in specs
        )
        exercise = f"Exercise: {grade}; [all exercises](exercises/README.md)."
    else:
        exercise = "No exercise of its own: [all exercises](exercises/README.md)."
    return "\n".join([
        "```{admonition} Article " + ", ".join(f"§{n}" for n, _ in taught),
        ":class: course-banner",
        "Teaches: " + " · ".join(lines) + " ([course map](../docs/index.md)).",
        "",
        f"This notebook: {files}. {exercise}",
        "```",
        "",
    ])


def root_toctree(course: dict, docnames: list[str]) -> str:
    """The sidebar: notebooks, exercises, pages, in the course map's order; a page the map does
    not list (glossary, this site's note) comes after the pages it lists."""
    listed = course["pages"]
    extra = sorted(d for d in docnames if re.fullmatch(r"docs/[\w-]+", d)
                   and d != ROOT_DOC and d not in listed)
    parts = {
        "Notebooks": course["notebooks"],
        "Exercises": ["notebooks/exercises/README", "notebooks/exercises/README.zh-CN"],
        "Pages": listed + extra,
        "Project": ["README", "README.zh-CN"],
    }
    out = []
    for caption, docs in parts.items():
        entries = "\n".join("/" + d for d in docs if d in docnames)
        out.append(f"\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n")
    return "".join(out)


def _insert_after_title(markdown: str, text: str) -> str:
    lines = markdown.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("# ")) + 1
    return "\n".join(lines[:at] + ["", text] + lines[at:])


def html_anchors_as_targets(markdown: str) -> str:
    """`<a id="x"></a>` alone on a line -> the MyST target `(x)=`: the same anchor id in the
    page, and one Sphinx knows, so a link to `page.md#x` resolves."""
    return HTML_ANCHOR.sub(r"(\1)=", markdown)


def on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    course = app.config.course_map_facts
    if re.fullmatch(r"notebooks/\d\d_\w+", docname):
        nb = json.loads(source[0])
        first = nb["cells"][0]
        text = "".join(first["source"]) if isinstance(first["source"], list) else first["source"]
        banner = notebook_banner(docname, course, app.config.course_exercises)
        first["source"] = _insert_after_title(text, banner)
        source[0] = json.dumps(nb)
        return
    source[0] = html_anchors_as_targets(source[0])  # a Markdown page
    if docname == ROOT_DOC:
        source[0] += root_toctree(course, sorted(app.env.found_docs))
    elif docname.startswith("docs/bench-"):
        # a benchmark run's record: reached from benchmarks.md, kept out of the sidebar
        source[0] = "---\norphan: true\n---\n" + source[0]


def folder_links(srcdir: Path, sources: list[Path]) -> set[str]:
    """Every folder (relative to the repository) that a page links to."""
    out = set()
    for path in sources:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            folder = (path.parent / target).resolve()
            if folder.is_dir() and folder.is_relative_to(srcdir):
                out.add(folder.relative_to(srcdir).as_posix())
    return out


def folder_page(folder: str) -> str:
    """Where the site sends a link to `folder` (relative to the site's root)."""
    return FOLDER_SECTIONS.get(folder, f"{folder}/index.html")


class FolderLinks(SphinxPostTransform):
    """A link to a folder: MyST finds no page there, the site has one (before MyST's own
    resolver, which would warn)."""

    default_priority = 8  # MyST's resolver is 9

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(addnodes.pending_xref)):
            target = node.get("reftarget", "")
            if node.get("reftype") != "myst" or "://" in target:
                continue
            here = Path(node.get("refdoc", self.env.docname)).parent
            folder = os.path.normpath(here / target.rstrip("/")).replace(os.sep, "/")
            if folder not in self.config.course_folders:
                continue
            uri = os.path.relpath(folder_page(folder), here.as_posix()).replace(os.sep, "/")
            ref = nodes.reference("", "", internal=True, refuri=uri)
            ref += node.children
            node.replace_self(ref)


def write_folder_listing(srcdir: Path, outdir: Path, folder: str) -> None:
    """A plain page listing a folder's files, each copied beside it (an exercise's solutions)."""
    src, dst = srcdir / folder, outdir / folder
    dst.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in src.iterdir()
                   if p.is_file() and not p.name.startswith((".", "__")))
    for name in names:
        shutil.copyfile(src / name, dst / name)
    depth = "../" * (folder.count("/") + 1)
    items = "\n".join(f'<li><a href="{html.escape(n)}">{html.escape(n)}</a></li>' for n in names)
    dst.joinpath("index.html").write_text(
        f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{folder}/</title>
<style>body {{ font-family: sans-serif; max-width: 40em; margin: 2em auto; }}</style></head>
<body><p><a href="{depth}docs/index.html">Course map</a></p><h1><code>{folder}/</code></h1>
<ul>
{items}
</ul></body></html>
""",
        encoding="utf-8",
    )


def on_build_finished(app: Sphinx, exc) -> None:
    if exc is not None:
        return
    outdir, srcdir = Path(app.outdir), Path(app.srcdir)
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    (outdir / "_static" / "mathjax").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(es5 / MATHJAX_FILE, outdir / "_static" / "mathjax" / MATHJAX_FILE)
    for folder in app.config.course_folders:
        if folder not in FOLDER_SECTIONS:
            write_folder_listing(srcdir, outdir, folder)
    # site/index.html: the course map is docs/index.html, as docs/index.md is in the repository
    outdir.joinpath("index.html").write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="refresh" content="0; url=docs/index.html">'
        "<title>specdec-lab</title></head>\n"
        '<body><a href="docs/index.html">The course map</a></body></html>\n',
        encoding="utf-8",
    )


def on_config_inited(app: Sphinx, config) -> None:
    srcdir = Path(app.srcdir)
    config.course_map_facts = course_map((srcdir / "docs/index.md").read_text(encoding="utf-8"))
    config.course_exercises = exercises_by_notebook(
        (srcdir / "notebooks/exercises/README.md").read_text(encoding="utf-8"))
    pages = [*srcdir.glob("docs/*.md"), *srcdir.glob("notebooks/exercises/README*.md"),
             *srcdir.glob("README*.md")]
    config.course_folders = sorted(folder_links(srcdir.resolve(), pages))
    config.mathjax_path = "mathjax/" + MATHJAX_FILE


def setup(app: Sphinx) -> dict:
    for name in ("course_map_facts", "course_exercises", "course_folders"):
        app.add_config_value(name, None, "env")
    app.connect("config-inited", on_config_inited)
    app.connect("source-read", on_source_read)
    app.add_post_transform(FolderLinks)
    app.connect("build-finished", on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

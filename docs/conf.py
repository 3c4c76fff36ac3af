"""Sphinx configuration: `make html` renders the executed notebooks, the reproduction report and the API reference
into build/html. The site works with no network: MathJax is served from the build's own `_static/mathjax`
(the `sphinx-mathjax-offline` package), the theme ships its fonts and scripts, and no page loads a script from a
CDN (tests/test_site.py checks the built HTML)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

project = "fedcompanion"
author = "The fedcompanion authors"
release = __import__("importlib.metadata").metadata.version("fedcompanion")  # pyproject.toml's
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax", "sphinx.ext.viewcode",
              "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath", "amsmath", "deflist", "colon_fence"]  # colon_fence: the smoke banner
nb_execution_mode = "off"  # the notebooks were executed by `make reproduce` (or by the tests); render their outputs
nb_ipywidgets_js = {}  # no require.js or widget manager from a CDN: progress bars render as text
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
html_theme = "sphinx_book_theme"
html_title = "fedcompanion"
html_show_copyright = False
html_show_sphinx = False
html_static_path = ["_static"]
html_css_files = ["fedcompanion.css"]
html_theme_options = {
    "use_download_button": True,  # each notebook page: download it as .ipynb (the executed copy) or .md
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "extra_footer": "Built by <code>make html</code> from the executed notebooks; runs offline.",
}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]


def _no_builder_paths(app, what, name, obj, options, signature, return_annotation):
    """A default such as ``ROOT / "results"`` shows as ``<project>/results``, not as the builder's absolute path.
    (autodoc_preserve_defaults would do it by rewriting the functions' signatures in the building process.)"""
    import re
    from pathlib import Path

    import fedcompanion

    root = str(Path(fedcompanion.__file__).resolve().parents[2])
    if signature:
        signature = re.sub(r"PosixPath\('([^']*)'\)", lambda m: repr(m.group(1).replace(root, "<project>")), signature)
    return signature, return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _no_builder_paths)
    app.set_html_assets_policy("always")  # MathJax on every page: the sidebar's titles hold math on pages without

"""Sphinx configuration: `make html` renders the executed notebooks, the reproduction report and the API reference
into build/html, offline (no extension downloads anything at build time)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

project = "fedcompanion"
author = "The fedcompanion authors"
release = "0.2.0"
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax", "sphinx.ext.viewcode"]
myst_enable_extensions = ["dollarmath", "amsmath", "deflist"]
nb_execution_mode = "off"  # the notebooks were executed by `make reproduce` (or by the tests); render their outputs
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
html_theme = "alabaster"
html_title = "fedcompanion"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

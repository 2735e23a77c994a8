"""
The manual's Sphinx configuration: `make docs` builds it into build/docs
(sphinx-build -W --keep-going -b html docs build/docs).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from beacon import __version__  # noqa: E402

project = "Beacon"
author = "Beacon's authors"
copyright = "Beacon's authors"
version = release = __version__

extensions = ["sphinx.ext.autodoc", "beacon_docs"]
root_doc = "index"
exclude_patterns = ["_ext"]
# Literal blocks (`::`) are shell sessions, TOML, JSON and program output:
# shown as they are, not guessed at.
highlight_language = "none"
# The API reference: only what a face's __all__ names, in source order, its
# signatures without their annotations (the docstrings say the types).
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "alabaster"
html_title = f"Beacon {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

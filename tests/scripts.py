"""
The project's scripts (bench/, tools/), most without a C{.py} suffix,
loaded as modules for their tests.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """
    The script at C{path} as the module C{name}, loaded once: it is kept in
    C{sys.modules}, where its dataclasses look their module up.
    """
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module

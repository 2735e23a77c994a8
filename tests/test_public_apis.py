"""
Beacon reaches its dependencies (Twisted, autobahn, treq, psycopg, zope,
txaio, prometheus_client) through their public APIs only: an AST walk over C{beacon/} and the
twistd plugin fails on

    - an import of a private module or name of a dependency
      (C{from twisted.scripts._twistd_unix import ...},
      C{from twisted.internet.endpoints import _parse});
    - C{self._x} in a class whose dependency base classes define or set
      C{_x}, and C{obj._x} (or C{getattr(obj, "_x")}) on anything else
      unless the module itself defines or sets C{_x}: a private name is its
      module's, whether a dependency's or another room's of Beacon
      (C{reader._fail} from outside C{beacon.protocol.types} is a finding:
      what another module uses is public);
    - a method of a dependency class replaced on a live object
      (C{channel.dataReceived = ...});
    - C{Base.method(self, ...)} in a class whose direct parents do not
      include C{Base}, a dependency class: calling past the parent skips
      what the parent does.

Each finding is listed with its file and line.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import beacon

ROOT = Path(beacon.__file__).parent
PLUGIN = ROOT.parent / "twisted" / "plugins" / "beacon_plugin.py"
DEPENDENCIES = ("twisted", "autobahn", "treq", "psycopg", "zope", "txaio", "prometheus_client")
_SELF_PRIVATE = re.compile(r"\bself\.(_[A-Za-z]\w*)")
#: The classes that call a dependency's method past their parent, on
#: purpose, each with its reason; the scan finds any other.
PAST_THE_PARENT = {
    # unix.Port.connectionLost unlinks the port's path, then calls
    # tcp.Port's. OperatorSocket removes the path itself, at once on stop
    # (before the reactor turns, which a failed start never sees) and only
    # while it is still the socket it bound; by the port's connectionLost
    # the path is gone or someone else's, and an unlink there would fail,
    # leaving the port open, or remove another process's socket. Twisted
    # has no public way to keep a unix port's path.
    "beacon.bindings.operator._doors._KeptPathPort": "keeps its path: see OperatorSocket.stopService",
}
#: Underscored names that are public API: the named tuple's methods.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources() -> list[Path]:
    # A __main__ runs its program when imported: it is read, not imported.
    # beacon/proto's *_pb2*.py are protoc's output, not Beacon's code (tests/
    # test_proto.py holds them to what `make proto` generates).
    return [p for p in sorted(ROOT.rglob("*.py")) if "_pb2" not in p.name] + [PLUGIN]


def _module_name(path: Path) -> str:
    if path == PLUGIN:
        return "twisted.plugins.beacon_plugin"
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_dependency(obj: Any) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module.split(".")[0] in DEPENDENCIES and module != "twisted.plugins.beacon_plugin"


@lru_cache(maxsize=None)
def _dependency_privates(cls: type) -> frozenset[str]:
    """The private names a dependency class defines or sets on its instances."""
    names = {name for name in vars(cls) if _private(name)}
    try:
        names.update(_SELF_PRIVATE.findall(inspect.getsource(cls)))
    except (OSError, TypeError):
        pass
    return frozenset(names)


def _beacon_modules() -> dict[str, Any]:
    modules: dict[str, Any] = {}
    for path in _sources():
        name = _module_name(path)
        if name.endswith(".__main__"):
            modules[name] = type(sys)(name)
        else:
            modules[name] = importlib.import_module(name)
    return modules


def _dependency_method_names() -> frozenset[str]:
    """Every method name of every dependency class loaded by Beacon's modules."""
    names: set[str] = set()
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in DEPENDENCIES:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                for attr, member in vars(value).items():
                    if inspect.isfunction(member) and not attr.startswith("__"):
                        names.add(attr)
    return frozenset(names)


class _Scan(ast.NodeVisitor):
    """
    One module's findings. C{own_names} are the names Beacon defines or
    sets anywhere (see L{_own_names}), which may be assigned on an object
    without replacing a dependency's method; C{module_names}, those of this
    module, the only private attributes it may use on an object other than
    C{self} (all of Beacon's when not given).
    """

    def __init__(
        self,
        path: Path,
        module: Any,
        own_names: set[str],
        methods: frozenset[str],
        module_names: set[str] | None = None,
    ) -> None:
        self.path = path
        self.module = module
        self.own_names = own_names
        self.module_names = own_names if module_names is None else module_names
        self.methods = methods
        self.found: list[str] = []
        self._classes: list[type | None] = []

    def _say(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.path.relative_to(ROOT.parent)}:{getattr(node, 'lineno', 0)}: {what}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] in DEPENDENCIES and any(_private(p) for p in parts):
                self._say(node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        parts = (node.module or "").split(".")
        if node.level == 0 and parts[0] in DEPENDENCIES:
            if any(_private(p) for p in parts):
                self._say(node, f"from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    self._say(node, f"from {node.module} import {alias.name}")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        owner = self._classes[-1] if self._classes else None
        scope = vars(owner) if owner is not None else vars(self.module)
        found = scope.get(node.name)
        self._classes.append(found if isinstance(found, type) else None)
        self.generic_visit(node)
        self._classes.pop()

    def _dependency_bases(self) -> list[type]:
        cls = self._classes[-1] if self._classes else None
        if cls is None:
            return []
        return [base for base in cls.__mro__[1:] if _is_dependency(base)]

    def _check_private(self, node: ast.AST, owner: ast.expr, name: str) -> None:
        if not _private(name) or name in PUBLIC_UNDERSCORED:
            return
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            for base in self._dependency_bases():
                if name in _dependency_privates(base):
                    self._say(node, f"self.{name} (private to {base.__module__}.{base.__qualname__})")
                    return
            return
        if name not in self.module_names:
            self._say(node, f"{ast.unparse(owner)}.{name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_private(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self._check_past_the_parent(node)
        if (
            isinstance(func, ast.Name)
            and func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            self._check_private(node, node.args[0], node.args[1].value)
        self.generic_visit(node)

    def _check_past_the_parent(self, node: ast.Call) -> None:
        """C{Base.method(self, ...)} with C{Base} a dependency class that is not a direct parent."""
        func = node.func
        cls = self._classes[-1] if self._classes else None
        if (
            cls is None
            or not isinstance(func, ast.Attribute)
            or not isinstance(func.value, (ast.Name, ast.Attribute))
            or not node.args
            or not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self")
        ):
            return
        base = self._resolve(func.value)
        if (
            isinstance(base, type)
            and _is_dependency(base)
            and base not in cls.__bases__
            and f"{cls.__module__}.{cls.__qualname__}" not in PAST_THE_PARENT
        ):
            parents = ", ".join(b.__qualname__ for b in cls.__bases__)
            self._say(
                node,
                f"{ast.unparse(func)}(self, ...) past the parent ({cls.__qualname__}'s parents: {parents})",
            )

    def _resolve(self, expr: ast.expr) -> Any:
        """The object a name (or a dotted name) of this module stands for, if it can be found."""
        if isinstance(expr, ast.Name):
            return vars(self.module).get(expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self._resolve(expr.value)
            return getattr(owner, expr.attr, None) if owner is not None else None
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and not (isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"))
                and target.attr in self.methods
                and target.attr not in self.own_names
            ):
                self._say(node, f"{ast.unparse(target)} = ... (a method replaced on a live object)")
        self.generic_visit(node)


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """The names the modules of C{trees} define: functions, classes, variables and the attributes they set on C{self} or C{cls}."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
    return names


def findings() -> Iterator[str]:
    modules = _beacon_modules()
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _sources()}
    own = _own_names(trees)
    methods = _dependency_method_names()
    for path, tree in trees.items():
        scan = _Scan(path, modules[_module_name(path)], own, methods, _own_names({path: tree}))
        scan.visit(tree)
        yield from scan.found


def test_every_beacon_module_is_scanned() -> None:
    """The scan reads every module of the package (so a new one cannot hide)."""
    packaged = {m.name for m in pkgutil.walk_packages([str(ROOT)], "beacon.")}
    scanned = {_module_name(p) for p in _sources()}
    assert {m for m in packaged if "_pb2" not in m} <= scanned


def test_no_private_names_of_dependencies() -> None:
    """No private module, name or attribute of a dependency, and no method of one replaced on a live object."""
    found = list(findings())
    assert found == [], "Beacon reaches into its dependencies:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """Each kind of reach the scan forbids is found in a module written to have them."""
    source = '''
from twisted.internet.endpoints import _parse
from twisted.scripts._twistd_unix import UnixAppLogger
from twisted.web.http import HTTPChannel

class Channel(HTTPChannel):
    def peek(self):
        return self._dataBuffer

class Deeper(Channel):
    def dataReceived(self, data):
        return HTTPChannel.dataReceived(self, data)

    def connectionLost(self, reason):
        return Channel.connectionLost(self, reason)

def reach(channel, port):
    port._preexistingSocket = None
    channel.dataReceived = lambda data: None
    return getattr(channel, "_transferDecoder", None)
'''
    tree = ast.parse(source)
    module = type(sys)("beacon_scan_example")
    exec(compile(source.replace("from twisted.internet.endpoints import _parse\n", "").replace(
        "from twisted.scripts._twistd_unix import UnixAppLogger\n", ""), "x", "exec"), vars(module))
    scan = _Scan(ROOT / "example.py", module, set(), _dependency_method_names())
    scan.visit(tree)
    text = "\n".join(scan.found)
    for expected in [
        "from twisted.internet.endpoints import _parse",
        "from twisted.scripts._twistd_unix import ...",
        "self._dataBuffer",
        "port._preexistingSocket",
        "channel.dataReceived = ... (a method replaced on a live object)",
        "channel._transferDecoder",
        "HTTPChannel.dataReceived(self, ...) past the parent (Deeper's parents: Channel)",
    ]:
        assert expected in text, (expected, text)


def test_a_private_name_is_its_modules(tmp_path: Path) -> None:
    """
    C{obj._x} on an object other than C{self} passes only where this module
    defines or sets C{_x}: another module's private name, Beacon's own
    included, is a finding.
    """
    source = '''
class Reader:
    def _mine(self):
        self._seen = True

def use(reader, other):
    reader._mine()
    reader._seen = False
    return other._theirs()
'''
    tree = ast.parse(source)
    module = type(sys)("beacon_scan_names")
    exec(compile(source, "x", "exec"), vars(module))
    everywhere = _own_names({Path("a.py"): tree, Path("b.py"): ast.parse("def _theirs(): pass")})
    scan = _Scan(ROOT / "example.py", module, everywhere, frozenset(), _own_names({Path("a.py"): tree}))
    scan.visit(tree)
    assert [line.split(": ", 1)[1] for line in scan.found] == ["other._theirs"]

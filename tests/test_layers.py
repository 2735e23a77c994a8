"""
The layers hold: Beacon's imports, read from its source, make no circle and
every arrow between rooms points down the map of C{docs/explanation/architecture.rst}.

Each room is a package or a top-level module of C{beacon}; a room may import
only rooms on lower floors (and its own modules). Inside a room the modules
form no circle either. An import inside a function or under
C{TYPE_CHECKING} counts like any other: an arrow is an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import beacon

ROOT = Path(beacon.__file__).parent

#: The floors, from the ground up; a room imports only rooms below it.
FLOORS: list[set[str]] = [
    {"beacon", "beacon.errors", "beacon.logs", "beacon.interfaces", "beacon.text", "beacon.proto", "beacon.capped",
     "beacon.throttle", "beacon.signing"},
    {"beacon.protocol", "beacon.heap", "beacon.listeners", "beacon.config"},
    {"beacon.store"},
    {"beacon.intake", "beacon.client", "beacon.testing", "beacon.notify"},
    {"beacon.console"},
    {"beacon.bindings"},
    {"beacon.monitoring"},
    {"beacon.service"},
    {"beacon.tap", "beacon.cli"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of Beacon's modules (resolved to modules)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "beacon")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.split(".")[0] != "beacon":
                    continue
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.add(child if child in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _floor(room: str) -> int:
    for number, rooms in enumerate(FLOORS):
        if room in rooms:
            return number
    raise AssertionError(f"{room} is on no floor of the map: add it to FLOORS and the docs")


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_room_is_on_the_map() -> None:
    """Each package and top-level module of beacon has its floor."""
    rooms = {_room(m) for m in _modules()}
    for room in rooms:
        _floor(room)


def test_no_import_circle() -> None:
    """No module reaches itself through its imports."""
    circles = _circles(_imports(_modules()))
    assert circles == [], f"import circles: {circles}"


def test_every_arrow_between_rooms_points_down() -> None:
    """A room imports only rooms on lower floors."""
    wrong = []
    for module, targets in _imports(_modules()).items():
        room = _room(module)
        for target in sorted(targets):
            other = _room(target)
            if other != room and _floor(other) >= _floor(room):
                wrong.append(f"{module} -> {target} ({room} is on floor {_floor(room)}, {other} on {_floor(other)})")
    assert wrong == [], "arrows that do not point down:\n" + "\n".join(wrong)


def test_no_room_reaches_into_another_rooms_private_modules() -> None:
    """Between rooms, imports go through a package's public face (its __init__ or a module without a leading underscore)."""
    wrong = []
    for module, targets in _imports(_modules()).items():
        for target in sorted(targets):
            if _room(target) != _room(module) and any(
                part.startswith("_") for part in target.split(".")[2:]
            ):
                wrong.append(f"{module} -> {target}")
    assert wrong == [], "imports of another room's private modules:\n" + "\n".join(wrong)


def _reach(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module C{module} imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_a_binding_never_reaches_the_policies_or_the_store() -> None:
    """
    No module of beacon.bindings reaches beacon.intake, beacon.store or
    beacon.notify, directly or through another room: a binding speaks its
    wire and hands each request to the dispatcher it was given.
    """
    graph = _imports(_modules())
    wrong = []
    for module in sorted(graph):
        if _room(module) != "beacon.bindings":
            continue
        reached = sorted(
            target for target in _reach(graph, module)
            if _room(target) in ("beacon.intake", "beacon.store", "beacon.notify")
        )
        if reached:
            wrong.append(f"{module} reaches {', '.join(reached)}")
    assert wrong == [], "\n".join(wrong)


def test_config_reaches_nothing_above_its_floor() -> None:
    """beacon.config, directly or through others, imports only rooms below its floor."""
    graph = _imports(_modules())
    floor = _floor("beacon.config")
    reached = {
        target
        for module in graph
        if _room(module) == "beacon.config"
        for target in _reach(graph, module)
        if _room(target) != "beacon.config"
    }
    assert sorted(t for t in reached if _floor(_room(t)) >= floor) == []


def test_importing_config_loads_no_other_room_and_no_heavy_library() -> None:
    """
    In a fresh interpreter, C{import beacon.config} loads no other room of
    Beacon, and none of psycopg, jsonschema, autobahn, grpc or Twisted.
    """
    import subprocess
    import sys

    probe = (
        "import sys, json; import beacon.config; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    import json

    loaded = json.loads(done.stdout)
    assert "beacon.config" in loaded
    rooms = {_room(m) for m in loaded if m.split(".")[0] == "beacon"}
    assert rooms <= {"beacon", "beacon.config"}, rooms
    heavy = {"psycopg", "jsonschema", "autobahn", "grpc", "twisted"}
    assert heavy.isdisjoint(m.split(".")[0] for m in loaded)


def test_no_room_uses_another_rooms_private_names() -> None:
    """C{from beacon.room import _name} between rooms fails: a private name is its room's."""
    wrong = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("beacon"):
                if _room(node.module or "") == _room(module):
                    continue
                wrong += [
                    f"{module}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert wrong == [], "\n".join(wrong)


#: The wings of beacon.bindings, from the ground up: the shared admission,
#: then the bindings, which import the admission and never each other.
WINGS: list[set[str]] = [
    {"beacon.bindings.admission"},
    {"beacon.bindings.http", "beacon.bindings.websocket", "beacon.bindings.grpc", "beacon.bindings.operator"},
]


def _wing(module: str) -> str | None:
    """The wing of a module of beacon.bindings (None for the package's own face)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "bindings" else None


def _wing_floor(wing: str) -> int:
    for number, wings in enumerate(WINGS):
        if wing in wings:
            return number
    raise AssertionError(f"{wing} is in no wing of the map: add it to WINGS and the docs")


def test_every_binding_module_is_in_a_wing() -> None:
    """beacon.bindings holds wings only: each module is in one that is on the map."""
    modules = [m for m in _modules() if _room(m) == "beacon.bindings"]
    assert [m for m in modules if _wing(m) is None] == ["beacon.bindings"]
    for module in modules:
        if module != "beacon.bindings":
            _wing_floor(_wing(module) or "")


def test_every_arrow_between_wings_points_down_through_a_face() -> None:
    """
    A wing imports only the wings below it (the bindings import the shared
    admission, never each other), and only through their faces.
    """
    wrong = []
    for module, targets in _imports(_modules()).items():
        wing = _wing(module)
        if wing is None:
            continue
        for target in sorted(targets):
            other = _wing(target)
            if other is None or other == wing:
                continue
            if _wing_floor(other) >= _wing_floor(wing):
                wrong.append(f"{module} -> {target} (sideways or up)")
            if target != other:
                wrong.append(f"{module} -> {target} (past {other}'s face)")
    assert wrong == [], "\n".join(wrong)


def test_the_checks_find_what_they_look_for() -> None:
    """A circle and an arrow up are found in a graph made to have them."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _reach({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, "a") == {"a", "b", "c"}
    assert _floor("beacon.bindings") > _floor("beacon.intake") > _floor("beacon.config") >= _floor("beacon.protocol")
    assert _wing("beacon.bindings.http._site") == "beacon.bindings.http"
    assert _wing_floor("beacon.bindings.websocket") > _wing_floor("beacon.bindings.admission")


def test_the_reactor_interface_is_checked_at_the_edge() -> None:
    """twistd's reactor provides every interface IBeaconReactor joins; a reactor lacking one is refused, naming it."""
    import pytest
    from twisted.internet import reactor
    from twisted.internet.testing import MemoryReactorClock

    from beacon.interfaces import IBeaconReactor, beacon_reactor

    assert beacon_reactor(reactor) is reactor
    assert {i.getName() for i in IBeaconReactor.getBases()} >= {"IReactorTCP", "IReactorTime"}
    with pytest.raises(TypeError, match="IReactorFromThreads"):
        beacon_reactor(MemoryReactorClock())


#: The most lines a module of Beacon, and a test file, may have: a room
#: that grows past it is split along a seam before it crosses the line.
MAX_MODULE_LINES = 1000
MAX_TEST_FILE_LINES = 1500


def _longer_than(paths: list[Path], limit: int) -> list[str]:
    return [
        f"{path} ({count} lines)"
        for path in paths
        if (count := len(path.read_text().splitlines())) > limit
    ]


def test_no_module_over_the_size_line() -> None:
    """No module in beacon/ is over 1,000 lines."""
    modules = sorted(ROOT.rglob("*.py"))
    assert len(modules) > 50
    assert _longer_than(modules, MAX_MODULE_LINES) == []


def test_no_test_file_over_the_size_line() -> None:
    """No file of the test suite (tests/, with its helpers and peers) is over 1,500 lines."""
    tests = sorted(Path(__file__).resolve().parent.rglob("*.py"))
    assert len(tests) > 50
    assert _longer_than(tests, MAX_TEST_FILE_LINES) == []


def test_the_size_line_finds_a_long_file(tmp_path: Path) -> None:
    """A file one line over the limit is named, one at the limit is not."""
    at, over = tmp_path / "at.py", tmp_path / "over.py"
    at.write_text("x = 1\n" * MAX_MODULE_LINES)
    over.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _longer_than([at, over], MAX_MODULE_LINES) == [f"{over} ({MAX_MODULE_LINES + 1} lines)"]

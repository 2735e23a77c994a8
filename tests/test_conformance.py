"""
tools/conformance (``make conformance``): the official A2A kit's results
held to tests/conformance/expected-failures.toml. The kit itself runs in
``make conformance``; here, its comparison on made-up reports, the list's
own soundness, and the skip without a kit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "conformance"
EXPECTED = ROOT / "tests" / "conformance" / "expected-failures.toml"


def load_tool() -> ModuleType:
    return load_script(TOOL, "conformance_tool")


tool = load_tool()

LIST = """
[[failure]]
test = "tests/a.py::TestA::test_artifact"
bindings = ["jsonrpc", "grpc"]
reason = "policy"
ref = 'docs/index.rst:1: "Beacon"'
why = "no artifacts"

[[failure]]
test = "tests/r.py::test_must[CORE-SEND-003]"
bindings = ["jsonrpc"]
reason = "kit-defect"
ref = "tck/requirements/core_operations.py:96"
why = "the kit counts the required error as a failure"
"""


def entries(tmp_path: Path, text: str = LIST) -> list:
    path = tmp_path / "expected.toml"
    path.write_text(text)
    return tool.load_expected(path)


def report(**tests: str) -> dict[str, dict]:
    return {nodeid: {"outcome": outcome, "message": "m"} for nodeid, outcome in tests.items()}


def as_listed() -> dict[str, dict[str, dict]]:
    """A made-up run in which every listed failure fails, and nothing else."""
    return {
        "jsonrpc": {
            "tests/a.py::TestA::test_artifact[jsonrpc]": {"outcome": "failed", "message": "no artifacts"},
            "tests/r.py::test_must[CORE-SEND-003-jsonrpc]": {"outcome": "failed", "message": "-32005"},
            "tests/r.py::test_must[CORE-SEND-001-jsonrpc]": {"outcome": "passed", "message": ""},
            "tests/r.py::test_may[CORE-MULTI-002-jsonrpc]": {"outcome": "xfailed", "message": "may"},
            "tests/s.py::test_stream[jsonrpc]": {"outcome": "skipped", "message": "no streaming"},
        },
        "grpc": {
            "tests/a.py::TestA::test_artifact[grpc]": {"outcome": "failed", "message": "no artifacts"},
            "tests/r.py::test_must[CORE-SEND-003-grpc]": {"outcome": "passed", "message": ""},
        },
    }


def test_key_drops_the_binding_parameter() -> None:
    assert tool.test_key("t.py::T::test_x[jsonrpc]", "jsonrpc") == "t.py::T::test_x"
    assert tool.test_key("t.py::test_must[CORE-SEND-003-http_json]", "http_json") == "t.py::test_must[CORE-SEND-003]"
    assert tool.test_key("t.py::test_y[grpc-big]", "grpc") == "t.py::test_y[big]"
    assert tool.test_key("t.py::T::test_z", "jsonrpc") == "t.py::T::test_z"
    assert tool.test_key("t.py::T::test_x[jsonrpc]", "grpc") == "t.py::T::test_x[jsonrpc]"


def test_all_as_listed_passes(tmp_path: Path) -> None:
    listed = entries(tmp_path)
    verdict = tool.compare(as_listed(), listed)
    assert verdict.problems == []
    assert verdict.ok
    assert dict(verdict.counts["jsonrpc"]) == {"passed": 1, "failed": 2, "skipped": 1, "xfailed": 1, "expected": 2}
    assert dict(verdict.counts["grpc"]) == {"passed": 1, "failed": 1, "skipped": 0, "xfailed": 0, "expected": 1}
    text = tool.summary(verdict, listed)
    assert "JSON-RPC" in text and "policy" in text and "kit-defect" in text
    assert "CORE-MULTI-002" in text  # what the kit let fail is shown, not counted


def test_an_unexpected_failure_fails(tmp_path: Path) -> None:
    results = as_listed()
    results["jsonrpc"]["tests/r.py::test_must[CORE-SEND-001-jsonrpc]"]["outcome"] = "failed"
    results["grpc"]["tests/r.py::test_must[CORE-SEND-003-grpc]"]["outcome"] = "failed"  # listed for jsonrpc only
    verdict = tool.compare(results, entries(tmp_path))
    assert not verdict.ok
    assert len(verdict.problems) == 2
    assert verdict.problems[0].startswith("[JSON-RPC] unexpected failure: tests/r.py::test_must[CORE-SEND-001-jsonrpc]")
    assert verdict.problems[1].startswith("[gRPC] unexpected failure: tests/r.py::test_must[CORE-SEND-003-grpc]")


def test_an_expected_failure_that_passes_fails(tmp_path: Path) -> None:
    results = as_listed()
    results["jsonrpc"]["tests/r.py::test_must[CORE-SEND-003-jsonrpc]"]["outcome"] = "passed"
    results["grpc"]["tests/a.py::TestA::test_artifact[grpc]"]["outcome"] = "passed"
    verdict = tool.compare(results, entries(tmp_path))
    assert verdict.problems == [
        "[JSON-RPC] expected failure passed: tests/r.py::test_must[CORE-SEND-003] (kit-defect): "
        "remove it from the list of expected failures",
        "[gRPC] expected failure passed: tests/a.py::TestA::test_artifact (policy): take grpc out of its bindings",
    ]


def test_an_expected_failure_now_skipped_fails(tmp_path: Path) -> None:
    results = as_listed()
    results["jsonrpc"]["tests/r.py::test_must[CORE-SEND-003-jsonrpc]"]["outcome"] = "skipped"
    verdict = tool.compare(results, entries(tmp_path))
    assert verdict.problems == [
        "[JSON-RPC] expected failure did not fail (skipped): tests/r.py::test_must[CORE-SEND-003] (kit-defect): "
        "remove it from the list of expected failures",
    ]


def test_an_entry_that_matches_no_test_fails_on_a_whole_run(tmp_path: Path) -> None:
    results = as_listed()
    del results["jsonrpc"]["tests/r.py::test_must[CORE-SEND-003-jsonrpc]"]
    verdict = tool.compare(results, entries(tmp_path))
    assert verdict.problems == [
        "[JSON-RPC] expected failure matches no test (renamed?): tests/r.py::test_must[CORE-SEND-003]"
    ]
    # A run of one level (--level must) leaves tests out: not a problem then.
    assert tool.compare(results, entries(tmp_path), complete=False).ok


def test_a_binding_not_run_is_not_held_to_the_list(tmp_path: Path) -> None:
    results = as_listed()
    del results["grpc"]
    assert tool.compare(results, entries(tmp_path)).ok


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (('reason = "policy"', 'reason = "flaky"'), "reason 'flaky' is not one of"),
        (('why = "no artifacts"\n', ""), "failure #1: missing why"),
        (('bindings = ["jsonrpc", "grpc"]', 'bindings = ["rest"]'), "unknown binding 'rest'"),
        (('why = "no artifacts"', 'why = "no artifacts"\nuntil = "later"'), "unknown key 'until'"),
    ],
)
def test_a_malformed_entry_is_refused(tmp_path: Path, change: tuple[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        entries(tmp_path, LIST.replace(*change, 1))


# The repository's list.


def test_the_list_loads_and_names_each_test_once() -> None:
    listed = tool.load_expected(EXPECTED)
    assert listed
    names = [e.test for e in listed]
    assert len(names) == len(set(names))
    for e in listed:
        assert e.test.startswith("tests/compatibility/"), e.test
        assert "[jsonrpc]" not in e.test and not re.search(r"-(jsonrpc|http_json|grpc)\]$", e.test), e.test


def test_each_policy_entry_quotes_its_line_of_the_manual() -> None:
    """A policy entry's ref is PAGE:LINE: "words", PAGE a page of the manual (docs/...rst): the words are there, starting on that line."""
    for e in tool.load_expected(EXPECTED):
        if e.reason != "policy":
            continue
        m = re.fullmatch(r'(docs/[\w/.-]+\.rst):(\d+): "(.+)"', e.ref)
        assert m, f"{e.test}: ref {e.ref!r} is not docs/PAGE.rst:LINE: \"quoted words\""
        page = (ROOT / m.group(1)).read_text().splitlines()
        flat = " ".join(" ".join(page).split())
        line, words = int(m.group(2)), " ".join(m.group(3).split())
        assert words in flat, f"{e.test}: {m.group(1)} does not say {words!r}"
        start = " ".join(words.split()[:3])
        assert start in " ".join(page[line - 1].split()), f"{e.test}: {start!r} is not on {m.group(1)}:{line}"


def test_each_other_entry_names_where_to_check_it() -> None:
    for e in tool.load_expected(EXPECTED):
        if e.reason == "kit-defect":
            assert re.search(r"\b[\w/]+\.py:\d+", e.ref), f"{e.test}: a kit defect names the kit's file:line"
        elif e.reason == "draft-difference":
            assert re.search(r"A2A 1\.0 §\d+(\.\d+)*", e.ref), f"{e.test}: a draft difference names the section"
            assert re.search(r"\b[\w/]+\.py:\d+", e.ref), f"{e.test}: ... and the kit's assertion"
        elif e.reason == "beacon-defect":
            assert re.search(r"fixed by ", e.ref), f"{e.test}: a Beacon defect names the change that fixes it"


# Without a kit.


def run_tool(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("A2A_TCK_DIR", "CI")}
    environ.update(env)
    return subprocess.run([sys.executable, str(TOOL), *args], env=environ, capture_output=True, text=True, timeout=60)


def test_without_a_kit_it_is_skipped_with_a_message() -> None:
    done = run_tool()
    assert done.returncode == 0
    assert done.stdout.startswith("conformance: skipped: A2A_TCK_DIR is not set; give it a checkout of a2aproject/a2a-tck")


def test_without_a_kit_in_ci_it_fails() -> None:
    done = run_tool(CI="true")
    assert done.returncode == 1
    assert "conformance: skipped: A2A_TCK_DIR is not set" in done.stdout
    assert "required in CI" in done.stdout


def test_a_directory_that_is_no_kit_is_an_error(tmp_path: Path) -> None:
    done = run_tool("--keep", str(tmp_path / "keep"), A2A_TCK_DIR=str(tmp_path))
    assert done.returncode == 2
    assert "is not a checkout of a2aproject/a2a-tck" in done.stdout

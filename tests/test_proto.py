"""
beacon/proto's generated modules are what ``make proto`` generates from
beacon/proto/a2a.proto today: regenerating changes nothing.

Only the generator's own version stamps may differ (a newer grpcio-tools
stamps its versions into the files); everything else must match line for
line.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED = ("a2a_pb2.py", "a2a_pb2.pyi", "a2a_pb2_grpc.py")

pytest.importorskip("grpc_tools", reason="grpcio-tools is a test extra")

# The generator's version stamps: the header comment, the runtime check's
# major, minor and patch arguments, gRPC's generated-version constant.
_STAMPS = re.compile(
    r"^(# Protobuf Python Version: .*|    \d+,|GRPC_GENERATED_VERSION = .*)$", re.M
)


def _normalised(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return _STAMPS.sub("<version>", f.read())


def test_regenerating_changes_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "generate-proto"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        committed = os.path.join(ROOT, "beacon", "proto", name)
        fresh = os.path.join(tmp_path, "beacon", "proto", name)
        assert _normalised(fresh) == _normalised(committed), (
            f"beacon/proto/{name} is not what `make proto` generates: run it and commit"
        )


def test_the_proto_is_the_specifications_with_its_licence():
    with open(os.path.join(ROOT, "beacon", "proto", "a2a.proto"), encoding="utf-8") as f:
        text = f.read()
    assert "Apache License, Version 2.0" in text
    assert "package lf.a2a.v1;" in text
    assert "service A2AService {" in text

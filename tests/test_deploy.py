"""
The deployment recipes, tested: the systemd unit (etc/beacon.service), the
container image (Dockerfile), and what the checkout carries for them
(LICENSE, .gitignore).

- The unit passes C{systemd-analyze verify} where systemd-analyze exists
  (C{make test} installs Debian's systemd package for it where it may; the
  test is skipped without it, and fails under CI=true), and its command
  line is one C{twistd beacon} accepts, with the data and socket in the
  directories systemd makes.
- The Dockerfile's C{pip install} line installs this package from the
  source tree, its COPY lines bring every path the package needs, and its
  entry point runs the C{beacon} plugin with options it accepts: checked
  always. The image is built and run only where a container engine answers
  (skipped otherwise, or when the registry cannot be reached, saying so);
  the containers it runs have no network; a docker client without a daemon
  does not hide a podman that answers.
- tools/deploy-check (C{make deploy-check}, which boots the unit under
  systemd in a Debian container; root and minutes, so not run here)
  installs Beacon with the manual's systemd steps, and says what it lacks
  where it cannot run.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins

from beacon import __version__
from beacon.tap import Options
from peers.postgres import in_ci
from scripts import load_script

ROOT = Path(__file__).parent.parent
UNIT = ROOT / "etc" / "beacon.service"
DOCKERFILE = ROOT / "Dockerfile"

#: The longest a check of a tool may take (a safety net).
TOOL_TIMEOUT = 60.0
#: The longest the image's build may take: it installs Beacon's
#: dependencies from PyPI inside the container engine.
BUILD_TIMEOUT = 600.0


def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


# The systemd unit.


def unit_values() -> dict[str, list[str]]:
    """The unit's assignments (every value of a key that repeats), comments left out."""
    values: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        values.setdefault(key.strip(), []).append(value.strip())
    return values


def test_unit_runs_twistd_beacon_as_its_own_user_in_systemd_directories() -> None:
    """ExecStart runs twistd in the foreground without a pidfile, the beacon plugin with options it accepts: the data in the StateDirectory, the operator socket in the RuntimeDirectory, as a dedicated user."""
    values = unit_values()
    (exec_start,) = values["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/bin/twistd")
    plugin = argv.index("beacon")
    assert set(argv[1:plugin]) == {"-n", "--pidfile="}
    options = argv[plugin + 1:]
    config = options[options.index("--config") + 1]
    assert config == f"/etc/{values['ConfigurationDirectory'][0]}/beacon.toml"
    options[options.index("--config") + 1] = str(ROOT / "etc" / "beacon.toml")
    parsed = Options()
    parsed.parseOptions(options)
    assert parsed.config is not None
    assert parsed.config.data_dir == f"/var/lib/{values['StateDirectory'][0]}"
    assert parsed.config.socket_path == f"/run/{values['RuntimeDirectory'][0]}/operator.sock"
    assert values["User"] == ["beacon"] and values["Type"] == ["exec"]


def test_unit_is_sandboxed() -> None:
    """The sandboxing the deployment promises is in the unit."""
    values = unit_values()
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "CapabilityBoundingSet": "",
        "UMask": "0077",
    }.items():
        assert values.get(key) == [value], key
    assert "@system-service" in values["SystemCallFilter"]


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd-analyze verify accepts the unit, its ExecStart pointed at this venv's twistd (systemd checks that the program exists)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        message = "systemd-analyze is missing (Debian's systemd package; make test installs it as root)"
        if in_ci():
            pytest.fail(f"CI=true: {message}", pytrace=False)
        pytest.skip(message)
    bin_dir = Path(sys.executable).parent
    unit = tmp_path / "beacon.service"
    unit.write_text(UNIT.read_text().replace("/opt/beacon/bin/", f"{bin_dir}/"))
    done = subprocess.run(
        [analyze, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"},
    )
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if "beacon.service" in line]
    assert done.returncode == 0 and complaints == [], done.stdout + done.stderr


# The container image.


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


def instruction(name: str) -> list[str]:
    return [rest for word, rest in dockerfile() if word == name]


def test_dockerfile_installs_this_package_from_the_source_tree() -> None:
    """The one pip install installs '.', not editable, after COPY lines that bring every path the package is built from (setup.cfg's packages and files)."""
    installs = [
        command for run in instruction("RUN") for command in run.split("&&") if "pip install" in command
    ]
    assert len(installs) == 1, installs
    words = shlex.split(installs[0])
    assert words[words.index("install") + 1:] == ["--no-cache-dir", "."], words
    copied = {source for copy in instruction("COPY") for source in shlex.split(copy)[:-1]}
    cfg = setup_cfg()
    tops = {package.split(".")[0] for package in cfg["options"]["packages"].split()}
    files = {
        value.split(":", 1)[1].strip()
        for value in cfg["metadata"].values()
        if value.startswith("file:")
    }
    assert tops | files | {"setup.cfg", "pyproject.toml", "LICENSE"} <= copied, copied
    assert (ROOT / "twisted" / "plugins" / "beacon_plugin.py").exists()


def test_setup_cfg_lists_every_package() -> None:
    """A built distribution holds every package of beacon/: setup.cfg's list names each folder with an __init__.py, and nothing else."""
    listed = {name for name in setup_cfg()["options"]["packages"].split() if name.startswith("beacon")}
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "beacon").rglob("__init__.py")
    }
    assert listed == found, (sorted(found - listed), sorted(listed - found))


def test_dockerfile_entry_point_matches_the_package() -> None:
    """The entry point is twistd running the beacon plugin (the tapname this package registers) in the foreground, with CMD options it accepts; the data directory is the volume; the user is not root; the base is a slim Python the package supports."""
    (entrypoint,) = instruction("ENTRYPOINT")
    (cmd,) = instruction("CMD")
    entry, arguments = json.loads(entrypoint), json.loads(cmd)
    assert entry[0] == "twistd" and set(entry[1:entry.index("beacon")]) == {"-n", "--pidfile="}
    assert [m.tapname for m in getPlugins(IServiceMaker) if m.tapname == "beacon"] == ["beacon"]
    options = Options()
    options.parseOptions(entry[entry.index("beacon") + 1:] + arguments)
    assert options.config is not None
    (volume,) = instruction("VOLUME")
    assert options.config.data_dir == volume.strip("[]\" ")
    (user,) = instruction("USER")
    assert user not in ("root", "0")
    (base,) = instruction("FROM")
    found = re.fullmatch(r"python:3\.(\d+)-slim", base)
    assert found is not None, base
    required = re.search(r">=\s*3\.(\d+)", setup_cfg()["options"]["python_requires"])
    assert required is not None and int(found.group(1)) >= int(required.group(1))
    scripts = setup_cfg()["options.entry_points"]["console_scripts"]
    assert "beacon = beacon.cli:main" in scripts


def test_dockerignore_keeps_local_state_out() -> None:
    """The build context leaves out the venv, the data directory and git."""
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "beacon-data", ".git"} <= set(ignored)


def _engine() -> str:
    """
    The first container engine (docker, podman) that answers, or skip
    saying why none does: a docker client without a daemon does not hide
    a podman that works.
    """
    reasons = []
    for name in ("docker", "podman"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            info = subprocess.run(
                [path, "info"], capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            reasons.append(f"{name} info did not answer within {TOOL_TIMEOUT:g} s")
            continue
        if info.returncode == 0:
            return path
        reasons.append(f"{name} info: {(info.stderr.strip().splitlines() or ['no reason given'])[-1]}")
    if not reasons:
        pytest.skip("no container engine (docker or podman) is installed")
    pytest.skip(f"no container engine answers ({'; '.join(reasons)})")


def _run(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(argv)} did not finish within {timeout:g} s: {e}")


def test_image_builds_and_runs_beacon() -> None:
    """Where a container engine answers: the image builds from the source tree; in a container without network, twistd beacon --version and beacon --version print this version, as a user that is not root."""
    engine = _engine()
    (base,) = instruction("FROM")
    pulled = _run([engine, "pull", base], TOOL_TIMEOUT)
    if pulled.returncode != 0:
        reason = (pulled.stderr.strip().splitlines() or ["no reason given"])[-1]
        pytest.skip(f"the registry cannot be reached for {base}: {reason}")
    tag = f"beacon-test:{uuid.uuid4().hex[:12]}"
    built = _run([engine, "build", "--pull=false", "-t", tag, str(ROOT)], BUILD_TIMEOUT)
    try:
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        offline: list[Any] = [engine, "run", "--rm", "--network=none"]
        twistd = _run([*offline, tag, "--version"], TOOL_TIMEOUT)
        assert twistd.returncode == 0, twistd.stderr
        assert twistd.stdout.startswith(f"beacon {__version__} (Twisted ")
        script = _run([*offline, "--entrypoint", "beacon", tag, "--version"], TOOL_TIMEOUT)
        assert script.stdout == f"beacon {__version__}\n", script.stderr
        uid = _run([*offline, "--entrypoint", "id", tag, "-u"], TOOL_TIMEOUT)
        assert uid.stdout.strip() not in ("", "0"), uid
    finally:
        _run([engine, "rmi", "-f", tag], TOOL_TIMEOUT)


# What the checkout carries.


def test_license_matches_setup_cfg() -> None:
    """LICENSE is the license setup.cfg names."""
    license_name = setup_cfg()["metadata"]["license"].strip()
    assert license_name == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


def test_make_run_leaves_nothing_for_git(tmp_path: Path) -> None:
    """What `make run` leaves in the checkout (twistd.pid, its log, the data directory) is ignored by git."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["twistd.pid", "twistd.log", "twistd.log.1", "beacon-data/beacon.sqlite3", "beacon-data/operator.sock"]
    done = _run([git, "-C", str(ROOT), "check-ignore", "--no-index", *paths], TOOL_TIMEOUT)
    assert sorted(done.stdout.split()) == sorted(paths), done.stdout + done.stderr


# tools/deploy-check (make deploy-check): the unit booted under systemd.

DEPLOY_CHECK = ROOT / "tools" / "deploy-check"


def load_deploy_check() -> Any:
    return load_script(DEPLOY_CHECK, "deploy_check_tool")


def manual_systemd_steps() -> list[str]:
    """The manual's "With systemd" commands: the literal block that makes the user beacon."""
    manuals = [ROOT / "README.rst", *sorted((ROOT / "docs").rglob("*.rst"))]
    for manual in manuals:
        lines = manual.read_text().splitlines() if manual.exists() else []
        for i, line in enumerate(lines):
            if line.strip().startswith("useradd --system --home-dir /var/lib/beacon"):
                block = []
                for following in lines[i:]:
                    if not following.startswith("    "):
                        break
                    block.append(following.split("  #", 1)[0].strip())
                return block
    raise AssertionError("no manual holds the systemd steps (useradd ... /var/lib/beacon)")


def test_deploy_check_runs_the_manuals_systemd_steps() -> None:
    """
    tools/deploy-check installs Beacon in its container with the manual's
    commands, but for the two differences its docstring names: pip installs
    from wheels built on the host, and the unit is enabled without --now
    (the boot starts it); the journal is read by the tool itself.
    """
    tool = load_deploy_check()
    expected = [
        step.replace(
            "/opt/beacon/bin/pip install .",
            "/opt/beacon/bin/pip install --no-index --find-links /root/wheelhouse beacon",
        ).replace("systemctl daemon-reload && systemctl enable --now beacon", "systemctl enable beacon")
        for step in manual_systemd_steps()
        if not step.startswith("journalctl")
    ]
    assert tool.INSTALL.splitlines() == ["set -e", "cd /root/beacon", *expected]


def test_deploy_check_that_cannot_run_says_why(tmp_path: Path) -> None:
    """Without its programs (or root) it says what it needs and exits 2, touching nothing."""
    done = _run([sys.executable, str(DEPLOY_CHECK)], TOOL_TIMEOUT, env={"PATH": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    if os.geteuid() == 0:
        assert line == (
            "deploy-check: cannot run: debootstrap, systemd-nspawn, nsenter, journalctl, git missing:"
            " apt-get install debootstrap git systemd systemd-container util-linux"
        )
    else:
        assert line == "deploy-check: cannot run: it needs root (debootstrap and systemd-nspawn)"

"""
Beacon as it is installed: the built distribution and the checkout's set-up.

One module-scoped fixture copies the checkout's files (what a clone of it
holds) into two temporary folders: in one it runs C{make install} (the
set-up of C{make run}); meanwhile, in the other, C{python -m build}, and it
installs the wheel with pip into a fresh virtualenv. The tests read what the
set-up and the build printed, and run the installed commands from a
temporary working directory, so that no source tree is on C{sys.path}.

The dependencies come from the package index: without it the tests are
skipped, except when C{CI=true}, where they fail. pip runs without this
machine's pip configuration (C{PIP_CONFIG_FILE} is the null device), so that
what is judged is what Beacon's own files make pip and setuptools print (a
machine's extra indexes make pip warn of each package they lack);
C{PYTHONDONTWRITEBYTECODE} is dropped for the same reason (with it,
distutils says that it skips byte-compiling).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from beacon import __version__
from peers.process import LISTENING, LOOPBACK_HTTP, START_TIMEOUT, STARTED, TwistdProcess

ROOT = Path(__file__).resolve().parent.parent
#: The distribution's name on the package index, and in a wheel's name.
DISTRIBUTION = "beacon-a2a"
WHEEL_NAME = f"beacon_a2a-{__version__}-py3-none-any.whl"
SDIST_NAME = f"beacon_a2a-{__version__}.tar.gz"
#: A line that fails the set-up and build tests.
WARNING = re.compile(r"warning|deprecat", re.IGNORECASE)
#: What pip prints when the package index cannot be reached.
OFFLINE = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Network is unreachable"
    r"|No matching distribution found"
)
#: Safety nets for each step (an idle machine takes 5-20 s for the slowest).
STEP_TIMEOUT = 300.0
COMMAND_TIMEOUT = 60.0
HTTP_TIMEOUT = 30.0


@dataclass
class Packaged:
    """What the fixture made: the copy of the checkout, the artefacts, the outputs."""

    checkout: Path
    setup_output: str
    build_output: str
    sdist: Path
    wheel: Path
    venv: Path
    elsewhere: Path


def _environment() -> dict[str, str]:
    """
    The environment of every step: this process's, without this machine's
    pip configuration, without byte-compiling switched off, and without the
    make variables of a C{make test} that may be running this test.
    """
    dropped = {"PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}
    environment = {k: v for k, v in os.environ.items() if k not in dropped}
    environment["PIP_CONFIG_FILE"] = os.devnull
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return environment


def _start(argv: Sequence[str], cwd: Path) -> subprocess.Popen[str]:
    """Start one step in a process group of its own, its output (stdout and stderr merged) piped."""
    return subprocess.Popen(
        list(argv), cwd=cwd, env=_environment(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    """Kill a step still running, and its children (its process group), by its pid."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def _finish(process: subprocess.Popen[str], command: str) -> str:
    """
    Wait for a step, its output returned.

    @raise pytest.skip.Exception: The index could not be reached, outside CI.
    @raise pytest.fail.Exception: It failed otherwise.
    """
    try:
        output, _ = process.communicate(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop(process)
        pytest.fail(f"{command} did not finish within {STEP_TIMEOUT:g} s")
    if process.returncode != 0:
        if OFFLINE.search(output) and os.environ.get("CI") != "true":
            pytest.skip(f"the package index cannot be reached ({command})")
        pytest.fail(f"{command} exited {process.returncode}:\n{output}")
    return output


def _step(argv: Sequence[str], cwd: Path) -> str:
    """Run one step, its output returned (L{_finish})."""
    return _finish(_start(argv, cwd), " ".join(argv))


def _copy_checkout(target: Path) -> None:
    """Copy the files a clone of the checkout would hold (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=COMMAND_TIMEOUT,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packaged]:
    """
    The checkout set up by C{make install} in one copy; meanwhile, in
    another (the build writes an egg-info folder in its source tree), built,
    and its wheel installed in a fresh venv by this venv's pip.
    """
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.fail("make and git are needed (they are the set-up README gives)")
    top = tmp_path_factory.mktemp("packaging")
    checkout, source, dist, venv, elsewhere = (
        top / name for name in ("checkout", "source", "dist", "venv", "elsewhere")
    )
    for folder in (checkout, source, elsewhere):
        folder.mkdir()
    _copy_checkout(checkout)
    _copy_checkout(source)
    setting_up = _start(["make", "install"], checkout)
    try:
        build_output = _step([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], top)
        _step([sys.executable, "-m", "venv", "--without-pip", str(venv)], top)
        wheel = dist / WHEEL_NAME
        _step(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", str(wheel)],
            top,
        )
        setup_output = _finish(setting_up, "make install")
    finally:
        _stop(setting_up)
    yield Packaged(checkout, setup_output, build_output, dist / SDIST_NAME, wheel, venv, elsewhere)


def _run(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run an installed command, without the source tree on its path."""
    return subprocess.run(
        list(argv), cwd=cwd, env=_environment(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
    )


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if WARNING.search(line)]


def test_setup_prints_no_warning(packaged: Packaged) -> None:
    """make install in a fresh copy of the checkout (the set-up of make run) prints no warning and no deprecation, and installs Beacon editable as a plain .pth of the checkout."""
    assert _warnings(packaged.setup_output) == [], packaged.setup_output
    (pth,) = (packaged.checkout / ".venv" / "lib").glob("python3.*/site-packages/__editable__.beacon_a2a-*.pth")
    assert pth.read_text().split() == [str(packaged.checkout.resolve())]


def test_setup_finds_the_plugin_from_elsewhere(packaged: Packaged) -> None:
    """The editable install's twistd finds the beacon plugin (twisted/plugins in the checkout) from any working directory."""
    done = _run([str(packaged.checkout / ".venv" / "bin" / "twistd"), "beacon", "--help"], packaged.elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--data" in done.stdout


def test_build_prints_no_warning(packaged: Packaged) -> None:
    """python -m build makes an sdist and a wheel named for beacon-a2a, and prints no warning and no deprecation."""
    assert _warnings(packaged.build_output) == [], packaged.build_output
    assert packaged.sdist.is_file() and packaged.wheel.is_file()
    assert f"Successfully built {SDIST_NAME} and {WHEEL_NAME}" in packaged.build_output


def _metadata(wheel: Path) -> Message:
    """The wheel's METADATA (UTF-8, as the core metadata specification says)."""
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"beacon_a2a-{__version__}.dist-info/METADATA").decode("utf-8")
    return Parser().parsestr(text)


def test_wheel_metadata(packaged: Packaged) -> None:
    """The wheel's metadata: its name and version, the MIT licence and its file, Framework :: Twisted, the source's URL, README.rst as reStructuredText, the grpc and test extras."""
    metadata = _metadata(packaged.wheel)
    assert (metadata["Name"], metadata["Version"]) == (DISTRIBUTION, __version__)
    assert metadata["License"] == "MIT" and metadata.get_all("License-File") == ["LICENSE"]
    assert "Framework :: Twisted" in metadata.get_all("Classifier", [])
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL", []))
    assert urls.get("Source", "").startswith("https://"), urls
    assert metadata["Description-Content-Type"] == "text/x-rst"
    assert metadata.get_payload() == (ROOT / "README.rst").read_text()
    assert {"grpc", "test"} <= set(metadata.get_all("Provides-Extra", []))
    with zipfile.ZipFile(packaged.wheel) as archive:
        names = set(archive.namelist())
    info = f"beacon_a2a-{__version__}.dist-info/"
    assert any(name.startswith(info) and name.endswith("/LICENSE") for name in names), names
    assert "twisted/plugins/beacon_plugin.py" in names
    assert not any(name.startswith("twisted/") and name != "twisted/plugins/beacon_plugin.py" for name in names)


def test_wheel_has_the_plugin(packaged: Packaged) -> None:
    """Installed from the wheel, twistd knows the beacon plugin."""
    done = _run([str(packaged.venv / "bin" / "twistd"), "beacon", "--help"], packaged.elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--data" in done.stdout


def test_wheel_has_the_console_files(packaged: Packaged) -> None:
    """Installed from the wheel, beacon (imported from the venv, not the source tree) has every file of the console's static folder."""
    script = (
        "import importlib.resources, json, beacon\n"
        "static = importlib.resources.files('beacon.console') / 'static'\n"
        "print(json.dumps([beacon.__file__, sorted(p.name for p in static.iterdir())]))\n"
    )
    done = _run([str(packaged.venv / "bin" / "python"), "-c", script], packaged.elsewhere)
    assert done.returncode == 0, done.stderr
    where, files = json.loads(done.stdout)
    assert Path(where).is_relative_to(packaged.venv), where
    assert "index.html" in files
    assert files == sorted(p.name for p in (ROOT / "beacon" / "console" / "static").iterdir())


def test_wheel_version(packaged: Packaged) -> None:
    """Installed from the wheel, beacon --version prints the version, which is also beacon-a2a's in importlib.metadata."""
    done = _run([str(packaged.venv / "bin" / "beacon"), "--version"], packaged.elsewhere)
    assert (done.returncode, done.stdout) == (0, f"beacon {__version__}\n"), done.stderr
    script = f"import importlib.metadata; print(importlib.metadata.version({DISTRIBUTION!r}))"
    done = _run([str(packaged.venv / "bin" / "python"), "-c", script], packaged.elsewhere)
    assert done.stdout == f"{__version__}\n", done.stderr


def test_wheel_serves_the_card(packaged: Packaged, tmp_path: Path) -> None:
    """Installed from the wheel, twistd -n beacon on a free loopback port with a new data directory serves its agent card, and stops cleanly."""
    twistd = str(packaged.venv / "bin" / "twistd")
    process = TwistdProcess(
        ["--data", str(tmp_path / "data"), "--http", LOOPBACK_HTTP], tmp_path,
        wrap=lambda argv: [twistd, *argv[1:]],
    )
    try:
        port = int(process.wait_for(LISTENING, START_TIMEOUT).group(2))
        public_url = process.wait_for(STARTED, START_TIMEOUT).group(1)
        url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            assert response.status == 200
            card = json.loads(response.read())
        assert card["supportedInterfaces"][0]["url"].startswith(public_url)
        process.stop_cleanly()
        assert "Traceback" not in process.output, process.output
    finally:
        process.close()

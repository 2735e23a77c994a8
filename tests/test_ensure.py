"""
The .ci/ensure-* scripts that C{make test} runs before the suite: they
change the machine (install Debian packages, start the local PostgreSQL
cluster) only where something is missing, and say first, in one line each,
what they do and why; when nothing is needed they say nothing; what is still
missing is said in one line and skipped, or fails under CI=true.

Each script runs here among fakes: a directory of stand-ins for apt-get,
id, pg_isready, pg_lsclusters and pg_ctlcluster (each records how it was
called) is the whole PATH, so nothing on the machine is installed or
started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci"
WHO = "make test"
#: A safety net: each script runs in milliseconds among the fakes.
TIMEOUT = 60.0

APT_GET = """\
#!/bin/sh
echo "apt-get $*" >> "$FAKE_DIR/calls"
case "$1" in
update) touch "$FAKE_DIR/updated"; exit 0 ;;
install)
    if [ -e "$FAKE_DIR/install-fails" ] && [ ! -e "$FAKE_DIR/updated" ]; then exit 100; fi
    for package in "$@"; do
        case "$package" in
        chromium) program=chromium ;;
        chromium-driver) program=chromedriver ;;
        systemd) program=systemd-analyze ;;
        *) continue ;;
        esac
        printf '#!/bin/sh\\n' > "$FAKE_DIR/bin/$program"
        chmod +x "$FAKE_DIR/bin/$program"
    done ;;
esac
"""

FAKES = {
    "apt-get": APT_GET,
    "id": '#!/bin/sh\necho "$FAKE_UID"\n',
    "pg_isready": '#!/bin/sh\necho "pg_isready $*" >> "$FAKE_DIR/calls"\n[ -e "$FAKE_DIR/up" ]\n',
    "pg_lsclusters": '#!/bin/sh\ncat "$FAKE_DIR/clusters"\n',
    "pg_ctlcluster": (
        '#!/bin/sh\necho "pg_ctlcluster $*" >> "$FAKE_DIR/calls"\n'
        'if [ -e "$FAKE_DIR/start-fails" ]; then exit 1; fi\ntouch "$FAKE_DIR/up"\n'
    ),
}


@dataclass
class Ran:
    """What a script did: its exit status, its lines, the fakes it called."""

    status: int
    lines: list[str]
    calls: list[str]


class Machine:
    """A directory of fakes to run one script among."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.bin = directory / "bin"
        self.bin.mkdir()
        tools = directory / "tools"
        tools.mkdir()
        for where, programs in ((self.bin, ("dirname", "basename")), (tools, ("cat", "touch", "chmod"))):
            for program in programs:
                found = shutil.which(program)
                assert found is not None, program
                (where / program).symlink_to(found)
        self.uid = 0
        (directory / "clusters").write_text("")

    def fake(self, *programs: str) -> None:
        """Put these fakes (or empty programs that succeed) on the PATH."""
        for program in programs:
            path = self.bin / program
            # A fake finds cat, touch and chmod (the scripts find only fakes).
            text = FAKES.get(program, "#!/bin/sh\n").replace(
                "#!/bin/sh\n", '#!/bin/sh\nPATH="$FAKE_DIR/tools:$PATH"\n', 1
            )
            path.write_text(text)
            path.chmod(0o755)

    def flag(self, name: str) -> None:
        (self.directory / name).touch()

    def run(self, script: str, ci: bool = False) -> Ran:
        environ = {
            "PATH": str(self.bin),
            "FAKE_DIR": str(self.directory),
            "FAKE_UID": str(self.uid),
            "ENSURE_WHO": WHO,
        }
        if ci:
            environ["CI"] = "true"
        done = subprocess.run(
            ["/bin/sh", str(CI / script)], env=environ, capture_output=True, text=True,
            timeout=TIMEOUT, stdin=subprocess.DEVNULL,
        )
        calls = self.directory / "calls"
        assert done.stdout == ""
        return Ran(
            done.returncode,
            done.stderr.splitlines(),
            calls.read_text().splitlines() if calls.exists() else [],
        )


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    if not os.path.exists("/bin/sh"):
        pytest.skip("no /bin/sh")
    return Machine(tmp_path)


# Installing packages.

CHROMIUM_LINE = (
    f"{WHO}: installing Debian packages chromium chromium-driver (apt-get install):"
    " the web console's browser tests drive a headless Chromium"
)
SYSTEMD_LINE = (
    f"{WHO}: installing Debian packages systemd (apt-get install): it provides"
    " systemd-analyze, which verifies etc/beacon.service (nothing is started)"
)


def test_installed_chromium_says_nothing(machine: Machine) -> None:
    machine.fake("apt-get", "id", "chromium", "chromedriver")
    assert machine.run("ensure-chromium") == Ran(0, [], [])


def test_missing_chromium_is_installed_after_one_line(machine: Machine) -> None:
    machine.fake("apt-get", "id")
    assert machine.run("ensure-chromium") == Ran(
        0, [CHROMIUM_LINE], ["apt-get install -y -q chromium chromium-driver"]
    )


def test_stale_package_lists_are_updated_after_one_line_more(machine: Machine) -> None:
    machine.fake("apt-get", "id")
    machine.flag("install-fails")
    assert machine.run("ensure-chromium") == Ran(
        0,
        [
            CHROMIUM_LINE,
            f"{WHO}: updating Debian's package lists (apt-get update) to try installing"
            " chromium chromium-driver again",
        ],
        [
            "apt-get install -y -q chromium chromium-driver",
            "apt-get update -q",
            "apt-get install -y -q chromium chromium-driver",
        ],
    )


@pytest.mark.parametrize("ci", [False, True], ids=["local", "CI=true"])
def test_chromium_that_may_not_be_installed_is_one_line(machine: Machine, ci: bool) -> None:
    """Not root: nothing is installed; one line says what is missing and what follows."""
    machine.fake("apt-get", "id")
    machine.uid = 1000
    missing = f"{WHO}: chromium or chromedriver is missing (apt-get install chromium chromium-driver); "
    assert machine.run("ensure-chromium", ci=ci) == Ran(
        1 if ci else 0,
        [
            missing + "CI=true: the web console's browser tests are required, failing"
            if ci
            else missing + "the web console's browser tests will be skipped"
        ],
        [],
    )


def test_installed_systemd_analyze_says_nothing(machine: Machine) -> None:
    machine.fake("apt-get", "id", "systemd-analyze")
    assert machine.run("ensure-systemd-analyze") == Ran(0, [], [])


def test_missing_systemd_analyze_is_installed_after_one_line(machine: Machine) -> None:
    machine.fake("apt-get", "id")
    assert machine.run("ensure-systemd-analyze") == Ran(
        0, [SYSTEMD_LINE], ["apt-get install -y -q systemd"]
    )


def test_systemd_analyze_without_apt_get_is_one_line(machine: Machine) -> None:
    machine.fake("id")
    assert machine.run("ensure-systemd-analyze") == Ran(
        0,
        [
            f"{WHO}: systemd-analyze is missing (apt-get install systemd);"
            " the systemd unit's verification will be skipped"
        ],
        [],
    )


# Starting the local PostgreSQL.

ANSWERS = "pg_isready -q -h 127.0.0.1 -p 5432"


def test_answering_postgres_says_nothing(machine: Machine) -> None:
    machine.fake("pg_isready", "pg_lsclusters", "pg_ctlcluster")
    machine.flag("up")
    assert machine.run("ensure-postgres") == Ran(0, [], [ANSWERS])


def test_stopped_cluster_on_5432_is_started_after_one_line(machine: Machine) -> None:
    """Of the stopped clusters, the one set to port 5432 is started, and nothing else."""
    machine.fake("pg_isready", "pg_lsclusters", "pg_ctlcluster")
    (machine.directory / "clusters").write_text(
        "15 other 5433 down postgres /var/lib/postgresql/15/other /var/log/o.log\n"
        "15 main  5432 down postgres /var/lib/postgresql/15/main  /var/log/m.log\n"
    )
    assert machine.run("ensure-postgres") == Ran(
        0,
        [
            f"{WHO}: starting the local PostgreSQL cluster 15/main (pg_ctlcluster 15 main start):"
            " the PostgreSQL tests use it on 127.0.0.1:5432"
        ],
        [ANSWERS, "pg_ctlcluster --skip-systemctl-redirect 15 main start", ANSWERS],
    )


@pytest.mark.parametrize("ci", [False, True], ids=["local", "CI=true"])
def test_no_cluster_to_start_is_one_line(machine: Machine, ci: bool) -> None:
    """A cluster that is up on another port is not touched; nothing is started."""
    machine.fake("pg_isready", "pg_lsclusters", "pg_ctlcluster")
    (machine.directory / "clusters").write_text(
        "15 main 5433 online postgres /var/lib/postgresql/15/main /var/log/m.log\n"
    )
    why = f"{WHO}: nothing answers on 127.0.0.1:5432 and no stopped local cluster is set to port 5432; "
    assert machine.run("ensure-postgres", ci=ci) == Ran(
        1 if ci else 0,
        [why + ("CI=true: the PostgreSQL tests are required, failing" if ci else "the PostgreSQL tests will be skipped")],
        [ANSWERS],
    )


def test_failed_start_is_one_line_more(machine: Machine) -> None:
    machine.fake("pg_isready", "pg_lsclusters", "pg_ctlcluster")
    machine.flag("start-fails")
    (machine.directory / "clusters").write_text("16 main 5432 down postgres /d /l\n")
    ran = machine.run("ensure-postgres")
    assert ran.status == 0 and len(ran.lines) == 2, ran
    assert ran.lines[1] == (
        f"{WHO}: pg_ctlcluster 16 main start failed; the PostgreSQL tests will be skipped"
    )


def test_postgres_not_installed_is_one_line(machine: Machine) -> None:
    assert machine.run("ensure-postgres") == Ran(
        0,
        [
            f"{WHO}: PostgreSQL is not installed (apt-get install postgresql);"
            " the PostgreSQL tests will be skipped"
        ],
        [],
    )


# The Makefile's side.


def test_make_test_runs_each_script_silently_naming_its_goal() -> None:
    """
    make test runs the three scripts without echoing their command lines
    (so that nothing is printed when nothing is needed), their lines
    beginning with "make test:".
    """
    if shutil.which("make") is None:
        pytest.skip("no make")
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "test"], cwd=ROOT, capture_output=True,
        text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    ensures = sorted(line for line in done.stdout.splitlines() if ".ci/ensure-" in line)
    assert ensures == [
        f"ENSURE_WHO='make test' sh .ci/ensure-{name}"
        for name in ("chromium", "postgres", "systemd-analyze")
    ]
    makefile = (ROOT / "Makefile").read_text()
    for name in ("chromium", "postgres", "systemd-analyze"):
        assert f"\t@$(ENSURE) .ci/ensure-{name}\n" in makefile

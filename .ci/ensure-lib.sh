# Shared by the .ci/ensure-* scripts, which `make test` runs before the
# suite (sourced, not run). Each script changes the machine only when
# something is missing, and then says first what it does and why, in one
# line that begins with $ENSURE_WHO (the Makefile sets it to "make <goal>");
# when nothing is needed it says nothing.
#
# What is still missing afterwards is said in one line too. Locally that is
# fine (exit 0: the tests that need it are skipped); with CI=true it is a
# failure (exit 1), as those tests fail there too.

WHO=${ENSURE_WHO:-$(basename "$0")}

say() { printf '%s\n' "$WHO: $*" >&2; }

# give_up REASON CONSEQUENCE: say why, and exit 0, or 1 under CI=true.
give_up() {
    if [ "${CI:-}" = "true" ]; then
        say "$1; CI=true: $2 are required, failing"
        exit 1
    fi
    say "$1; $2 will be skipped"
    exit 0
}

# may_install: whether this process may install Debian packages (root, with
# apt-get).
may_install() { command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }

# apt_install WHY PACKAGE...: install Debian packages, saying so first; if
# the install fails (stale package lists), update the lists, saying so, and
# try once more. apt-get's own output is left out but for its errors.
apt_install() {
    why=$1
    shift
    say "installing Debian packages $* (apt-get install): $why"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null && return 0
    say "updating Debian's package lists (apt-get update) to try installing $* again"
    apt-get update -q >/dev/null \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

# Two commands set Beacon up on a fresh machine:
#   make run    runs `twistd -n beacon` on the embedded defaults
#   make test   installs the test extras and runs the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The extras `make run` installs besides Beacon, comma-separated: none by
# default, since the embedded defaults need none; `make run EXTRAS=grpc` for
# a [grpc] listener. `make test` installs the test extra (grpc's packages
# among them). Each set has its own stamp, .venv/.installed[-EXTRAS].
EXTRAS ?=
comma := ,
STAMP := $(VENV)/.installed$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))
TEST_STAMP := $(VENV)/.installed-test
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: run test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# An editable install in setuptools' default mode. Twisted finds plugins in
# the twisted/plugins folders on sys.path, so the checkout itself must be on
# it, not only behind an import hook: setup.cfg's package_dir names the
# checkout as the one root of every package, a layout setuptools installs as
# a plain .pth of that folder (no deprecated "compat" mode, no warning). The
# plugin cache is regenerated after every install.
define install
	$(BIN)/python -m pip install --quiet -e '.$(1)'
	$(BIN)/python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"
	touch $@
endef

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(call install,)

$(VENV)/.installed-%: $(BIN)/python setup.cfg pyproject.toml
	$(call install,[$(subst -,$(comma),$*)])

install: $(STAMP)

# The commands (beacon, twistd) are in .venv/bin: say once how to have them
# on PATH, as README uses them.
run: $(STAMP)
	@echo 'make run: beacon and twistd are in $(CURDIR)/$(BIN); in another terminal,'
	@echo '  export PATH="$(CURDIR)/$(BIN):$$PATH"'
	@echo 'and then, for example: beacon review list'
	$(BIN)/twistd -n beacon $(ARGS)

# The whole suite, then the HTTP and WebSocket suites again with the direct
# channel off (twisted.web answering every request), so that both of
# Beacon's HTTP paths are held to the same tests.
TWISTED_WEB_SUITES := tests/test_behaviour.py tests/test_http.py tests/test_rest.py tests/test_native.py \
	tests/test_auth.py tests/test_operator.py tests/test_limits.py tests/test_hostile.py tests/test_landing.py \
	$(wildcard tests/test_websocket*.py)

test: $(TEST_STAMP) postgres systemd-analyze chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(BIN)/python -m pytest --http-path=twisted.web $(PYTEST_ARGS) $(TWISTED_WEB_SUITES)

# The two passes of `make test`, RUNS times over (default 20), each pass's
# output kept in .test-loop/, and at the end the failures counted by test id
# (tools/test-loop --help): a test that fails by chance shows here.
RUNS ?= 20
.PHONY: test-loop
test-loop: $(TEST_STAMP) postgres systemd-analyze chromium
	$(BIN)/python tools/test-loop --runs $(RUNS) --pass '$(PYTEST_ARGS)' \
		--pass '--http-path=twisted.web $(PYTEST_ARGS) $(TWISTED_WEB_SUITES)'

# The official A2A conformance kit against `twistd -n beacon` on JSON-RPC,
# HTTP+JSON and gRPC (tools/conformance --help; not part of `make test`):
# A2A_TCK_DIR names a checkout of a2aproject/a2a-tck, which is only read (the
# kit's virtualenv is built under build/conformance/, once per kit commit).
# Every failure must be listed, with its reason, in
# tests/conformance/expected-failures.toml, and every one listed must still
# fail. Without A2A_TCK_DIR it says so and is skipped (failed when CI=true).
# About ten seconds, once the kit's virtualenv is built.
.PHONY: conformance
conformance: $(TEST_STAMP)
	$(BIN)/python tools/conformance $(CONFORMANCE_ARGS)

# The .ci/ensure-* scripts below change the machine only where something is
# missing, and then say first, in one line each, what they do and why (a
# line that begins with "make <goal>:"); when nothing is needed they say
# nothing. What is still missing is skipped, or fails when CI=true.
ENSURE := ENSURE_WHO='make $(or $(firstword $(MAKECMDGOALS)),test)' sh

# The store suite also runs on PostgreSQL (127.0.0.1:5432, user postgres):
# start the local cluster set to that port if it is installed but stopped.
# No test stops or restarts it (those that stop a server start their own).
.PHONY: postgres
postgres:
	@$(ENSURE) .ci/ensure-postgres

# tests/test_deploy.py verifies etc/beacon.service with systemd-analyze:
# install it (Debian's systemd package) where it is missing and we may.
.PHONY: systemd-analyze
systemd-analyze:
	@$(ENSURE) .ci/ensure-systemd-analyze

# tests/test_web_console.py drives `beacon review web` in headless Chromium:
# install Debian's chromium and chromium-driver where they are missing and we
# may.
.PHONY: chromium
chromium:
	@$(ENSURE) .ci/ensure-chromium

# etc/beacon.service booted under a real systemd: a throwaway Debian
# container (debootstrap, systemd-nspawn --boot) where the manual's steps
# install Beacon; the unit must come up sandboxed, answer on the
# container's loopback and stop cleanly (tools/deploy-check --help; not
# part of `make test`): about 4 minutes, as root, with Debian's debootstrap
# and systemd-container.
.PHONY: deploy-check
deploy-check: $(STAMP)
	$(BIN)/python tools/deploy-check $(DEPLOY_CHECK_ARGS)

# Regenerate beacon/proto's modules from beacon/proto/a2a.proto with
# grpcio-tools (tests/test_proto.py checks that this changes nothing).
.PHONY: proto
proto: $(TEST_STAMP)
	$(BIN)/python tools/generate-proto

# Beacon against the official A2A servers, on SQLite and on PostgreSQL,
# with its refusals and two instances on one database (bench/run --help;
# not part of `make test`): about 24 minutes; BENCH_ARGS="--out" also
# writes bench/results/<date>.md.
.PHONY: bench
bench: $(STAMP) postgres
	$(BIN)/python bench/run $(BENCH_ARGS)

# The reader's side (issue 18): `beacon review` list, search, bulk reject,
# export and purge on 100,000 stored submissions, SQLite and PostgreSQL
# (bench/reader.py --help; not part of `make test`): about 3 minutes;
# BENCH_ARGS="--out" also writes bench/results/<date>-reader.md, and
# BENCH_ARGS="--quick" is a smoke run of under a minute.
.PHONY: bench-reader
bench-reader: $(STAMP) postgres
	$(BIN)/python bench/reader.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info twisted/plugins/dropin.cache

# The manual (docs/), as HTML in build/docs/index.html, warnings as errors.
.PHONY: docs
docs: $(DOCS_STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs build/docs

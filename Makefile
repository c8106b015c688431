# AuthBridge — build, test, install, bench.
#
#   make deps                 install what is missing (apt packages, the venv in .venv)
#   make build                the debug build (installs nothing: `make deps-build` first on a new machine)
#   make test                 make deps, build, run every suite (make lint among them)
#   make lint                 the Swift and C sources in the house style (.swift-format, .clang-format),
#                             and every copy of bridge-spec/openrpc.json as `make spec` writes it
#   make format               rewrite the Swift and C sources in the house style (scripts/format.sh)
#   make demo                 build, then sign in to django-oauth-toolkit as a scripted user
#   make demo BROWSER=1       the same, signing in yourself in your browser
#   make dev-server           the bundled django-oauth-toolkit, to try the quick starts against
#   make install PREFIX=DIR   a self-contained, relocatable tree: DIR/bin, DIR/lib/authbridge/…
#   make dist                 dist/: tarball, Python wheel, .deb, npm package, SHA256SUMS
#   make bench                throughput, cold start and a hook round trip next to a C baseline; the agent
#                             and its commands next to oidc-agent
#   make fuzz N=1000000       the seeded frame fuzzer, long (SEED=…); it prints its figures
#
# Everything it installs is local (apt packages, a venv in .venv), and only `make deps` (or its
# parts, deps-build, deps-dist, deps-test, deps-bench) installs: test, demo, install, dist and bench call the
# parts they need; build, release and the test-* targets never run apt-get.
#
# The test targets read one set of environment variables (each has a default, so a suite also
# runs by hand from the checkout):
#   AUTHBRIDGE_BIN        the host under test (default .build/debug/authbridge)
#   AUTHBRIDGE_BUILD_DIR  the build folder: the bundled plugins in plugins/, the test plugins in
#                         test-plugins/ (default .build/debug)
#   AUTHBRIDGE_PYTHON     the venv's Python, for the Node suites that start django-oauth-toolkit
#                         and validate frames (default .venv/bin/python)
# AUTHBRIDGE (without a suffix) is the clients' own setting, which host they start: no suite
# relies on it being set; tests that exercise it set it themselves.

SHELL       := /bin/bash
PREFIX      ?= $(CURDIR)/out
SWIFT       ?= swift
PYTHON      ?= python3
VENV        := .venv
VPY         := $(VENV)/bin/python
DEBUG_DIR   := .build/debug
RELEASE_DIR := .build/release
TEST_PLUGINS := .build/test-plugins
BUILD_PACKAGES := libjansson-dev libcurl4-openssl-dev libpq-dev nettle-dev pkg-config gcc
# patchelf: RUNPATHs of the install tree; lintian checks the .deb in the tests.
DIST_PACKAGES  := patchelf
# clang-format: make lint (the Swift formatter comes with the toolchain); postgresql: the PostgreSQL
# vault's tests start their own server (initdb, pg_ctl in /usr/lib/postgresql/N/bin). kubernetes-client
# (kubectl, for the exec credential tests) only where no kubectl is installed: it would clash with another one.
# glewlwyd's postinst asks where its database lives; unanswered, it falls through to PostgreSQL and
# fails, and every later apt-get exits 100 until `dpkg --configure glewlwyd` succeeds. The tests
# make their own sqlite database, so: no configuration (and no service set up).
GLEWLWYD_DEBCONF := glewlwyd glewlwyd/config_type select No configuration
TEST_PACKAGES  := gnome-keyring libsecret-tools libsecret-1-dev dbus chromium chromium-driver node-typescript lintian clang-format postgresql
# The version of every distribution: the host's own (`hostVersion`, AuthBridgePluginHost).
VERSION     := $(shell grep -rhoE '^public let hostVersion = "[^"]+"' Sources | cut -d'"' -f2)
# Builds are reproducible from a commit: every time stamp in dist/ is the commit's.
export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
STAGE       := .build/stage
# Release binaries name no build folder: C's __FILE__ (BoringSSL's error strings) and Swift's
# #filePath become paths relative to the checkout.
# Every module, ours and our dependencies', is compiled without Swift's implicit import of
# _StringProcessing (Regex and the string algorithms over it): linked, it and _RegexParser cost
# every start of the host and of each Swift plugin 0.9 MB and ~1 ms (bench/README, "Start-up").
# Our code searches text with AuthBridgeURL's TextSearch; a use creeping back is a compile error.
SWIFT_FLAGS   := -Xswiftc -Xfrontend -Xswiftc -disable-implicit-string-processing-module-import
RELEASE_FLAGS := $(SWIFT_FLAGS) -Xcc -ffile-prefix-map=$(CURDIR)/= -Xswiftc -file-prefix-map -Xswiftc $(CURDIR)/=
DIST        := dist
DEV_PORT    ?= 8765
DEV_STATE   ?= .build/dev-server

# Plugins shipped with AuthBridge: Swift ones are SwiftPM products
# (libauthbridge-ID.so + plugins/ID/ID.json); C ones have plugins/ID/build.sh.
BUNDLED_PLUGINS := oidc salesforce tableau marketsharp
BUNDLED_C_PLUGINS := duke

.PHONY: all deps deps-build deps-dist deps-test deps-bench build release test test-swift test-contract test-python-client test-node \
        test-node-client test-dist front-door install stage-tree dist demo dev-server bench clean spec ladder fuzz lint format

all: build

# $(call apt_install,CHECK,PACKAGES[,DEBCONF]): installs PACKAGES with apt-get unless the shell CHECK
# passes; DEBCONF, a debconf-set-selections line, answers a package's question before it is asked.
apt_install = @{ $(1); } >/dev/null 2>&1 || { \
	  echo "==> installing $(2)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $(if $(3),echo "$(3)" | $$SUDO debconf-set-selections &&) \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; }

## deps: everything below.
deps: deps-build deps-dist deps-test

## deps-build: what building needs (jansson, libcurl, libpq, a C compiler for the C plugins).
deps-build:
	$(call apt_install,pkg-config --exists jansson libcurl libpq nettle && command -v gcc,$(BUILD_PACKAGES))

## deps-dist: what making the install tree needs beyond the build (patchelf).
deps-dist:
	$(call apt_install,command -v patchelf,$(DIST_PACKAGES))

## deps-test: what the tests need: a keyring on a private bus, Chromium and its driver (the
## real-browser sign-in test, Tests/contract/test_browser.py, which never skips), clang-format (make lint), tsc (the Node
## client's declarations), git and kubectl (the credential helpers' tests, Tests/contract/test_credential_helpers.py),
## PostgreSQL (the PostgreSQL vault's tests), glewlwyd (an OpenID provider the oidc plugin's scenarios start,
## Tests/support/authbridge_testkit/glewlwyd.py), and the Python venv (pytest, jsonschema, django-oauth-toolkit, selenium).
deps-test: $(VENV)/.ready
	$(call apt_install,command -v gnome-keyring-daemon dbus-daemon secret-tool tsc lintian clang-format && pkg-config --exists libsecret-1 && [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && ls /usr/lib/postgresql/*/bin/initdb,$(TEST_PACKAGES))
	$(call apt_install,command -v git,git)
	$(call apt_install,command -v kubectl,kubernetes-client)
	$(call apt_install,command -v glewlwyd,glewlwyd,$(GLEWLWYD_DEBCONF))

## deps-bench: what `make bench` needs beyond the tests: oidc-agent (Debian's oidc-agent-cli), the peer
## bench/oidc_agent.py measures the agent and its commands next to. Not part of `make deps`.
deps-bench:
	$(call apt_install,command -v oidc-agent && command -v oidc-gen && command -v oidc-add && command -v oidc-token,oidc-agent-cli)

$(VENV)/.ready: requirements-test.txt
	@echo "==> creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(VPY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	@touch $@

## build: the host, its helper library, the bundled and test plugins (debug); git-credential-authbridge,
## the name git gives the host as a credential helper (`credential.helper "authbridge git-credential …"`).
build:
	$(SWIFT) build $(SWIFT_FLAGS)
	@$(MAKE) --no-print-directory front-door BUILD_DIR=$(DEBUG_DIR)
	@ln -sf authbridge $(DEBUG_DIR)/git-credential-authbridge
	@$(MAKE) --no-print-directory test-plugins BUILD_DIR=$(DEBUG_DIR)

release:
	$(SWIFT) build -c release $(RELEASE_FLAGS)
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product generate-manual
	@$(MAKE) --no-print-directory front-door BUILD_DIR=$(RELEASE_DIR)
	@$(MAKE) --no-print-directory test-plugins BUILD_DIR=$(RELEASE_DIR)

## front-door: `authbridge`, the command on PATH, in C with jansson alone (Sources/authbridge/front_door.h:
## tokens for git, kubectl and scripts without starting Swift). Built here, not by SwiftPM: the Swift
## driver links swiftrt.o and the Swift runtime into every executable, C ones too (+2 ms a start).
FRONT_DOOR_SOURCES := $(wildcard Sources/authbridge/*.c) Sources/CAuthBridgeProcess/process.c Sources/CAuthBridgeProcess/sandbox.c
FRONT_DOOR_FLAGS   := -std=gnu11 -O2 -Wall -Wextra -Werror -fstack-protector-strong -D_FORTIFY_SOURCE=2 -fPIE -pie \
	-Wl,-z,relro,-z,now -Wl,--as-needed -ffile-prefix-map=$(CURDIR)/= -ISources/CAuthBridgeProcess/include
front-door: $(BUILD_DIR)/authbridge
$(BUILD_DIR)/authbridge: $(FRONT_DOOR_SOURCES) $(wildcard Sources/authbridge/*.h) Sources/CAuthBridgeProcess/include/authbridge_process.h
	@mkdir -p $(BUILD_DIR)
	gcc $(FRONT_DOOR_FLAGS) -o $@ $(FRONT_DOOR_SOURCES) -ljansson

## Test plugins: copied or compiled into one folder with safe permissions.
test-plugins:
	@install -d -m 0755 $(BUILD_DIR)/test-plugins
	@install -m 0644 $(BUILD_DIR)/libauthbridge-testplugin-swift.so Tests/Plugins/SwiftTestPlugin/swifttest.json $(BUILD_DIR)/test-plugins/
	@sh Tests/Plugins/CTestPlugin/build.sh $(BUILD_DIR)/test-plugins
	@$(MAKE) --no-print-directory stage-plugins BUILD_DIR=$(BUILD_DIR) DEST=$(BUILD_DIR)/plugins

## stage-plugins: the bundled plugins (.so + manifest) into DEST.
stage-plugins:
	@install -d -m 0755 $(DEST)
	@for p in $(BUNDLED_PLUGINS); do \
	  install -m 0644 $(BUILD_DIR)/libauthbridge-$$p.so plugins/$$p/$$p.json $(DEST)/; done
	@for p in $(BUNDLED_C_PLUGINS); do sh plugins/$$p/build.sh $(DEST); done

test: deps
	@$(MAKE) --no-print-directory build dist
	@$(MAKE) --no-print-directory check-keyring-abi test-swift test-contract test-python-client test-node test-node-client test-dist lint

## lint: Swift and C sources as `make format` writes them; every copy of openrpc.json as `make spec` does.
lint:
	SWIFT=$(SWIFT) scripts/format.sh --check
	$(PYTHON) scripts/spec.py --check

## format: rewrites the Swift and C sources in the house style (.swift-format, .clang-format).
format:
	SWIFT=$(SWIFT) scripts/format.sh

## check-keyring-abi: the glib/libsecret types the keyring helper declares itself, against the real headers.
check-keyring-abi:
	@gcc -std=c11 -Wall -Werror -fsyntax-only $$(pkg-config --cflags libsecret-1) Tests/Keyring/abi_check.c

## Under a private session bus with an unlocked gnome-keyring and with a private PostgreSQL
## cluster, so the vault behaviour suite also runs against the Secret Service and PostgreSQL.
test-swift:
	scripts/with-postgres.sh scripts/with-keyring.sh $(SWIFT) test $(SWIFT_FLAGS) --disable-xctest 2>&1 \
	  | grep -v -e 'fd limit' -e 'dbus-daemon\[' -e SystemPrompter -e Gtk-WARNING; exit $${PIPESTATUS[0]}

# The environment of every test target (the header says what each variable is).
TEST_ENV := AUTHBRIDGE_BIN=$(CURDIR)/$(DEBUG_DIR)/authbridge AUTHBRIDGE_BUILD_DIR=$(CURDIR)/$(DEBUG_DIR) \
            AUTHBRIDGE_PYTHON=$(CURDIR)/$(VPY)

## CONTRACT_JOBS: pytest-xdist workers for the contract suite (0: one process).
CONTRACT_JOBS ?= 3
test-contract:
	$(TEST_ENV) $(VPY) -m pytest -q -n $(CONTRACT_JOBS) --dist loadfile Tests/contract

## The Python client (clients/python) against the real host and django-oauth-toolkit.
test-python-client:
	$(TEST_ENV) $(VPY) -m pytest -q clients/python/tests

test-node:
	$(TEST_ENV) node --test Tests/node/

## test-node-client: the Node client (clients/node) against the host, the bundled oidc plugin and
## django-oauth-toolkit; each test file ends by validating the frames it received against bridge-spec.
test-node-client:
	$(TEST_ENV) node --test clients/node/test/

## install: a self-contained, relocatable tree at PREFIX — bin/authbridge; lib/authbridge/ with the
## helper libraries, the bundled plugins (plugins/), the Swift runtime and every library a plain
## glibc system lacks; include/authbridge/ (plugin.h, plugin_jansson.h); share/ (openrpc.json, man page, completions,
## licenses; lib/systemd/user: the agent's units, naming PREFIX/bin). Staged in $(STAGE)/install, then
## copied over PREFIX.
install: deps-build deps-dist
	@$(MAKE) --no-print-directory release
	@$(MAKE) --no-print-directory stage-tree DEST=$(STAGE)/install MODE=portable UNIT_BINDIR=$(abspath $(PREFIX))/bin
	install -d -m 0755 $(PREFIX)
	cp -R $(STAGE)/install/. $(PREFIX)/
	@echo "installed into $(PREFIX)"

## stage-tree DEST=DIR MODE=portable|system [UNIT_BINDIR=DIR]: the install tree from the release build,
## made self-contained by scripts/dist/bundle.py (portable: everything but glibc and libstdc++ inside;
## system: the Swift runtime inside, the rest from the distribution's packages, as the .deb). With
## UNIT_BINDIR (the bin folder the tree will live in: make install's, the .deb's /usr/bin), the
## systemd user units of the agent too (lib/systemd/user: authbridge.socket, authbridge.service);
## a relocatable tarball cannot name its own path, so it has none.
stage-tree:
	@rm -rf $(DEST)
	@install -d -m 0755 $(DEST)/bin $(DEST)/lib/authbridge $(DEST)/include/authbridge $(DEST)/share/authbridge
	@install -m 0755 $(RELEASE_DIR)/authbridge $(DEST)/bin/authbridge
	@install -m 0755 $(RELEASE_DIR)/authbridge-host $(RELEASE_DIR)/authbridge-cli $(DEST)/lib/authbridge/
	@ln -s authbridge $(DEST)/bin/git-credential-authbridge
	@install -m 0644 $(RELEASE_DIR)/libAuthBridgeHTTP.so $(RELEASE_DIR)/libAuthBridgeSwiftCrypto.so $(RELEASE_DIR)/libAuthBridgeNettle.so $(RELEASE_DIR)/libAuthBridgeKeyring.so \
		$(RELEASE_DIR)/libAuthBridgePostgres.so $(DEST)/lib/authbridge/
	@$(MAKE) --no-print-directory stage-plugins BUILD_DIR=$(RELEASE_DIR) DEST=$(DEST)/lib/authbridge/plugins
	@install -m 0644 Sources/CAuthBridgePlugin/include/authbridge/plugin.h Sources/CAuthBridgePlugin/include/authbridge/plugin_jansson.h \
		$(DEST)/include/authbridge/
	@install -m 0644 bridge-spec/openrpc.json $(DEST)/share/authbridge/
	@if [ -n "$(UNIT_BINDIR)" ]; then \
	  install -d -m 0755 $(DEST)/lib/systemd/user && \
	  install -m 0644 scripts/dist/systemd/authbridge.socket $(DEST)/lib/systemd/user/ && \
	  sed 's#@BINDIR@#$(UNIT_BINDIR)#' scripts/dist/systemd/authbridge.service > $(DEST)/lib/systemd/user/authbridge.service; fi
	@$(PYTHON) scripts/dist/bundle.py $(DEST) --mode $(MODE) --generate-manual $(RELEASE_DIR)/generate-manual \
	  --build $(CURDIR)/.build --checkouts .build/checkouts

## dist: dist/ — the tarball, the Python platform wheel, the .deb, the npm package and SHA256SUMS,
## each with its size (scripts/dist/package.py). Reproducible: time stamps are the commit's.
dist: deps-build deps-dist $(VENV)/.ready
	@$(MAKE) --no-print-directory release
	@$(MAKE) --no-print-directory stage-tree DEST=$(STAGE)/portable MODE=portable
	@$(MAKE) --no-print-directory stage-tree DEST=$(STAGE)/system MODE=system UNIT_BINDIR=/usr/bin
	@$(VPY) scripts/dist/package.py --version $(VERSION) --portable $(STAGE)/portable --system $(STAGE)/system --out $(DIST)

## test-dist: the four distributions with the Swift toolchain and the build folder hidden (a private
## mount namespace, scripts/hide-toolchain.sh): installed and used as a user would (Tests/dist).
test-dist:
	scripts/hide-toolchain.sh $(VPY) -m pytest -q Tests/dist

## demo: against django-oauth-toolkit, so with the venv's Python (Django).
demo: deps-build $(VENV)/.ready
	@$(MAKE) --no-print-directory build
	$(VPY) Examples/demo.py --host $(CURDIR)/$(DEBUG_DIR)/authbridge --plugins $(CURDIR)/$(DEBUG_DIR)/plugins \
	  $(if $(filter 1,$(BROWSER)),--browser)

## bench: the host (its test plugin in-process, then isolated: the hook round trip) next to the C answerer;
## then the vaults (bench/VaultBench, bench/postgres.py: the PostgreSQL vault next to the encrypted file);
## then the agent under hostile connections (bench/hostile.py: its memory, what a reading app sees);
## then the agent and its commands next to oidc-agent (bench/oidc_agent.py: both on django-oauth-toolkit);
## then the start-up of the `authbridge` command the wheel installs next to the tarball's (bench/startup.py, on dist/);
## first, what a runner's sandbox costs to set up (bench/sandbox-cost.c).
BENCH_HOST_ARGS := serve --no-default-plugins --vault memory --plugins $(RELEASE_DIR)/test-plugins --config bench/bench-config.json --log-level warning
bench: deps-build deps-test deps-bench
	@$(MAKE) --no-print-directory release build
	gcc -O2 -o .build/c-answerer bench/c-answerer.c -ljansson
	gcc -O2 -o .build/hook-cost bench/hook-cost.c -ISources/CAuthBridgePlugin/include -ldl
	gcc -O2 -o .build/round-trip bench/round-trip.c
	gcc -O2 -o .build/sandbox-cost bench/sandbox-cost.c -ISources/CAuthBridgeProcess/include -ldl
	.build/sandbox-cost
	$(PYTHON) bench/bench.py --host $(RELEASE_DIR)/authbridge --answerer .build/c-answerer \
	  --host-args "$(BENCH_HOST_ARGS) --plugin-isolation none" --isolated-host-args "$(BENCH_HOST_ARGS) --plugin-isolation process"
	$(PYTHON) bench/hot_path.py --host $(RELEASE_DIR)/authbridge --answerer .build/c-answerer \
	  --plugins $(RELEASE_DIR)/test-plugins --config bench/bench-config.json --hook-cost .build/hook-cost \
	  --round-trip-client .build/round-trip
	$(VPY) bench/dpop.py --host $(RELEASE_DIR)/authbridge --round-trip-client .build/round-trip
	AUTHBRIDGE_BIN=$(CURDIR)/$(RELEASE_DIR)/authbridge AUTHBRIDGE_BUILD_DIR=$(CURDIR)/$(RELEASE_DIR) $(VPY) bench/par.py --server idpyoidc --begins 50 --sign-ins 10
	AUTHBRIDGE_BIN=$(CURDIR)/$(RELEASE_DIR)/authbridge AUTHBRIDGE_BUILD_DIR=$(CURDIR)/$(RELEASE_DIR) $(VPY) bench/par.py --server glewlwyd --begins 50 --sign-ins 10
	$(PYTHON) bench/redaction.py --host $(RELEASE_DIR)/authbridge --plugins $(RELEASE_DIR)/test-plugins --config bench/bench-config.json
	scripts/with-keyring.sh $(RELEASE_DIR)/authbridge-vault-bench --secret-service \
	  --keyring-lib $(CURDIR)/$(RELEASE_DIR)/libAuthBridgeKeyring.so 2>&1 | grep -v -e 'fd limit' -e dbus-daemon -e SystemPrompter -e Gtk-WARNING -e '^$$'
	$(VPY) bench/postgres.py --host $(RELEASE_DIR)/authbridge --plugins $(RELEASE_DIR)/test-plugins --config bench/bench-config.json
	$(VPY) bench/hostile.py --host $(RELEASE_DIR)/authbridge --plugins $(RELEASE_DIR)/test-plugins --config bench/bench-config.json
	$(VPY) bench/oidc_agent.py --bin $(RELEASE_DIR)
	@$(MAKE) --no-print-directory dist
	$(PYTHON) bench/startup.py --dist $(DIST)
	@echo "Cross-process refresh (4 hosts sharing one vault: 1 s access tokens for 7 s; then 50 calls each on an expired token; the fake, then django-oauth-toolkit):"
	@AUTHBRIDGE_VAULT_BENCH_OUT=$(CURDIR)/.build/vault-concurrency.json AUTHBRIDGE_BIN=$(CURDIR)/$(RELEASE_DIR)/authbridge \
	  AUTHBRIDGE_BUILD_DIR=$(CURDIR)/$(RELEASE_DIR) AUTHBRIDGE_PYTHON=$(CURDIR)/$(VPY) $(VPY) -m pytest -q -s Tests/contract/test_vault_concurrency.py -k "shared or expired or storm" 2>&1 | grep -E "processes|passed|failed"

## fuzz N=FRAMES [SEED=S] [AGENT=1]: Tests/fuzz/fuzz_host.py against the debug host (test plugins,
## memory vault): valid, hostile and broken frames; prints frames, crashes, hangs, lost answers, max RSS,
## the latency distribution and RSS over the run (AGENT=1: one agent, a connection per host lifetime).
## `make test` runs it at about 20,000 frames (Tests/contract/test_fuzz.py).
N    ?= 1000000
SEED ?= 12
fuzz: build $(VENV)/.ready
	$(TEST_ENV) $(VPY) Tests/fuzz/fuzz_host.py --frames $(N) --seed $(SEED) $(if $(AGENT),--agent)

## dev-server: the bundled django-oauth-toolkit (Tests/support/dot_server.py) on 127.0.0.1:$(DEV_PORT)
## until Ctrl-C, for trying the quick starts: it prints the exports they read, apart from them and marked
## as such those that put this checkout's debug build first on PATH, and the test user.
## Its users, clients and keys stay in $(DEV_STATE), so sessions signed in against it survive a restart.
dev-server: $(VENV)/.ready
	@$(VPY) Tests/support/dot_server.py --state $(DEV_STATE) --port $(DEV_PORT) --banner \
	  --checkout-export AUTHBRIDGE=$(CURDIR)/$(DEBUG_DIR)/authbridge --checkout-export 'PATH=$(CURDIR)/$(DEBUG_DIR):$$PATH'

## spec: after editing bridge-spec/openrpc.json, rewrite its copies (scripts/spec.py): each method's
## params list (from its x-params), the embedded document, the error tables of the host and the
## clients, bridge-spec/README.md's method and error tables.
spec:
	$(PYTHON) scripts/spec.py

## ladder: regenerate the Swift runtime note's version ladder
## (Sources/AuthBridgePluginABI/SwiftRuntimeLadder.swift) after editing scripts/swift-runtime-ladder.py.
ladder:
	$(PYTHON) scripts/swift-runtime-ladder.py

clean:
	rm -rf .build $(VENV) out $(DIST)

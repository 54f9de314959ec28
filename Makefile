# Tether: the two commands are `make run` and `make test` (see README.md).
# CMake does the real build; this file sets up, picks build directories and
# runs things.
#   build/release  plain build, the binaries `make run` uses (build/bin links here)
#   build/asan     ASan + UBSan build, the one `make test` runs
#   build/fuzz     clang + libFuzzer targets
#   build/tsan     ThreadSanitizer build of the three programs (make test-tsan)
#   build/static   build/static/ARCH/tether-client, static agents (make agent-static)
#   build/old-COMMIT  an earlier commit's release, from git (make build-old;
#                  the version-skew test, test_skew, runs it)

SHELL := /bin/bash
JOBS  ?= $(shell nproc)
FUZZ_SECONDS ?= 20
FUZZ_LONG_SECONDS ?= 600

.PHONY: all setup build build-asan build-tsan build-old test-tsan test test-fresh unit integration fuzz fuzz-smoke run run-ha bench bench-throughput bench-scale deb agent-static clean

all: build

setup:
	@bash config/setup.sh

build/release/Makefile: CMakeLists.txt | setup
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr >/dev/null

build: setup build/release/Makefile
	cmake --build build/release -j$(JOBS)
	@ln -sfn release/bin build/bin

build-asan: setup
	@test -f build/asan/Makefile || cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DTETHER_SANITIZE=ON >/dev/null
	cmake --build build/asan -j$(JOBS)

# Configured on every run (a second): a unit test new in TSAN_UNIT is a
# target of build/tsan only once cmake has run again.
build-tsan: setup
	@cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DTETHER_TSAN=ON >/dev/null
	cmake --build build/tsan -j$(JOBS) --target tether-gateway tether-client tetherctl $(TSAN_UNIT)

# A few integration tests against the ThreadSanitizer build, the gateway
# with two loops (docs/0032); not part of `make test` (minutes on two cores).
# Run as scripts, not through ctest (whose TETHER_BIN is build/asan's).
# The unit tests whose threads share state (docs/0040) run first.
TSAN_TESTS ?= test_workers test_slot_starvation test_preface_caps test_drain \
  test_shutdown_streams test_revocation_ends_streams test_metrics test_ui \
  test_key_rotation test_peer_links test_api_loops test_peer_open_loops \
  test_revocation_loops test_landing_plain test_k8s_token_memo test_landing_weighed \
  test_landing_dials
TSAN_UNIT ?= test_loop test_looplink test_handshake_slots test_agentdir test_face test_reach test_api_act \
  test_shares test_budget \
  test_store_worker test_access test_revoke_loops test_presence_group
test-tsan: build-tsan
	@for t in $(TSAN_UNIT); do \
	  echo "== unit/$$t (ThreadSanitizer)"; \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build/tsan/tests/$$t || exit 1; \
	done
	@for t in $(TSAN_TESTS); do \
	  echo "== $$t (ThreadSanitizer)"; \
	  TETHER_BIN=$(CURDIR)/build/tsan/bin TETHER_SRC=$(CURDIR) ASAN_OPTIONS= \
	    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	    bash tests/integration/$$t.sh || exit 1; \
	done

build-fuzz: setup
	@test -f build/fuzz/Makefile || CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=Debug -DTETHER_FUZZ=ON >/dev/null
	cmake --build build/fuzz -j$(JOBS)

# The static agents for amd64, arm64 and armhf (docs/0025-lean-static-agent.md):
# build/static/ARCH/tether-client, no shared libraries.  About 2 minutes from
# scratch on two cores, seconds when nothing changed.
agent-static: setup
	@for arch in amd64 arm64 armhf; do bash config/agent-static.sh $$arch || exit 1; done

# The agent, gateway and tetherctl of an earlier commit (692108b), built
# from git history into build/old-692108b once and kept (test_skew runs
# them against this tree's; docs/0037).  About 30 s of CPU; fails, saying
# why, in a clone without that history.
build-old: setup
	@bash tests/tools/old_build.sh >/dev/null

# The whole suite: unit and integration tests on the sanitized build
# (test_agent_static runs the static agents, test_skew the old release),
# then a short bounded fuzzing run of every fuzz target.
test: build build-asan build-fuzz agent-static build-old
	cd build/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j2
	@$(MAKE) --no-print-directory fuzz-run SECONDS=$(FUZZ_SECONDS)

# The two commands on a fresh Debian 12 root filesystem (debootstrap, chroot),
# from the current commit; needs root.  tests/fresh/run.sh says how.
test-fresh:
	@bash tests/fresh/run.sh

unit: build-asan
	cd build/asan && ctest --output-on-failure -L unit

integration: build-asan
	cd build/asan && ctest --output-on-failure -L integration

fuzz: build-fuzz
	@$(MAKE) --no-print-directory fuzz-run SECONDS=$(FUZZ_LONG_SECONDS)

fuzz-run:
	@FUZZ_JOBS=$(JOBS) bash tests/fuzz/run.sh build/fuzz $(SECONDS)

run: build
	@bash config/run-demo.sh

# Three replicas on a private PostgreSQL behind haproxy, one agent (docs/0023).
run-ha: build
	@bash config/run-ha.sh

# Benchmarks report figures, they do not pass or fail (tests/bench/README.md).
bench: build
	@bash tests/bench/idle_agents.sh
	@bash tests/bench/throughput.sh

bench-throughput: build
	@bash tests/bench/throughput.sh

# Every scale-and-speed figure (throughput, k8s proxy, idle tunnels, storm)
# in one run, ~7 minutes per build on 2 CPUs.
bench-scale: build
	@bash tests/bench/scale_speed.sh

# The Debian package, from the release build (cmake/Install.cmake says what
# goes where), checked with lintian: any error or warning fails.
deb: build
	@cmake -S . -B build/release -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
	@rm -f build/deb/tether_*.deb
	cd build/release && cpack -G DEB -B $(CURDIR)/build/deb >/dev/null
	@rm -rf build/deb/_CPack_Packages
	lintian --fail-on error,warning --pedantic -I build/deb/tether_*.deb
	@ls build/deb/tether_*.deb

clean:
	rm -rf build

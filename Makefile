# Two commands do everything on a fresh machine: `make run` and `make test`.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: run run-collectives test build deps bench clean test-sanitize build-libcxx format format-check

run: deps build
	./scripts/main-job.sh

# The collective benchmark sweep that was the main job before SWARM (docs/benchmarks.md).
run-collectives: deps build
	./scripts/collectives-job.sh

# ctest, then what was left out and why as the last lines (scripts/run-tests.sh). With
# SHOAL_TEST_NO_SKIP=1 in the environment (.ci/run) a skip fails its test and a test group the
# build cannot register fails the configure step.
test: deps build
	./scripts/run-tests.sh $(BUILD) $(JOBS)

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSHOAL_TEST_NO_SKIP=$${SHOAL_TEST_NO_SKIP:-0} >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

deps:
	./scripts/install-deps.sh

bench: deps build
	./bench/compare.sh

clean:
	rm -rf $(BUILD)

# Sanitizers (docs/reliability.md): an ASan+UBSan build in build-asan (clang with the fuzz
# targets when clang is installed, else g++) of every C++ test target that builds without torch,
# run with the fuzz targets (SHOAL_FUZZ_SECONDS each). test_collectives runs one world size (3)
# only: its full matrix takes ~10 min under ASan; test_sim all but its two symbolic proofs at
# scale (Symbolic.*AtScale: 64 of its 77 s in a release build, ~9 min under ASan, close to
# ctest's 10 min limit; the same proofs at small worlds run). Left out, each for a reason:
#   test_swarm_model, test_swarm_settings, test_swarm: they link libtorch, whose wheel is not built
#     with the sanitizers (the build is SHOAL_TORCH=OFF; ASan would report inside torch's own
#     allocator and the wheel's static initialisers);
#   test_collectives_tcp, test_collectives_shm_rings, test_failures_tcp: the same binaries as
#     test_collectives and test_failures with another transport, which the ASan run's ranks3 and
#     test_failures already cover.
SAN_BUILD ?= build-asan
SAN_TESTS ?= test_harness test_kernels test_config test_store test_bootstrap test_schedules \
             test_striped_stream test_dispatch test_links test_plan test_sim test_chaos_workload \
             test_swarm_net test_swarm_routing test_swarm_averaging test_shm test_api test_p2p \
             test_vectored test_auth test_agreement test_hierarchical test_dispatch_multirank \
             test_tuning_sweep test_flat_direct test_flat_queue test_under_load test_staging \
             test_failures test_etcd_store test_mismatch test_wan_model test_tcp_socket test_streams \
             test_collectives
test-sanitize: deps
	@if command -v clang++ >/dev/null; then \
	  extra="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHOAL_FUZZ=ON"; fi; \
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_TORCH=OFF \
	  -DSHOAL_SANITIZE=address,undefined $$extra >/dev/null
	@fuzz=$$(command -v clang++ >/dev/null && echo "fuzz_connection fuzz_store fuzz_hello fuzz_swarm"); \
	cmake --build $(SAN_BUILD) -j $(JOBS) --target $(SAN_TESTS) $$fuzz
	cd $(SAN_BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS) \
	  -R '^($(subst $(eval) ,|,$(filter-out test_collectives test_sim,$(SAN_TESTS)))|fuzz_.*)$$'
	$(SAN_BUILD)/bin/test_collectives --gtest_filter='*ranks3'
	$(SAN_BUILD)/bin/test_sim --gtest_filter='-Symbolic.*AtScale'

# The library and the tools with clang and LLVM's libc++ (Debian's libc++-dev) instead of g++ and
# libstdc++ (the torch parts stay on torch's ABI, the tests on GoogleTest's libstdc++ build), and
# a 2-rank all_reduce through them with every element checked. CI runs it.
LIBCXX_BUILD ?= build-libcxx
build-libcxx: deps
	cmake -S . -B $(LIBCXX_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
	  -DCMAKE_EXE_LINKER_FLAGS=-stdlib=libc++ -DSHOAL_TORCH=OFF -DBUILD_TESTING=OFF >/dev/null
	cmake --build $(LIBCXX_BUILD) -j $(JOBS) --target shoal-run shoal-bench shoal-info shoal-tune shoal-sim shoal-chaos shoal-wan
	$(LIBCXX_BUILD)/bin/shoal-run -n 2 $(LIBCXX_BUILD)/bin/shoal-bench all_reduce -b 8 -e 1M -f 16 -c 1 | grep -q "Out of bounds values : 0 OK"


# Every C/C++ file of the tree as .clang-format lays it out (Debian's clang-format 14): `make
# format` applies it, `make format-check` (CI) fails naming what differs.
FORMAT_FILES = $(shell git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cc')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

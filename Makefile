# Two commands do everything on a fresh machine: `make run` and `make test`.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: run test build deps bench clean

run: deps build
	./scripts/main-job.sh

test: deps build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS)

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

deps:
	./scripts/install-deps.sh

bench: deps build
	./bench/compare.sh

clean:
	rm -rf $(BUILD)

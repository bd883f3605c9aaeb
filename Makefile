# Thin wrapper: every target does its own set-up, so a fresh clone needs only `make run` or `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
SANITIZE ?= 0
CMAKE_FLAGS ?=
ifeq ($(SANITIZE),1)
  BUILD := build-sanitize
  CMAKE_FLAGS += -DKVSCOPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
endif

.PHONY: all deps deps-run configure build run test bench clean
all: build

deps:
	@scripts/setup_deps.sh

# What `make run` needs and nothing more: no test venvs, no Ray.
deps-run:
	@KVSCOPE_SETUP=run scripts/setup_deps.sh

configure:
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: deps configure
	@cmake --build $(BUILD) -j $(JOBS)

# Only the kvscope executable (tests, plugins and test fixtures are built by `make test`).
run: deps-run configure
	@cmake --build $(BUILD) -j $(JOBS) --target kvscope
	@scripts/run_default.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	@scripts/bench.sh $(BUILD)

clean:
	rm -rf build build-sanitize build.configure.log build-sanitize.configure.log

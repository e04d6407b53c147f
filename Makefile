# Thin wrapper over CMake for the README's commands.
BUILD ?= build
ASAN_BUILD ?= build-asan
MPICH_BUILD ?= build-mpich
NOMPI_BUILD ?= build-nompi
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
# Tests at once in each ctest pass (tests/suite.sh lowers it for a pass that runs beside another).
CTEST_JOBS ?= 2
# The main job: data-parallel lenet5 over all local cores, one rank per core, batch 128
# per rank; the learning rate follows the linear scaling rule (0.1 x global batch / 256).
RANKS ?= $(shell nproc)
RUN_FLAGS ?= --model lenet5 --data fashion-mnist --epochs 10 --batch-size 128 --lr 0.1 \
             --lr-scaling linear --momentum 0.9 --nesterov --weight-decay 5e-4 --schedule cosine \
             --warmup-epochs 1

# Ninja when installed (install-deps.sh build brings it): a cold build of herd took 132 CPU-s
# and 71 s on 2 cores against 169 CPU-s and 92 s with Makefiles, the difference spent in
# make's bookkeeping per target (bench/results/2026-12-06-build-cost.txt).
GENERATOR ?= $(if $(shell command -v ninja 2>/dev/null),Ninja,Unix Makefiles)
# fresh DIR: a tree that another generator made starts afresh (CMake cannot switch in place).
define fresh
	@grep -qsx 'CMAKE_GENERATOR:INTERNAL=$(GENERATOR)' $(1)/CMakeCache.txt || rm -rf $(1)/CMakeCache.txt $(1)/CMakeFiles
endef

.PHONY: all deps build run test test-fast asan asan-build fuzz mpich mpich-build nompi nompi-build install clean bench print-run-flags

all: build

deps:
	@bash scripts/install-deps.sh

# Configured once: cmake --build runs CMake again when a CMakeLists.txt changes.
build:
	$(call fresh,$(BUILD))
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -G "$(GENERATOR)" -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: deps
	@$(MAKE) --no-print-directory build
	$(BUILD)/herd run -np $(RANKS) -- train $(RUN_FLAGS)

# The whole suite: what building needs installed, then the optimised build (the tests'
# packages installing beside it, tests/suite.sh), then the same tests under ASan + UBSan, then
# the MPI tests of a build against MPICH, then a build without MPI. The sanitizer and
# MPICH passes are repeat passes (tests/testlib.sh): each script keeps one configuration
# of each code path, for memory errors and for the other MPI; the first runs them all.
# tests/suite.sh overlaps them: the sanitizer, MPICH and no-MPI passes run beside the
# first, each once its own build is done.
test:
	@bash scripts/install-deps.sh build
	@BUILD=$(BUILD) bash tests/suite.sh

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

# The sanitizer build is clang's when clang is installed: it then also builds the
# libFuzzer targets of every parser (tests/fuzz), from the same instrumented library.
ASAN_CC ?= $(shell command -v clang 2>/dev/null || command -v cc)
FUZZ_SECONDS ?= 60

# A tree configured with another compiler starts afresh (CMake would keep none of the options).
# No CUDA backend: nvcc's code is not instrumented, its tests need a GPU, and the optimised
# build compiles it (25 s less to build).
asan-build:
	@if [ -f $(ASAN_BUILD)/CMakeCache.txt ] && \
	    ! grep -q '^CMAKE_C_COMPILER:[A-Z]*=$(ASAN_CC)$$' $(ASAN_BUILD)/CMakeCache.txt; then \
	  rm -rf $(ASAN_BUILD)/CMakeCache.txt $(ASAN_BUILD)/CMakeFiles; fi
	$(call fresh,$(ASAN_BUILD))
	cmake -G "$(GENERATOR)" -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=$(ASAN_CC) -DCMAKE_BUILD_TYPE=Debug -DHERD_SANITIZE=ON \
	  -DHERD_CUDA=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# A repeat pass: without the tests whose lines of herd's code the pass's other tests all
# reach (tests/repeat_passes.txt says which, how they were measured, and how to remake it).
asan: asan-build
	cd $(ASAN_BUILD) && HERD_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(CTEST_JOBS) \
	  -LE '^not_in_sanitizer_pass$$'

# Every fuzz target for FUZZ_SECONDS each: executions, coverage, crashes; N passed, N failed.
fuzz: asan-build
	bash tests/fuzz/run.sh $(ASAN_BUILD) $(FUZZ_SECONDS)

# herd against MPICH (no CUDA backend, to save time) and its tests labelled mpi: those
# that launch ranks, through MPICH's own launcher, as a repeat pass (tests/testlib.sh:
# one configuration of each path), without those whose lines of herd's MPI-facing code
# the others all reach (tests/repeat_passes.txt).
# It builds what those tests run (the target mpi_pass: herd, the Python module, the MPI
# test programs), not the unit tests it never runs: 31 CPU-s instead of 54 after the
# optimised build (ccache as on a new machine).
mpich-build:
	$(call fresh,$(MPICH_BUILD))
	cmake -G "$(GENERATOR)" -S . -B $(MPICH_BUILD) -DCMAKE_BUILD_TYPE=Release -DHERD_MPI=mpich -DHERD_CUDA=OFF >/dev/null
	@cmake --build $(MPICH_BUILD) -j $(JOBS) --target mpi_pass

mpich:
	@if command -v mpicc.mpich >/dev/null; then \
	  $(MAKE) --no-print-directory mpich-build && \
	  cd $(MPICH_BUILD) && HERD_TEST_REPEAT=1 ctest --output-on-failure -j $(CTEST_JOBS) -L mpi \
	    -LE '^not_in_mpich_pass$$'; \
	else \
	  echo "make test: skipped the MPICH build and its MPI tests: MPICH is not installed (apt-get install mpich libmpich-dev)"; \
	fi

# herd without MPI (-DHERD_MPI=OFF, no CUDA backend), so that the single-process build keeps
# compiling. Its quick tests only (about 80 s with the build on 2 cores): the unit tests
# but the two long training ones, which run no MPI code, and the CLI's smoke and launcher
# tests; what launches ranks skips (77) in this build.
nompi-build:
	$(call fresh,$(NOMPI_BUILD))
	cmake -G "$(GENERATOR)" -S . -B $(NOMPI_BUILD) -DCMAKE_BUILD_TYPE=Release -DHERD_MPI=OFF -DHERD_CUDA=OFF >/dev/null
	@cmake --build $(NOMPI_BUILD) -j $(JOBS)

nompi: nompi-build
	cd $(NOMPI_BUILD) && ctest --output-on-failure -j $(CTEST_JOBS) -R '^(test_|cli_smoke$$|cli_run$$|check_layers$$)' \
	  -E '^test_(train|resnet50)$$'

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: deps build
	HERD_WITH_TORCH=1 bash scripts/install-deps.sh
	bash bench/all.sh

print-run-flags:
	@echo $(RUN_FLAGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(MPICH_BUILD) $(NOMPI_BUILD)

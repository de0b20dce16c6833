# oscar - one entry point.
#
#   make            build liboscar, the tools and the tests (CPU; CUDA if nvcc is found)
#   make test       install what is missing (make deps), build, run every test,
#                   then rebuild with ASan/UBSan and run the unit tests again
#   make check      the sanitizer build and its unit tests only
#   make fuzz       libFuzzer targets for every parser, FUZZ_SECONDS each
#   make bench      CPU benchmarks (results go to stdout; see BENCHMARKS.md)
#   make demo       the main job on the default model and corpus
#   make deps       Debian packages, the oracle venv, SmolLM2-135M, the corpora
#   make clean
#
# Knobs: CUDA=auto|0|1  WERROR=0|1  SAN=0|1  OSCAR_CACHE=dir  FUZZ_SECONDS=n

CC          ?= gcc
CUDA        ?= auto
WERROR      ?= 0
SAN         ?= 0
FUZZ_SECONDS ?= 10
OSCAR_CACHE ?= $(HOME)/.cache/oscar
export OSCAR_CACHE

ifneq ($(filter-out auto 0 1,$(CUDA)),)
$(error CUDA must be auto, 0 or 1 (got '$(CUDA)'))
endif
ifneq ($(filter-out 0 1,$(SAN)),)
$(error SAN must be 0 or 1 (got '$(SAN)'))
endif

NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),auto)
  ifneq ($(NVCC),)
    USE_CUDA := 1
  else
    USE_CUDA := 0
    $(info nvcc not found, skipping CUDA)
  endif
else
  USE_CUDA := $(CUDA)
endif
ifeq ($(USE_CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found)
  endif
endif

ifeq ($(SAN),1)
  B        := build-san
  OPTFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  SANLINK  := -fsanitize=address,undefined
  USE_CUDA := 0
else
  B        := build
  OPTFLAGS := -O2 -g
  SANLINK  :=
endif

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wcast-qual -Wdouble-promotion -Werror=implicit-function-declaration
ifeq ($(WERROR),1)
  WARN += -Werror
endif

PKGS     := hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto yaml-0.1
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CPPFLAGS += -D_GNU_SOURCE -I. -Ilib $(PKG_CFLAGS)
CFLAGS   += -std=c11 -fopenmp $(OPTFLAGS) $(WARN)
LDLIBS   += $(PKG_LIBS) -lm -lpthread

CUDA_ARCH ?= 90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS ?= -O3 -std=c++17 -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
             -gencode arch=compute_$(CUDA_ARCH),code=compute_$(CUDA_ARCH) -Xcompiler -Wall,-Wextra -I. -Ilib
ifeq ($(USE_CUDA),1)
  CPPFLAGS += -DOSCAR_USE_CUDA
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
endif

LIB_SRC   := $(sort $(wildcard lib/*.c lib/*/*.c formats/*.c))
CMD_SRC   := $(sort $(wildcard cmd/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test-*.c))
TOOL_SRC  := $(sort $(wildcard tests/tools/*.c datasets/*.c))
BENCH_SRC := $(sort $(wildcard tests/bench/bench-*.c))
CU_SRC    := $(sort $(wildcard kernels/*.cu))

LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
ifeq ($(USE_CUDA),1)
  LIB_OBJ += $(CU_SRC:%.cu=$(B)/obj/%.o)
endif
LIBOSCAR := $(B)/liboscar.a
CMDS     := $(CMD_SRC:cmd/%.c=$(B)/bin/%)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
TOOLS    := $(foreach s,$(TOOL_SRC),$(B)/bin/$(basename $(notdir $(s))))
BENCHES  := $(BENCH_SRC:tests/bench/%.c=$(B)/bin/%)

.PHONY: all test check fuzz bench demo deps clean unit gpu-check FORCE
all: $(LIBOSCAR) $(CMDS) $(TESTS) $(TOOLS) $(BENCHES)

# The commit in --version and in artifacts: a header rewritten only when it
# changes, so a new commit recompiles lib/util/version.c and nothing else.
BUILD_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(B)/gen/build-commit.h: FORCE
	@mkdir -p $(dir $@)
	@echo '#define OSCAR_BUILD_COMMIT "$(BUILD_COMMIT)"' > $@.tmp
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
$(B)/obj/lib/util/version.o: $(B)/gen/build-commit.h
$(B)/obj/lib/util/version.o: CPPFLAGS += -I$(B)/gen

# Objects depend on a stamp of the build configuration, so switching CUDA=0/1
# in the same build folder rebuilds instead of mixing stale objects.
BUILD_CONFIG := cuda=$(USE_CUDA) cc=$(CC)
$(B)/config.stamp: FORCE
	@mkdir -p $(B)
	@[ "$$(cat $@ 2>/dev/null)" = "$(BUILD_CONFIG)" ] || echo "$(BUILD_CONFIG)" > $@

$(B)/obj/%.o: %.c $(B)/config.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/obj/%.o: %.cu $(B)/config.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DOSCAR_USE_CUDA -MMD -MP -c $< -o $@

$(LIBOSCAR): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/bin/%: cmd/%.c $(LIBOSCAR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIBOSCAR) -o $@ $(SANLINK) $(LDLIBS)

$(B)/bin/%: tests/tools/%.c $(LIBOSCAR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIBOSCAR) -o $@ $(SANLINK) $(LDLIBS)

$(B)/bin/%: datasets/%.c $(LIBOSCAR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIBOSCAR) -o $@ $(SANLINK) $(LDLIBS)

$(B)/bin/%: tests/bench/%.c $(LIBOSCAR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIBOSCAR) -o $@ $(SANLINK) $(LDLIBS)

$(B)/tests/%: tests/unit/%.c $(LIBOSCAR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIBOSCAR) -o $@ $(SANLINK) $(LDLIBS) -lcmocka

# ---- tests -------------------------------------------------------------------
# tests/run-tests.sh runs every unit binary, the oracle comparisons and the
# integration scripts, and prints the closing "N passed, N failed" line.
unit: all
	OSCAR_BUILD=$(B) bash tests/run-tests.sh --unit-only

test: deps
	$(MAKE) all
	$(MAKE) SAN=1 all
	$(MAKE) $(FUZZ_BINS)
	OSCAR_BUILD=build OSCAR_SAN_BUILD=build-san OSCAR_FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/run-tests.sh

check:
	$(MAKE) SAN=1 all
	OSCAR_BUILD=build-san bash tests/run-tests.sh --unit-only

# libFuzzer targets: the library is compiled once with clang's coverage and
# sanitizer instrumentation, then each tests/fuzz/fuzz-*.c links against it.
# Undefined behaviour aborts the run like a memory error does.
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz-*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_OBJ  := $(LIB_SRC:%.c=build-fuzz/obj/%.o)
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -I. -Ilib $(PKG_CFLAGS) -g -O1 -fopenmp -fno-sanitize-recover=undefined

build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@

build-fuzz/liboscar-fuzz.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^

build-fuzz/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/fuzz-common.h build-fuzz/liboscar-fuzz.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined $< build-fuzz/liboscar-fuzz.a -o $@ $(PKG_LIBS) -lm -lpthread

fuzz: $(FUZZ_BINS)
	OSCAR_FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/run-fuzz.sh

bench: all
	bash tests/bench/run-bench.sh

# On the GPU machine: build with CUDA, compare every kernel with the CPU
# reference, run compute-sanitizer and the benchmarks.
gpu-check:
	bash tests/gpu/gpu-check.sh

demo: deps all
	bash examples/demo.sh

deps:
	bash datasets/deps.sh

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d)
-include $(FUZZ_OBJ:.o=.d)

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
#   make man        man pages generated from each tool's --help (help2man), in build/man
#   make install    the tools, liboscar.a, oscar.h, oscar.pc, man pages, bash completion
#                   into $(DESTDIR)$(PREFIX) (PREFIX=/usr/local)
#   make uninstall  removes what install put there (same PREFIX and DESTDIR)
#   make clean
#
# Knobs: CUDA=auto|0|1  MPI=auto|0|1  WERROR=0|1  SAN=0|1  OSCAR_CACHE=dir  FUZZ_SECONDS=n
#        PREFIX=dir  DESTDIR=dir (staging root for packagers)

CC          ?= gcc
CUDA        ?= auto
MPI         ?= auto
WERROR      ?= 0
SAN         ?= 0
FUZZ_SECONDS ?= 10
OSCAR_CACHE ?= $(HOME)/.cache/oscar
export OSCAR_CACHE

ifneq ($(filter-out auto 0 1,$(CUDA)),)
$(error CUDA must be auto, 0 or 1 (got '$(CUDA)'))
endif
ifneq ($(filter-out auto 0 1,$(MPI)),)
$(error MPI must be auto, 0 or 1 (got '$(MPI)'))
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

# Open MPI (Debian libopenmpi-dev) for data-parallel calibration under mpirun (lib/calibrate/dp-mpi.c)
HAVE_MPI := $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),auto)
  USE_MPI := $(HAVE_MPI)
  ifeq ($(USE_MPI),0)
    $(info Open MPI (pkg-config ompi-c) not found, building without MPI)
  endif
else
  USE_MPI := $(MPI)
endif
ifeq ($(USE_MPI)$(HAVE_MPI),10)
  $(error MPI=1 but pkg-config does not find ompi-c (Debian: libopenmpi-dev))
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

SYS_LIBS   := -lm -lpthread

CPPFLAGS += -D_GNU_SOURCE -I. -Ilib $(PKG_CFLAGS)
CFLAGS   += -std=c11 -fopenmp $(OPTFLAGS) $(WARN)
LDLIBS   += $(PKG_LIBS) $(SYS_LIBS)

CUDA_ARCH ?= 90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS ?= -O3 -std=c++17 -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
             -gencode arch=compute_$(CUDA_ARCH),code=compute_$(CUDA_ARCH) -Xcompiler -Wall,-Wextra -I. -Ilib
ifeq ($(USE_MPI),1)
  MPI_CFLAGS := $(shell pkg-config --cflags ompi-c)
  MPI_LIBS   := $(shell pkg-config --libs ompi-c)
  CPPFLAGS   += -DOSCAR_USE_MPI $(MPI_CFLAGS)
  LDLIBS     += $(MPI_LIBS)
endif
ifeq ($(USE_CUDA),1)
  CPPFLAGS  += -DOSCAR_USE_CUDA
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
  LDLIBS    += $(CUDA_LIBS)
  CUDA_INC  := -I$(CUDA_HOME)/include
endif

# NCCL (NCCL=1, off by default): the GPU engine of data-parallel calibration (lib/calibrate/dp-nccl.c),
# needs CUDA=1 and MPI (its bootstrap). nccl.h and libnccl.so.2 under NCCL_HOME, by default the pip
# wheel nvidia-nccl-cu13 (torch's dependency) in python3's site-packages: NCCL_HOME/{include,lib}.
NCCL ?= 0
ifeq ($(NCCL),1)
  ifneq ($(USE_CUDA)$(USE_MPI),11)
    $(error NCCL=1 needs CUDA (nvcc) and Open MPI (the bootstrap): make CUDA=1 MPI=1 NCCL=1)
  endif
  NCCL_HOME ?= $(shell python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || \
                 python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"] + "/nvidia/nccl")')
  ifeq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
    $(error NCCL=1 but $(NCCL_HOME)/include/nccl.h is missing: set NCCL_HOME (pip install nvidia-nccl-cu13))
  endif
  CPPFLAGS += -DOSCAR_USE_NCCL
  NCCL_LIBS := -L$(NCCL_HOME)/lib -l:libnccl.so.2 -Wl,-rpath,$(NCCL_HOME)/lib
  LDLIBS    += $(NCCL_LIBS)
$(B)/obj/lib/calibrate/dp-nccl.o: CPPFLAGS += -I$(NCCL_HOME)/include
else ifneq ($(NCCL),0)
  $(error NCCL must be 0 or 1 (got '$(NCCL)'))
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

.PHONY: all test check fuzz bench demo deps man install uninstall clean unit gpu-check FORCE
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
BUILD_CONFIG := cuda=$(USE_CUDA) mpi=$(USE_MPI) nccl=$(NCCL) cc=$(CC)
$(B)/config.stamp: FORCE
	@mkdir -p $(B)
	@[ "$$(cat $@ 2>/dev/null)" = "$(BUILD_CONFIG)" ] || echo "$(BUILD_CONFIG)" > $@

# C files that call the CUDA runtime's C API (a rank's GPU, the NCCL engine)
$(B)/obj/lib/calibrate/dp-device.o $(B)/obj/lib/calibrate/dp-nccl.o: CPPFLAGS += $(CUDA_INC)

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

# The build's compiler lines go to stderr: stdout is the demo's own report.
demo: deps
	@$(MAKE) --no-print-directory all >&2
	@bash examples/demo.sh

deps:
	@bash datasets/deps.sh

# ---- install -----------------------------------------------------------------
# make install PREFIX=/usr/local DESTDIR= : installs from $(B) what is built
# there (it builds only what is missing or stale, never the tests).
PREFIX       ?= /usr/local
DESTDIR      ?=
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASHCOMPDIR  ?= $(PREFIX)/share/bash-completion/completions

INSTALL_TOOLS := oscar-calibrate oscar-verify oscar-zoo
INSTALL_BINS  := $(INSTALL_TOOLS:%=$(B)/bin/%)
MAN_PAGES     := $(INSTALL_TOOLS:%=$(B)/man/%.1)
OSCAR_VERSION := $(shell sed -n 's/^.define OSCAR_VERSION "\(.*\)"/\1/p' lib/util/version.h)

# The headers oscar.h needs, found by the compiler (so the list cannot go
# stale), installed as include/oscar/<dir>/<name>.h next to include/oscar.h.
PUBLIC_HDRS  := $(sort $(filter-out lib/oscar.h,$(filter %.h,$(shell $(CC) -MM -I. -Ilib -x c lib/oscar.h 2>/dev/null))))
HDR_NAMES    := $(patsubst lib/%,oscar/%,$(patsubst formats/%,oscar/formats/%,$(PUBLIC_HDRS)))
STAGED_HDRS  := $(B)/include/oscar.h $(HDR_NAMES:%=$(B)/include/%)
HDR_DIRS     := $(sort $(patsubst %/,%,$(dir $(HDR_NAMES))))

# In the tree, headers include each other as "util/error.h" (-Ilib) or
# "formats/x.h" (-I.). Installed, each include becomes relative to the file
# itself ("oscar/util/error.h" from oscar.h, "../util/error.h" from a header
# one directory below include/oscar), so <oscar.h> needs only -I$(INCLUDEDIR).
INCLUDE_LINE := ^\([[:space:]]*\#[[:space:]]*include[[:space:]]*\)"\([^"]*/[^"]*\)"
$(B)/include/oscar.h: lib/oscar.h
	@mkdir -p $(dir $@)
	sed 's|$(INCLUDE_LINE)|\1"oscar/\2"|' $< > $@.tmp && mv $@.tmp $@
$(B)/include/oscar/formats/%.h: formats/%.h
	@mkdir -p $(dir $@)
	sed 's|$(INCLUDE_LINE)|\1"../\2"|' $< > $@.tmp && mv $@.tmp $@
$(B)/include/oscar/%.h: lib/%.h
	@mkdir -p $(dir $@)
	sed 's|$(INCLUDE_LINE)|\1"../\2"|' $< > $@.tmp && mv $@.tmp $@

# oscar.pc: paths under PREFIX are written as ${prefix}/..., so
# --define-variable=prefix=... relocates the whole package. The public headers
# include only standard headers: Cflags needs no dependency's flags.
PC_SUBST = -e 's|@prefix@|$(PREFIX)|' \
           -e 's|@libdir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
           -e 's|@includedir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|' \
           -e 's|@version@|$(OSCAR_VERSION)|' \
           -e 's|@pkgs@|$(PKGS)|' \
           -e 's|@libs_private@|-fopenmp $(strip $(PKG_LIBS) $(SYS_LIBS) $(CUDA_LIBS) $(MPI_LIBS))|'
$(B)/oscar.pc: packaging/oscar.pc.in FORCE
	@mkdir -p $(dir $@)
	@sed $(PC_SUBST) $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi

# Man pages from the binary's own --help, plus the sections in
# packaging/man/TOOL.h2m. The footer gives OSCAR_VERSION without the commit
# --version adds (it left no room for the date) and the date of the last
# commit, so a rebuild of the same commit gives the same page.
# A tool with subcommands (oscar-zoo) gets each command's --help in a COMMANDS
# section (packaging/man/subcommands.sh).
$(B)/man/%.1: $(B)/bin/% packaging/man/%.h2m packaging/man/subcommands.sh
	@mkdir -p $(dir $@)
	bash packaging/man/subcommands.sh ./$< $@.commands.h2m
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) \
	  help2man --no-info --version-string=$(OSCAR_VERSION) --include=packaging/man/$*.h2m \
	  $$([ -s $@.commands.h2m ] && echo --include=$@.commands.h2m) --output=$@.tmp ./$< \
	  && mv $@.tmp $@ && rm -f $@.commands.h2m

man: $(MAN_PAGES)

install: $(LIBOSCAR) $(INSTALL_BINS) $(MAN_PAGES) $(STAGED_HDRS) $(B)/oscar.pc
	install -d -m 755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR) $(HDR_DIRS:%=$(DESTDIR)$(INCLUDEDIR)/%) \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR)
	install -m 755 $(INSTALL_BINS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIBOSCAR) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(B)/oscar.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 644 $(B)/include/oscar.h $(DESTDIR)$(INCLUDEDIR)/
	@for h in $(HDR_NAMES); do \
	  echo "install -m 644 $(B)/include/$$h $(DESTDIR)$(INCLUDEDIR)/$$h"; \
	  install -m 644 $(B)/include/$$h $(DESTDIR)$(INCLUDEDIR)/$$h || exit 1; \
	done
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	@for t in $(INSTALL_TOOLS); do \
	  echo "install -m 644 packaging/oscar.bash-completion $(DESTDIR)$(BASHCOMPDIR)/$$t"; \
	  install -m 644 packaging/oscar.bash-completion $(DESTDIR)$(BASHCOMPDIR)/$$t || exit 1; \
	done

# Exactly the files install writes; of the directories only oscar's own header
# directories go, and only when empty.
uninstall:
	rm -f $(INSTALL_TOOLS:%=$(DESTDIR)$(BINDIR)/%) \
	  $(DESTDIR)$(LIBDIR)/liboscar.a $(DESTDIR)$(PKGCONFIGDIR)/oscar.pc \
	  $(DESTDIR)$(INCLUDEDIR)/oscar.h $(HDR_NAMES:%=$(DESTDIR)$(INCLUDEDIR)/%) \
	  $(INSTALL_TOOLS:%=$(DESTDIR)$(MANDIR)/man1/%.1) \
	  $(INSTALL_TOOLS:%=$(DESTDIR)$(BASHCOMPDIR)/%)
	@for d in $(HDR_DIRS:%=$(DESTDIR)$(INCLUDEDIR)/%) $(DESTDIR)$(INCLUDEDIR)/oscar; do \
	  if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || echo "uninstall: kept $$d (not empty)"; fi; \
	done

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d)
-include $(FUZZ_OBJ:.o=.d)

# Builds mca_coll_ipmc.so against an installed Open MPI, outside an Open MPI
# source tree (the in-tree build uses Makefile.am instead):
#
#   make -f standalone.mk                      # build into build/
#   make -f standalone.mk install              # install into ~/.openmpi/components
#   make -f standalone.mk install DESTDIR=dir  # ... or into any directory
#
# Open MPI is found through its wrapper compiler (MPICC). A build belongs to
# that Open MPI: building again with another MPICC rebuilds the glue and the
# DSO (one BUILD directory per Open MPI keeps both builds).

MPICC   ?= mpicc
CARGO   ?= cargo
CC      ?= cc
DESTDIR ?= $(HOME)/.openmpi/components
BUILD   ?= build

OMPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
OMPI_LIBDIR := $(firstword $(shell $(MPICC) --showme:libdirs 2>/dev/null))
# Open MPI 4.1 has libopen-rte; 5.0 (PRRTE) has none, and its modex calls
# are PMIx's own (libpmix, bundled or the system's).
OMPI_VERSION := $(shell command -v $(MPICC) >/dev/null && $(MPICC) --showme:version 2>&1)
OMPI_LIBS := -lmpi -lopen-pal $(if $(wildcard $(OMPI_LIBDIR)/libopen-rte.so),-lopen-rte,-lpmix)
# Finds that Open MPI's libraries wherever it is installed; a distribution's
# package, whose libraries are on the linker's path, sets it empty.
RPATH ?= -Wl,-rpath,$(OMPI_LIBDIR)
# What `rustc --print native-static-libs` lists for a staticlib on Linux.
RUST_NATIVE_LIBS = -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu99 -fPIC -Wall -Wextra -Wno-unused-parameter
GLUE     = coll_ipmc_component coll_ipmc_module coll_ipmc_persistent coll_ipmc_pvars ipmc_glue
GLUE_OBJ = $(GLUE:%=$(BUILD)/%.o)
# Cargo's own variable, so that a build elsewhere can share a target directory.
CARGO_TARGET_DIR ?= target
export CARGO_TARGET_DIR
RUST_LIB = $(CARGO_TARGET_DIR)/release/libipmc.a
DSO      = $(BUILD)/mca_coll_ipmc.so
HELP     = ompi-glue/help-coll-ipmc.txt

all: $(DSO) $(BUILD)/help-coll-ipmc.txt

$(BUILD):
	mkdir -p $@

# What the glue was compiled against; rewritten only when it changes, so that
# a change of Open MPI rebuilds everything that depends on it. Before it is
# written, the build stops with a message where that Open MPI cannot build a
# component: no wrapper compiler, or no internal headers (a distribution's
# runtime package alone; a source build without --with-devel-headers).
OMPI_STAMP = $(BUILD)/openmpi.stamp
OMPI_ID    = $(MPICC) | $(OMPI_VERSION) | $(OMPI_CFLAGS) | $(OMPI_LIBDIR) | $(OMPI_LIBS) | $(RPATH)
$(OMPI_STAMP): FORCE | $(BUILD)
	@echo '$(OMPI_ID)' | cmp -s - $@ || { \
	    command -v $(MPICC) >/dev/null 2>&1 || { \
	        echo "standalone.mk: no Open MPI wrapper compiler '$(MPICC)': install Open MPI with its development files (libopenmpi-dev on Debian), or name its mpicc with MPICC=" >&2; \
	        exit 1; }; \
	    echo '#include "ompi_config.h"' | $(CC) $(CPPFLAGS) $(OMPI_CFLAGS) -E -x c - >/dev/null 2>&1 || { \
	        echo "standalone.mk: the Open MPI of $(MPICC) ($(OMPI_VERSION)) has no internal headers where it looks ($(OMPI_CFLAGS)); a component is built against them: libopenmpi-dev on Debian, --with-devel-headers for a source build" >&2; \
	        exit 1; }; \
	    echo '$(OMPI_ID)' > $@; }

$(BUILD)/%.o: ompi-glue/%.c ompi-glue/coll_ipmc.h ompi-glue/ipmc_glue.h ompi-glue/ipmc_compat.h \
    mca-params/ipmc_params.def $(OMPI_STAMP) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(OMPI_CFLAGS) -idirafter ompi-glue/include-fallback -c $< -o $@

# Cargo knows what changed; let it decide every time.
$(RUST_LIB): FORCE
	$(CARGO) build --release --locked

$(DSO): $(GLUE_OBJ) $(RUST_LIB) ompi-glue/ipmc.map $(OMPI_STAMP)
	$(CC) -shared -fPIC $(LDFLAGS) -o $@ $(GLUE_OBJ) $(RUST_LIB) \
	    -Wl,-soname,mca_coll_ipmc.so -Wl,--version-script=ompi-glue/ipmc.map \
	    -Wl,--gc-sections -Wl,-z,nodelete -Wl,-z,defs \
	    -L$(OMPI_LIBDIR) $(RPATH) $(OMPI_LIBS) $(RUST_NATIVE_LIBS)

$(BUILD)/help-coll-ipmc.txt: $(HELP) | $(BUILD)
	cp $< $@

install: all
	mkdir -p "$(DESTDIR)"
	install -m 0755 $(DSO) "$(DESTDIR)/mca_coll_ipmc.so"
	install -m 0644 $(HELP) "$(DESTDIR)/help-coll-ipmc.txt"

clean:
	rm -rf $(BUILD)
	$(CARGO) clean

.PHONY: all install clean FORCE

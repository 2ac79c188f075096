# Stargate — plain Makefile.  See README.md.
#
#   make            build libstargate.{a,so}, stargate.pc and the programs (build/)
#   make test       sanitizer build (build/san/), every unit and bats test, lint
#   make demo       the main job: the whole stack on loopback, driven by the openai client
#   make lint       mandoc -Tlint on every page
#   make install    PREFIX=/usr/local DESTDIR=
#
# Sources are discovered, not listed: every libstargate/*.c and store/*.c is a
# library module, every bin/<prog>.c a program, every tools/<prog>/ directory
# with a main.c a tool, every tests/unit/test_*.c a unit test.

VERSION   = 0.1.0
PREFIX   ?= /usr/local
BINDIR    = $(PREFIX)/bin
SBINDIR   = $(PREFIX)/sbin
LIBDIR    = $(PREFIX)/lib
INCDIR    = $(PREFIX)/include/stargate
MANDIR    = $(PREFIX)/share/man
PKG_CONFIG ?= pkg-config

DEPS      = jansson libsodium lmdb libxxhash libevent libcurl hiredis
TESTDEPS  = cmocka
# stargate.pc: what libstargate itself links (readelf -d build/libstargate.so).
# Requires: the public headers use json_t; Requires.private: the rest.
PC_REQUIRES         = jansson
PC_REQUIRES_PRIVATE = libsodium lmdb libxxhash libevent hiredis
PC_SED = -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
         -e 's|@REQUIRES@|$(PC_REQUIRES)|' \
         -e 's|@REQUIRES_PRIVATE@|$(PC_REQUIRES_PRIVATE)|'
# Debian packages that provide the above (installed by `make deps`).
DEB_PKGS  = build-essential pkg-config libjansson-dev libsodium-dev liblmdb-dev \
            lmdb-utils libxxhash-dev libevent-dev libcurl4-openssl-dev \
            libhiredis-dev libcmocka-dev bats bats-support bats-assert \
            mandoc jq redis-server curl python3 python3-prometheus-client iproute2

O        ?= build
SANITIZE  =

DEPCFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEPS) 2>/dev/null)
DEPLIBS   := $(shell $(PKG_CONFIG) --libs $(DEPS) 2>/dev/null) -lpthread -lm
# The shared library links its own dependencies only (those stargate.pc
# names), not the programs' (libcurl), whatever the linker's --as-needed.
LIBDEPLIBS:= $(shell $(PKG_CONFIG) --libs $(PC_REQUIRES) $(PC_REQUIRES_PRIVATE) 2>/dev/null) -lpthread -lm
TESTCFLAGS:= $(shell $(PKG_CONFIG) --cflags $(TESTDEPS) 2>/dev/null)
TESTLIBS  := $(shell $(PKG_CONFIG) --libs $(TESTDEPS) 2>/dev/null)

SG_CPPFLAGS = -Ilibstargate -Istore -Itools -D_DEFAULT_SOURCE -D_GNU_SOURCE \
              -DSG_VERSION='"$(VERSION)"' $(DEPCFLAGS) $(CPPFLAGS)
SG_CFLAGS   = -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -fPIC -g -O2 $(SANITIZE) $(CFLAGS)
SG_LDFLAGS  = $(SANITIZE) $(LDFLAGS)

LIBSRC   := $(sort $(wildcard libstargate/*.c store/*.c))
LIBHDR   := $(sort $(wildcard libstargate/*.h store/*.h))
PUBHDR   := $(filter-out %_internal.h,$(LIBHDR))
LIBOBJ   := $(LIBSRC:%.c=$(O)/%.o)
PROGSRC  := $(sort $(wildcard bin/*.c))
PROGS    := $(PROGSRC:bin/%.c=$(O)/bin/%)
# A multi-file program is a directory bin/<prog>/ with a main.c: every .c
# file in it, plus bin/common/*.c.
MPROGDIRS:= $(sort $(patsubst %/main.c,%,$(wildcard bin/*/main.c)))
MPROGS   := $(MPROGDIRS:bin/%=$(O)/bin/%)
MPROGHDR := $(sort $(wildcard bin/*/*.h))
# Every program also links the shared program code in bin/common/.
TOOLCOMMON := $(sort $(wildcard tools/common/*.c))
TOOLHDR    := $(sort $(wildcard tools/*/*.h))
PROGCOMMON := $(sort $(wildcard bin/common/*.c))
PROGHDR    := $(sort $(wildcard bin/common/*.h))
PROGCOMMONOBJ := $(PROGCOMMON:%.c=$(O)/%.o)
TOOLDIRS := $(sort $(patsubst %/main.c,%,$(wildcard tools/*/main.c)))
TOOLS    := $(TOOLDIRS:tools/%=$(O)/bin/%)
UNITSRC  := $(sort $(wildcard tests/unit/test_*.c))
UNITS    := $(UNITSRC:tests/unit/%.c=$(O)/tests/%)
MANPAGES := $(sort $(wildcard man/*.[1-8]))

# depcheck may install packages, so the build itself runs in a fresh make
# that reads pkg-config's answers after the install.
all: depcheck
	@$(MAKE) --no-print-directory build

build: $(O)/libstargate.a $(O)/libstargate.so $(O)/stargate.pc $(PROGS) $(MPROGS) $(TOOLS)

# --- dependencies ---------------------------------------------------------
# Say which Debian packages are missing; install them when we are root and
# apt-get exists (so the README's commands work on a fresh machine).
# `make` needs the build dependencies only; `make test` and `make demo` also
# need the test tools (DEPCHECK_TEST=1).
DEPCHECK_TEST ?=
depcheck:
	@missing=""; \
	for p in $(DEPS) $(if $(DEPCHECK_TEST),$(TESTDEPS)); do \
	  $(PKG_CONFIG) --exists $$p 2>/dev/null || missing="$$missing $$p"; done; \
	for c in $(if $(DEPCHECK_TEST),bats mandoc jq mdb_stat curl node npm); do \
	  command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$(DEPCHECK_TEST)" ] && ! /usr/bin/python3 -c 'import prometheus_client' \
	    >/dev/null 2>&1; then missing="$$missing python3-prometheus-client"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "stargate: missing dependencies:$$missing"; \
	  echo "stargate: install with: apt-get install $(DEB_PKGS)"; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "stargate: running apt-get as root"; \
	    $(MAKE) --no-print-directory deps || exit 1; \
	  else exit 1; fi; \
	fi

deps:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_PKGS)
	@# Node.js for the demo's openai client: Debian's only where none is
	@# installed (Debian's npm would replace a newer nodejs package).
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm

.PHONY: all build depcheck deps test check units lint demo install uninstall clean bench

# --- library --------------------------------------------------------------
$(O)/%.o: %.c $(LIBHDR) $(TOOLHDR) $(PROGHDR) $(MPROGHDR) Makefile
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) $(SG_CFLAGS) -c -o $@ $<

$(O)/libstargate.a: $(LIBOBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $(LIBOBJ)

$(O)/libstargate.so: $(LIBOBJ)
	$(CC) -shared -Wl,-soname,libstargate.so.0 $(SG_LDFLAGS) -o $@ $(LIBOBJ) $(LIBDEPLIBS)

$(O)/stargate.pc: stargate.pc.in Makefile
	sed $(PC_SED) stargate.pc.in > $@

# --- programs and tools ---------------------------------------------------
$(PROGS): $(O)/bin/%: $(O)/bin/%.o $(PROGCOMMONOBJ) $(O)/libstargate.a
	$(CC) $(SG_LDFLAGS) -o $@ $< $(PROGCOMMONOBJ) $(O)/libstargate.a $(DEPLIBS)

# A tool is every .c file in tools/<name>/ plus the shared tools/common/*.c.
.SECONDEXPANSION:
# (No % inside: a pattern rule would put the stem there.)
$(TOOLS): $(O)/bin/%: $$(addprefix $(O)/,$$(subst .c,.o,$$(wildcard tools/$$*/*.c) $(TOOLCOMMON))) $(O)/libstargate.a
	@mkdir -p $(@D)
	$(CC) $(SG_LDFLAGS) -o $@ $(filter %.o,$^) $(O)/libstargate.a $(DEPLIBS)

# Their objects live under $(O)/obj/, away from the program's own name.
$(O)/obj/%.o: %.c $(LIBHDR) $(PROGHDR) $(MPROGHDR) Makefile
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) $(SG_CFLAGS) -c -o $@ $<

$(MPROGS): $(O)/bin/%: $$(addprefix $(O)/obj/,$$(subst .c,.o,$$(wildcard bin/$$*/*.c))) $(PROGCOMMONOBJ) $(O)/libstargate.a
	@mkdir -p $(@D)
	$(CC) $(SG_LDFLAGS) -o $@ $(filter %.o,$^) $(O)/libstargate.a $(DEPLIBS)

# The allocation-failure shim (tools/allocfail/README): an LD_PRELOAD
# object, never sanitized (it sits in front of whichever allocator runs).
build: $(O)/lib/allocfail.so
$(O)/lib/allocfail.so: tools/allocfail/allocfail.c Makefile
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow \
	    -Wstrict-prototypes -Wmissing-prototypes -fPIC -g -O2 -fno-builtin \
	    -fno-omit-frame-pointer \
	    -shared -o $@ tools/allocfail/allocfail.c -ldl -lpthread

# --- tests ----------------------------------------------------------------
# Unit tests link the library and the tools' shared modules (tools/common/).
$(O)/tests/%: tests/unit/%.c tests/unit/sg_test.h $(TOOLCOMMON:%.c=$(O)/%.o) $(O)/libstargate.a
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) $(SG_CFLAGS) $(TESTCFLAGS) -o $@ $< \
	    $(TOOLCOMMON:%.c=$(O)/%.o) $(O)/libstargate.a $(TESTLIBS) $(DEPLIBS)

# test_sim_tree includes tools/sg-sim/sim.c for its static functions.
$(O)/tests/test_sim_tree: tools/sg-sim/sim.c tools/sg-sim/sim.h

# test_h1s drives sg-proxy's HTTP/1.1 server object on a real loop.
$(O)/tests/test_h1s: tests/unit/test_h1s.c tests/unit/sg_test.h $(O)/obj/bin/sg-proxy/h1s.o $(O)/libstargate.a
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) -Ibin $(SG_CFLAGS) $(TESTCFLAGS) -o $@ $< \
	    $(O)/obj/bin/sg-proxy/h1s.o $(O)/libstargate.a $(TESTLIBS) $(DEPLIBS)

SAN = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# `make test`: the whole suite on a sanitizer build, then one summary line.
test check:
	@$(MAKE) --no-print-directory DEPCHECK_TEST=1 depcheck
	@$(MAKE) --no-print-directory O=build/san SANITIZE='$(SAN)' build units
	@O=build/san SG_SANITIZE='$(SAN)' tests/run

units: $(UNITS)

lint:
	@out=$$(mandoc -Tlint -W warning $(MANPAGES) 2>&1); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi; echo "lint: $(words $(MANPAGES)) pages clean"

# `make bench`: every side-by-side comparison, one Markdown report with SVG
# charts (tools/sg-bench/report.sh; BENCH_ARGS e.g. "-r 7 -o dir" or "-q").
bench: all
	sh tools/sg-bench/report.sh -b $(O)/bin $(BENCH_ARGS)

# --- fuzzing (tests/fuzz/) ------------------------------------------------
# Every tests/fuzz/fuzz_<name>.c is a libFuzzer target.  `make fuzz` builds
# them with Debian's clang into $(FUZZ_O) and runs each for FUZZ_TIME
# seconds from its committed seeds (tests/fuzz/corpus/<name>/;
# FUZZ_TARGETS picks some, FUZZ_MERGE=1 merges new finds into the seeds).
# The sanitizer build links each target to tests/fuzz/driver.c instead, so
# `make test` replays every corpus once (tests/run).
FUZZ_TIME ?= 60
FUZZ_CC   ?= clang
FUZZ_O    ?= build/fz
FUZZ_TARGETS ?=
FUZZ_SAN   = -fsanitize=fuzzer-no-link,address,undefined \
             -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS ?=
FUZZSRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZDRIVERS := $(FUZZSRC:tests/fuzz/%.c=$(O)/tests/fuzz/%)
FUZZERS   := $(FUZZSRC:tests/fuzz/%.c=$(O)/fuzz/%)
# A target built from a program's source also links the programs' code
# (before the target's own object: see FZ_RESTORE_ARGV0 in fuzz.h).
FUZZ_EXTRA_fuzz_route_stream = $(PROGCOMMONOBJ)
FUZZ_EXTRA_fuzz_h1 = $(O)/obj/bin/sg-proxy/h1.o
FUZZ_EXTRA_fuzz_h1s = $(O)/obj/bin/sg-proxy/h1s.o
# fuzz_proxy runs sg-proxy's main() on a thread: every sg-proxy object but
# main.o, main.c again with main renamed, and the engine it forwards to.
FUZZ_PROXYOBJ := $(filter-out %/main.o,$(patsubst %.c,$(O)/obj/%.o,$(wildcard bin/sg-proxy/*.c)))
FUZZ_EXTRA_fuzz_proxy = $(FUZZ_PROXYOBJ) $(O)/fuzz/sg-proxy-main.o $(PROGCOMMONOBJ)

units: $(FUZZDRIVERS)

$(FUZZDRIVERS): $(O)/tests/fuzz/%: tests/fuzz/%.c tests/fuzz/driver.c tests/fuzz/fuzz.h $(O)/libstargate.a $$(FUZZ_EXTRA_$$*)
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) -Ibin -Itests/fuzz $(SG_CFLAGS) -o $@ \
	    $(FUZZ_EXTRA_$*) $< tests/fuzz/driver.c $(O)/libstargate.a $(DEPLIBS)

$(FUZZERS): $(O)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(O)/libstargate.a $$(FUZZ_EXTRA_$$*)
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) -Ibin -Itests/fuzz $(SG_CFLAGS) -fsanitize=fuzzer \
	    -o $@ $(FUZZ_EXTRA_$*) $< $(O)/libstargate.a $(DEPLIBS)

$(O)/fuzz/sg-proxy-main.o: bin/sg-proxy/main.c $(LIBHDR) $(PROGHDR) $(MPROGHDR) Makefile
	@mkdir -p $(@D)
	$(CC) $(SG_CPPFLAGS) $(SG_CFLAGS) -Wno-missing-prototypes \
	    -Dmain=sg_proxy_main -c -o $@ $<

$(O)/fuzz/fuzz_proxy $(O)/tests/fuzz/fuzz_proxy: $(O)/bin/sg-mockengine

fuzz-build: $(FUZZERS)

fuzz:
	@$(MAKE) --no-print-directory O=$(FUZZ_O) CC=$(FUZZ_CC) \
	    SANITIZE='$(FUZZ_SAN)' CFLAGS='$(FUZZ_CFLAGS)' fuzz-build
	@O=$(FUZZ_O) FUZZ_TIME=$(FUZZ_TIME) FUZZ_MERGE=$(FUZZ_MERGE) \
	    tests/fuzz/run $(FUZZ_TARGETS)

.PHONY: fuzz fuzz-build

demo:
	@$(MAKE) --no-print-directory DEPCHECK_TEST=1 depcheck
	@$(MAKE) --no-print-directory build
	@O=$(O) tools/demo.sh

# The demo's stack in the foreground for any OpenAI client (Ctrl-C stops it);
# LISTEN=ADDR:PORT moves it from 127.0.0.1:8080.
.PHONY: serve
serve:
	@$(MAKE) --no-print-directory build
	@O=$(O) tools/serve.sh

# --- install --------------------------------------------------------------
install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	    $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(MANDIR)/man8
	for p in $(PROGS) $(MPROGS) $(TOOLS); do \
	  case $$p in */sg-proxy) d=$(SBINDIR);; *) d=$(BINDIR);; esac; \
	  install -m 755 $$p $(DESTDIR)$$d/; done
	install -m 644 $(O)/libstargate.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(O)/libstargate.so $(DESTDIR)$(LIBDIR)/libstargate.so.$(VERSION)
	ln -sf libstargate.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libstargate.so.0
	ln -sf libstargate.so.0 $(DESTDIR)$(LIBDIR)/libstargate.so
	sed $(PC_SED) stargate.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/stargate.pc
	install -m 644 $(PUBHDR) $(DESTDIR)$(INCDIR)/
	install -d $(DESTDIR)$(PREFIX)/share/stargate
	install -m 755 tools/sg-bench/report.sh $(DESTDIR)$(PREFIX)/share/stargate/sg-bench-report.sh
	for m in $(MANPAGES); do s=$${m##*.}; \
	  sed 's/^\.Os.*/.Os Stargate $(VERSION)/' $$m > $(DESTDIR)$(MANDIR)/man$$s/$${m##*/}; done

uninstall:
	for p in $(notdir $(PROGS) $(MPROGS) $(TOOLS)); do rm -f $(DESTDIR)$(BINDIR)/$$p $(DESTDIR)$(SBINDIR)/$$p; done
	rm -f $(DESTDIR)$(LIBDIR)/libstargate.* $(DESTDIR)$(LIBDIR)/pkgconfig/stargate.pc
	rm -rf $(DESTDIR)$(INCDIR)
	rm -f $(DESTDIR)$(PREFIX)/share/stargate/sg-bench-report.sh
	for m in $(MANPAGES); do s=$${m##*.}; rm -f $(DESTDIR)$(MANDIR)/man$$s/$${m##*/}; done

clean:
	rm -rf build

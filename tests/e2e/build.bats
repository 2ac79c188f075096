#!/usr/bin/env bats
# build.bats — promises of the build itself: install layout, the installed
# library usable through pkg-config, and the library's discipline (no global
# mutable state, no printing, exiting or environment reads).

bats_require_minimum_version 1.5.0

# SG_SANITIZE (set by `make test`) holds the flags the build under test was
# made with, so that an install that relinks something stays consistent.
setup() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	SG_BINDIR=${SG_BINDIR:-$TOP/build/san/bin}
	O=${SG_BINDIR%/bin}
	TMP=$(mktemp -d)
}

teardown() {
	rm -rf "$TMP"
}

@test "make install lays out programs, library, headers, man pages and stargate.pc under DESTDIR" {
	run -0 make -C "$TOP" --no-print-directory O="${O#$TOP/}" \
	    SANITIZE="${SG_SANITIZE:-}" install PREFIX=/usr DESTDIR="$TMP/root"
	for p in sg-route sg-classify sg-lastcluster sg-sim sg-mockengine sg-bench; do
		[ -x "$TMP/root/usr/bin/$p" ]
	done
	[ -f "$TMP/root/usr/lib/libstargate.a" ]
	[ -f "$TMP/root/usr/lib/libstargate.so.0.1.0" ]
	[ -L "$TMP/root/usr/lib/libstargate.so" ]
	[ -f "$TMP/root/usr/lib/pkgconfig/stargate.pc" ]
	[ -f "$TMP/root/usr/include/stargate/stargate.h" ]
	[ ! -e "$TMP/root/usr/include/stargate/sg_internal.h" ]
	[ -f "$TMP/root/usr/share/man/man1/sg-route.1" ]
	[ -f "$TMP/root/usr/share/man/man5/stargate-lb-config.5" ]
	run -0 grep -q '^\.Os Stargate 0\.1\.0' "$TMP/root/usr/share/man/man1/sg-route.1"
}

@test "a program builds against the installed library through pkg-config and routes a request" {
	make -C "$TOP" --no-print-directory O="${O#$TOP/}" \
	    SANITIZE="${SG_SANITIZE:-}" install PREFIX="$TMP/root" >/dev/null
	cat >"$TMP/use.c" <<'EOF'
#include <stdio.h>
#include <stargate.h>

int
main(void)
{
	sg_lbconf *conf = NULL;
	sg_router *rt = NULL;
	sg_snapshot *snap = sg_snapshot_new();
	sg_cluster c;
	sg_request req;
	sg_decision d;
	sg_error err;
	int rc = 1;

	sg_request_init(&req);
	req.request_id = "r-1";
	req.model = "m";
	req.input_tokens = 100;
	if (snap == NULL || sg_lbconf_default(&conf, &err) != 0 ||
	    sg_router_new(&rt, conf, 0, &err) != 0)
		goto out;
	sg_cluster_init(&c, "A", 1);
	c.max_engine_concurrency = 4;
	c.last_mean_input_tps = 1000;
	if (sg_snapshot_add(snap, &c, &err) != 0 ||
	    sg_router_decide(rt, snap, &req, 0, &d, &err) != 0)
		goto out;
	printf("%s %s\n", sg_decision_kind_name(d.kind), d.cluster_id);
	rc = 0;
out:
	sg_router_free(rt);
	sg_lbconf_free(conf);
	sg_snapshot_free(snap);
	return rc;
}
EOF
	export PKG_CONFIG_PATH="$TMP/root/lib/pkgconfig"
	run -0 pkg-config --cflags --libs stargate
	# The sanitizer build's library needs the sanitizer runtime in the program.
	san=""
	case "$O" in *san*) san="-fsanitize=address,undefined" ;; esac
	run -0 cc -std=c11 $san -o "$TMP/use" "$TMP/use.c" $(pkg-config --cflags --libs stargate)
	export LD_LIBRARY_PATH="$TMP/root/lib"
	run -0 "$TMP/use"
	[ "$output" = "select A" ]
}

@test "the decision library has no global mutable state (no .data or .bss objects)" {
	found=""
	for f in "$O"/libstargate/*.o; do
		found+=$(objdump -t "$f" | awk -v f="${f##*/}" \
		    '$0 ~ / (\.data|\.bss)([ \t]|$)/ && $NF !~ /^\./ {print f": "$NF}')
	done
	[ -z "$found" ] || { echo "mutable globals: $found"; false; }
}

@test "the store's only process-global state is its documented registry and SIGBUS guard" {
	# sg_store_lmdb.c: the one-open-per-directory registry (reg_*) and the
	# SIGBUS guard's saved disposition (bus_*: a handler reaches only
	# globals); nothing else may be mutable and process-wide.
	found=""
	for f in "$O"/store/*.o; do
		found+=" "$(objdump -t "$f" | awk '$0 ~ / (\.data|\.bss)([ \t]|$)/ && $NF !~ /^\./ {print $NF}')
	done
	found=$(printf '%s\n' $found | sort | tr '\n' ' ')
	[ "$found" = "bus_mu bus_prev reg_head reg_mu " ] ||
	    { echo "unexpected globals: $found"; false; }
}

@test "the library never prints, exits, aborts or reads the environment" {
	run -1 grep -nE '\b(printf|fprintf|puts|perror|exit|_exit|abort|getenv|secure_getenv)[[:space:]]*\(' \
	    "$TOP"/libstargate/*.c "$TOP"/store/*.c
}

@test "banned functions are not used anywhere in the C sources" {
	run -1 grep -nE '\b(gets|sprintf|vsprintf|strcpy|strcat|strncpy|strtok|atoi|atol|atof)[[:space:]]*\(' \
	    "$TOP"/libstargate/*.c "$TOP"/store/*.c "$TOP"/bin/*.c "$TOP"/bin/*/*.c "$TOP"/tools/*/*.c
}

@test "stargate.pc: jansson under Requires (public headers use json_t); Requires and Requires.private name exactly the libraries libstargate.so links" {
	pc=$O/stargate.pc
	grep -qx 'Requires: jansson' "$pc"
	! grep -E '^Requires.private:.*\bjansson\b' "$pc"
	req=$(sed -n 's/^Requires\(\.private\)\{0,1\}: //p' "$pc")
	needed=$(readelf -d "$O/libstargate.so" |
	    sed -n 's/.*Shared library: \[\(lib[^.]*\)\..*/\1/p' |
	    grep -vx 'libc\|libm\|libpthread\|libasan\|libubsan' | sort -u)
	fromreq=$(for p in $req; do pkg-config --libs-only-l "$p"; done |
	    tr ' ' '\n' | sed -n 's/^-l/lib/p' | sed 's/-[0-9.]*$//' | sort -u)
	needed=$(sed 's/-[0-9.]*$//' <<<"$needed" | sort -u)
	[ "$needed" = "$fromreq" ] || { echo "linked: $needed"; echo "pc: $fromreq"; false; }
}

# CI builds the fuzz targets with clang (make fuzz), which the gcc test
# build never sees: a builtin gcc knows and clang 14 does not broke that
# build once, and an instrumented ifunc resolver then crashed every target
# at load.  This compiles sg_sha256.c (and sg_util.c, for its hex) as
# `make fuzz` does and runs it.
@test "sg_sha256.c builds with clang's fuzzer instrumentation and the instrumented program starts and hashes" {
	command -v clang >/dev/null || skip "no clang"
	cat >"$TMP/t.c" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "sg_sha256.h"
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
int
LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char a[SG_SHA256_HEX_LEN + 1], b[SG_SHA256_HEX_LEN + 1];
	sg_sha256_ctx c;
	unsigned char out[SG_SHA256_BYTES];

	(void)d; (void)n;
	sg_sha256_hex(a, "abc", 3);
	sg_sha256_init_portable(&c);
	sg_sha256_update(&c, "abc", 3);
	sg_sha256_final(&c, out);
	for (size_t i = 0; i < sizeof(out); i++)
		snprintf(b + 2 * i, 3, "%02x", out[i]);
	printf("%s %s %d\n", a, b, (int)sg_sha256_accelerated());
	return 0;
}
C
	run -0 clang -std=c11 -Wall -Wextra -Werror -O2 -I"$TOP/libstargate" \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -o "$TMP/t" "$TOP/libstargate/sg_sha256.c" \
	    "$TOP/libstargate/sg_util.c" "$TMP/t.c"
	run -0 "$TMP/t" -runs=1 "$TMP/t.c"
	abc=ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
	[[ "$output" == *"$abc $abc "* ]]
}

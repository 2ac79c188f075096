/*
 * fuzz_route_stream.c — sg-route's --ndjson stream: its own fast line
 * reader (rd_fill, rd_line: one read(2) per MiB, memchr for the lines),
 * the snapshot-line cache, the one-pass request scan (scan_record,
 * sg_request_scan_json: jansson for what it does not take), the
 * hand-written decision writer, and the records they feed to the library.
 *
 * bin/sg-route.c is compiled into this file with its main renamed and
 * read(2) replaced by fz_read(), which hands the input over in chunks of
 * a size the input chooses, so records straddle every buffer boundary.
 * Each input runs twice: through stream_fast() (the program's path) and
 * through cli_stream() with the jansson writer (the shared reader the
 * fast path promises to match: "same lines, line numbers, limits,
 * messages and exit codes").  stdin, stdout and stderr are memory streams
 * during a run.
 *
 * Property: both runs print the same decisions, the same messages and
 * end with the same status (the shared run reads every record with
 * jansson, so a line the scan reads differently shows).
 *
 * Input: four control bytes, then the stream.
 *   [0] bits 0-2 read chunk size (1, 3, 64, 4096, 1 MiB, all),
 *       bit 3 --until-decided, bit 4 --explain, bit 5 the fast run uses
 *       the jansson writer too, bits 6-7 padding: 1 a run of 'x' about
 *       SG_MAX_RECORD bytes long (the record limit) when [1] >= 0xf0,
 *       2 ([1] % 32) * 4099 spaces
 *   [1] padding length (mode 1: -8..+7 bytes around the limit)
 *   [2] padding position, as a fraction of the stream (/256)
 *   [3] lb-config: 0 the permissive default, else one of two fixed ones
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "stargate.h"
#include "common/cli.h"
#include "fuzz.h"

static ssize_t	fz_read(int fd, void *buf, size_t n);
int		sg_route_main(int argc, char *argv[]);

#define read	fz_read
#define main	sg_route_main
#include "../../bin/sg-route.c"
#undef main
#undef read

FZ_RESTORE_ARGV0;

static const char *const confs[] = {
	NULL,
	"{\"default\":\"wait-and-widen\",\"models\":{"
	"\"w\":{\"algorithm\":\"wait-and-widen\","
	"\"cache_affinity_backend_selection_count\":2,"
	"\"cache_affinity_wait_ms\":30,\"last_cluster_affinity\":true},"
	"\"q\":{\"algorithm\":\"pulsar-wait-and-widen\","
	"\"cache_affinity_wait_ms\":20,\"band_widen_interval_ms\":5},"
	"\"r\":\"round-robin\"}}",
	"{\"default\":\"round-robin\",\"request_algorithms\":{"
	"\"pulsar\":{\"algorithm\":\"pulsar\",\"seed\":\"x\"}}}",
};

/* The stream fz_read() serves. */
static struct {
	const char	*p;
	size_t		 len, off, chunk;
} src;

static ssize_t
fz_read(int fd, void *buf, size_t n)
{
	size_t k = src.len - src.off;

	(void)fd;
	if (k > n)
		k = n;
	if (k > src.chunk)
		k = src.chunk;
	memcpy(buf, src.p + src.off, k);
	src.off += k;
	return (ssize_t)k;
}

struct outcome {
	char	*out, *msg;
	size_t	 outlen, msglen;
	int	 rc;
	bool	 bad;
};

static void
run(const char *stream, size_t len, int flags, int conf, bool fast,
    struct outcome *oc)
{
	FILE *in0 = stdin, *out0 = stdout, *err0 = stderr;
	struct opts o;
	struct run r;
	sg_error err;

	memset(&o, 0, sizeof(o));
	memset(&r, 0, sizeof(r));
	memset(oc, 0, sizeof(*oc));
	o.ndjson = true;
	o.until_decided = flags & 0x08;
	o.explain = flags & 0x10;
	o.refwriter = fast ? (flags & 0x20) != 0 : true;
	r.o = &o;
	r.fast = fast;
	FZ_ASSERT((stdin = fmemopen((void *)(uintptr_t)stream, len, "r")) !=
	    NULL || len == 0);
	if (stdin == NULL)
		FZ_ASSERT((stdin = fopen("/dev/null", "r")) != NULL);
	FZ_ASSERT((stdout = open_memstream(&oc->out, &oc->outlen)) != NULL);
	FZ_ASSERT((stderr = open_memstream(&oc->msg, &oc->msglen)) != NULL);
	src.p = stream;
	src.len = len;
	src.off = 0;
	if (confs[conf] == NULL)
		FZ_ASSERT(sg_lbconf_default(&r.conf, NULL) == 0);
	else
		FZ_ASSERT(sg_lbconf_parse(&r.conf, confs[conf],
		    strlen(confs[conf]), "conf", &err) == 0);
	FZ_ASSERT(sg_router_new(&r.rt, r.conf, 0, NULL) == 0);
	FZ_ASSERT((r.snap = sg_snapshot_new()) != NULL);
	FZ_ASSERT((r.staging = sg_snapshot_new()) != NULL);
	if (fast)
		oc->rc = stream_fast(&r, NULL, &r.bad);
	else
		oc->rc = cli_stream(NULL, 0, stream_record, &r, &r.bad);
	if (oc->rc == 0 && r.bad)
		oc->rc = EX_DATAERR;
	if (oc->rc == 0 && r.rejected)
		oc->rc = 2;
	oc->bad = r.bad;
	free(r.lastsnap);
	sg_request_release(&r.req);
	sg_snapshot_free(r.staging);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	fclose(stdin);
	fclose(stdout);
	fclose(stderr);
	stdin = in0;
	stdout = out0;
	stderr = err0;
}

/* The stream with the padding the control bytes ask for (new, or NULL
 * when there is none). */
static char *
pad(const uint8_t *c, const char *s, size_t len, size_t *outlen)
{
	size_t n, at;
	char *b;
	int mode = c[0] >> 6;

	/* a record near the limit is slow to run: 1 input in 64 or so */
	if (mode == 1 && c[1] >= 0xf0)
		n = SG_MAX_RECORD - 8 + (c[1] % 16);
	else if (mode == 2)
		n = (size_t)(c[1] % 32) * 4099;
	else
		return NULL;
	at = len * c[2] / 256;
	FZ_ASSERT((b = malloc(len + n)) != NULL);
	memcpy(b, s, at);
	memset(b + at, mode == 1 ? 'x' : ' ', n);
	memcpy(b + at + n, s + at, len - at);
	*outlen = len + n;
	return b;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[] = { 1, 3, 64, 4096, (size_t)1 << 20,
	    SIZE_MAX, SIZE_MAX, 7 };
	struct outcome a, b;
	const char *s;
	char *padded;
	size_t len;
	int conf;

	if (size < 4 || size > 65536)
		return 0;
	s = (const char *)data + 4;
	len = size - 4;
	/* byte-sized reads of a padded stream take too long */
	src.chunk = chunks[data[0] & 7];
	if ((padded = pad(data, s, len, &len)) != NULL) {
		s = padded;
		if (src.chunk < 4096)
			src.chunk = 4096;
	}
	conf = data[3] % 3;
	run(s, len, data[0], conf, true, &a);
	run(s, len, data[0], conf, false, &b);
	if (a.rc != b.rc || a.bad != b.bad || a.outlen != b.outlen ||
	    memcmp(a.out, b.out, a.outlen) != 0 || a.msglen != b.msglen ||
	    memcmp(a.msg, b.msg, a.msglen) != 0)
		fprintf(stderr, "fast: exit %d\n%.*s%.*s\nshared: exit %d\n"
		    "%.*s%.*s\n", a.rc, (int)(a.outlen > 4000 ? 4000 :
		    a.outlen), a.out, (int)(a.msglen > 2000 ? 2000 : a.msglen),
		    a.msg, b.rc, (int)(b.outlen > 4000 ? 4000 : b.outlen),
		    b.out, (int)(b.msglen > 2000 ? 2000 : b.msglen), b.msg);
	FZ_ASSERT(a.rc == b.rc && a.bad == b.bad);
	FZ_ASSERT(a.msglen == b.msglen && memcmp(a.msg, b.msg, a.msglen) == 0);
	FZ_ASSERT(a.outlen == b.outlen && memcmp(a.out, b.out, a.outlen) == 0);
	free(a.out);
	free(a.msg);
	free(b.out);
	free(b.msg);
	free(padded);
	return 0;
}

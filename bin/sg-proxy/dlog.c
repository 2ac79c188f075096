/*
 * dlog.c — the decision log (see dlog.h for the record and replay).
 *
 * Design: a record is built with jansson from the library's own codecs
 * (sg_snapshot_to_json, sg_request_to_json, and cli_decision_json, the
 * function sg-route prints with, so the logged decision is byte for byte
 * what a replay prints), serialized compactly and appended to one bounded
 * in-memory buffer.  The buffer goes to the file with write(2) on an
 * O_APPEND | O_NONBLOCK descriptor when it passes FLUSH_AT bytes, on a
 * 250 ms timer of the worker's event loop, on dlog_flush/reopen/close.
 * Only whole records enter the buffer, so each write(2) of a worker
 * appends whole lines; a record that does not fit even after a flush is
 * dropped and counted (never a blocking wait).
 *
 * Reals in the snapshot and request are written with jansson's default 17
 * significant digits, which read back to the same doubles, so a replay
 * decides on bit-identical inputs.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>
#include <xxhash.h>

#include "../common/cli.h"
#include "dlog.h"
#include "sg_sha256.h"

#define DEF_BUFFER	(4u << 20)
#define FLUSH_AT	(64u << 10)
#define FLUSH_MS	250
#define KEY_PREFIX	"h:"

struct dlog {
	char		*path;
	int		 fd;
	bool		 all;		/* sample >= 1 */
	uint64_t	 threshold;	/* keep iff hash < threshold */
	char		 seed[24];	/* decimal */
	int		 worker;
	bool		 rr_gap;	/* a round-robin selection went unlogged */
	char		*buf;
	size_t		 len, cap;
	struct event	*timer;
	dlog_stats	 st;
};

/* --- affinity keys -------------------------------------------------------- */

void
dlog_affinity_key(const char *raw, size_t n,
    char out[DLOG_AFFINITY_KEY_LEN + 1])
{
	memcpy(out, KEY_PREFIX, 2);
	sg_sha256_hex(out + 2, raw, n);	/* and the NUL */
}

bool
dlog_affinity_key_hashed(const char *key)
{
	size_t i;

	if (key == NULL || strncmp(key, KEY_PREFIX, 2) != 0 ||
	    strlen(key) != DLOG_AFFINITY_KEY_LEN)
		return false;
	for (i = 2; i < DLOG_AFFINITY_KEY_LEN; i++)
		if (!((key[i] >= '0' && key[i] <= '9') ||
		    (key[i] >= 'a' && key[i] <= 'f')))
			return false;
	return true;
}

/* --- sampling ------------------------------------------------------------- */

bool
dlog_sampled(const dlog *d, const char *request_id)
{
	if (d == NULL)
		return false;
	if (d->all)
		return true;
	if (request_id == NULL)
		request_id = "";
	return XXH3_64bits(request_id, strlen(request_id)) < d->threshold;
}

/* --- writing -------------------------------------------------------------- */

static int
open_path(const char *path, int *fd)
{
	*fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
	    O_NONBLOCK, 0640);
	return *fd < 0 ? errno : 0;
}

/* Write what the buffer holds; keeps the rest on a short or failed write. */
int
dlog_flush(dlog *d)
{
	size_t off = 0;
	ssize_t n;
	int rc = 0;

	if (d == NULL)
		return 0;
	while (off < d->len) {
		n = write(d->fd, d->buf + off, d->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? errno : EIO;
			if (rc != EAGAIN)
				d->st.write_errors++;
			break;
		}
		off += (size_t)n;
		d->st.bytes += (uint64_t)n;
	}
	if (off > 0) {
		memmove(d->buf, d->buf + off, d->len - off);
		d->len -= off;
	}
	return rc == EAGAIN ? 0 : rc;
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	dlog *d = arg;

	(void)fd;
	(void)what;
	if (d->len > 0)
		(void)dlog_flush(d);
}

/* Append one line (s[0..n) + '\n'); false when it does not fit. */
static bool
append_line(dlog *d, const char *s, size_t n)
{
	if (n + 1 > d->cap - d->len)
		(void)dlog_flush(d);
	if (n + 1 > d->cap - d->len)
		return false;
	memcpy(d->buf + d->len, s, n);
	d->buf[d->len + n] = '\n';
	d->len += n + 1;
	if (d->len >= FLUSH_AT)
		(void)dlog_flush(d);
	return true;
}

/* --- records -------------------------------------------------------------- */

/* A round-robin selection: it advanced its definition's counter. */
static bool
rr_select(const sg_decision *dec)
{
	return dec->kind == SG_DECIDE_SELECT && dec->algorithm != NULL &&
	    strcmp(dec->algorithm, "round-robin") == 0;
}

/* A time in ms as sg_request_to_json writes it: integral values as
 * integers, others as reals (17 digits: they read back exactly). */
static json_t *
ms_json(double v)
{
	if (isnan(v) || v <= 0)
		return json_integer(0);
	if (v == floor(v) && v < 9007199254740992.0)
		return json_integer((json_int_t)v);
	return json_real(isinf(v) ? 1.7976931348623157e308 : v);
}

/*
 * The state a fresh replay of this record would classify
 * (stargate-lb-config(5)): the hint absent -> new, not in the view -> stale,
 * else returning.
 */
static int
replay_state(const sg_snapshot *snap, const sg_request *req)
{
	const char *hint = req->last_cluster_id;

	if (hint == NULL || hint[0] == '\0')
		return SG_SESSION_NEW;
	if (sg_snapshot_find(snap, hint, strlen(hint)) < 0)
		return SG_SESSION_STALE;
	return SG_SESSION_RETURNING;
}

/*
 * The request member: the library's JSON form with the decision's elapsed
 * time and the affinity key in hashed form only.  *exact goes false when a
 * raw key had to be hashed here.
 */
static json_t *
request_json(const sg_request *req, double elapsed_ms, bool *exact)
{
	char hk[DLOG_AFFINITY_KEY_LEN + 1];
	const char *key = req->cache_affinity_key;
	json_t *o;

	if ((o = sg_request_to_json(req)) == NULL)
		return NULL;
	if (json_object_set_new(o, "elapsed_ms", ms_json(elapsed_ms)) != 0)
		goto fail;
	if (key != NULL && key[0] != '\0' && !dlog_affinity_key_hashed(key)) {
		dlog_affinity_key(key, strlen(key), hk);
		if (json_object_set_new(o, "cache_affinity_key",
		    json_string(hk)) != 0)
			goto fail;
		*exact = false;
	}
	if (req->input_tokens > (uint64_t)INT64_MAX ||
	    (req->has_slo && req->request_slo_ms > (uint64_t)INT64_MAX) ||
	    (req->has_max_wait && req->max_wait_ms > (uint64_t)INT64_MAX))
		*exact = false;		/* written clamped */
	return o;
fail:
	json_decref(o);
	return NULL;
}

static json_t *
context_json(const dlog *d, const sg_snapshot *snap, const sg_request *req,
    const sg_decision *dec, unsigned attempt, bool exact)
{
	struct timespec ts;
	const char *state;
	json_int_t ms = 0;
	json_t *o;
	int bad = 0;

	if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
		ms = (json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if ((o = json_object()) == NULL)
		return NULL;
	bad |= json_object_set_new(o, "time_unix_ms", json_integer(ms));
	bad |= json_object_set_new(o, "pid", json_integer((json_int_t)getpid()));
	bad |= json_object_set_new(o, "worker", json_integer(d->worker));
	bad |= json_object_set_new(o, "seq",
	    json_integer((json_int_t)d->st.decisions));
	bad |= json_object_set_new(o, "attempt", json_integer(attempt));
	bad |= json_object_set_new(o, "seed", json_string(d->seed));
	if (dec->classified &&
	    (state = sg_session_state_name(req->session_state)) != NULL) {
		bad |= json_object_set_new(o, "session_state",
		    json_string(state));
		if (req->session_state != replay_state(snap, req))
			exact = false;
	}
	if (d->rr_gap && dec->algorithm != NULL &&
	    strcmp(dec->algorithm, "round-robin") == 0)
		exact = false;
	if (!exact)
		bad |= json_object_set_new(o, "replay_exact", json_false());
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *
record_json(const dlog *d, const sg_snapshot *snap, const sg_request *req,
    double elapsed_ms, const sg_decision *dec, unsigned attempt)
{
	json_t *rec, *ctx;
	bool exact = true;
	int bad = 0;

	if ((rec = json_object()) == NULL)
		return NULL;
	bad |= json_object_set_new(rec, "snapshot", sg_snapshot_to_json(snap));
	bad |= json_object_set_new(rec, "request",
	    request_json(req, elapsed_ms, &exact));
	bad |= json_object_set_new(rec, "decision",
	    cli_decision_json(dec, req, elapsed_ms));
	ctx = bad ? NULL : context_json(d, snap, req, dec, attempt, exact);
	bad |= json_object_set_new(rec, "context", ctx);
	if (bad) {
		json_decref(rec);
		return NULL;
	}
	return rec;
}

bool
dlog_record(dlog *d, const sg_snapshot *snap, const sg_request *req,
    double elapsed_ms, const sg_decision *dec, unsigned attempt)
{
	json_t *rec;
	char *s;
	size_t n;
	bool ok;

	if (d == NULL || snap == NULL || req == NULL || dec == NULL)
		return false;
	d->st.decisions++;
	if (!dlog_sampled(d, req->request_id)) {
		d->st.sampled_out++;
		d->rr_gap |= rr_select(dec);
		return false;
	}
	rec = record_json(d, snap, req, elapsed_ms, dec, attempt);
	s = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;
	json_decref(rec);
	ok = s != NULL && (n = strlen(s)) < SG_MAX_RECORD &&
	    append_line(d, s, n);
	free(s);
	if (ok)
		d->st.written++;
	else {
		d->st.dropped++;
		d->rr_gap |= rr_select(dec);
	}
	return ok;
}

/* --- lifecycle ------------------------------------------------------------ */

int
dlog_open(dlog **out, const dlog_options *o, sg_error *err)
{
	struct timeval tv = { FLUSH_MS / 1000, (FLUSH_MS % 1000) * 1000 };
	dlog *d;
	int rc;

	*out = NULL;
	if (o == NULL || o->path == NULL || o->path[0] == '\0')
		return 0;
	if (!(o->sample >= 0 && o->sample <= 1))
		return sg_seterr(err, SG_EINVAL,
		    "--decision-log-sample: expected a number from 0 to 1");
	if ((d = calloc(1, sizeof(*d))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	d->fd = -1;
	d->all = o->sample >= 1;
	if (d->all || o->sample * 18446744073709551616.0 >=
	    18446744073709551615.0)
		d->threshold = UINT64_MAX;
	else
		d->threshold = (uint64_t)(o->sample * 18446744073709551616.0);
	(void)snprintf(d->seed, sizeof(d->seed), "%llu",
	    (unsigned long long)o->seed);
	d->worker = o->worker;
	d->cap = o->buffer_bytes > 0 ? o->buffer_bytes : DEF_BUFFER;
	rc = SG_ENOMEM;
	if ((d->path = strdup(o->path)) == NULL ||
	    (d->buf = malloc(d->cap)) == NULL) {
		sg_seterr(err, rc, "out of memory");
		goto fail;
	}
	if ((rc = open_path(d->path, &d->fd)) != 0) {
		sg_seterr(err, rc, "decision log %s: %s", d->path,
		    strerror(rc));
		goto fail;
	}
	if (o->base != NULL) {
		d->timer = event_new(o->base, -1, EV_PERSIST, on_timer, d);
		if (d->timer == NULL || event_add(d->timer, &tv) != 0) {
			rc = sg_seterr(err, SG_ENOMEM, "out of memory");
			goto fail;
		}
	}
	*out = d;
	return 0;
fail:
	dlog_close(d);
	return rc;
}

int
dlog_reopen(dlog *d, sg_error *err)
{
	int fd, rc;

	if (d == NULL)
		return 0;
	(void)dlog_flush(d);
	if ((rc = open_path(d->path, &fd)) != 0)
		return sg_seterr(err, rc, "decision log %s: %s", d->path,
		    strerror(rc));
	(void)close(d->fd);
	d->fd = fd;
	return 0;
}

void
dlog_stats_get(const dlog *d, dlog_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (d != NULL)
		*st = d->st;
}

void
dlog_close(dlog *d)
{
	if (d == NULL)
		return;
	if (d->fd >= 0) {
		(void)dlog_flush(d);
		(void)close(d->fd);
	}
	if (d->timer != NULL)
		event_free(d->timer);
	free(d->buf);
	free(d->path);
	free(d);
}

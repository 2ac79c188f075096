/*
 * sg-lastcluster — look inside the last-cluster store and keep it small.
 *
 * A thin shell over sg_store.h: global options name the store and its
 * limits (flags win over the STARGATE_LAST_CLUSTER_* environment), then one
 * command runs.  Read commands (get, del, list, stats, compact, dump) never
 * create a store: a missing one exits 66.  Write commands (put, load)
 * create the directory; failing that exits 73.  Data goes to stdout (one
 * value per line, JSON compact), people's messages to stderr.
 *
 * -d also takes a Redis URL (redis://, redis+sentinel://, redis+cluster://):
 * the same commands with the same output, through blocking connections
 * with timeouts; an unreachable Redis exits 69.  stats prints Redis's own
 * figures, compact explains that Redis expires entries itself and exits 0,
 * and a password never reaches the output (sg_store_path_redact).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include <jansson.h>

#include "sg_common.h"
#include "sg_lcconf.h"
#include "sg_store.h"
#include "common/cli.h"

const char cli_progname[] = "sg-lastcluster";

enum {
	OPT_HELP = CHAR_MAX + 1,
	OPT_VERSION,
	OPT_TTL,
	OPT_MAX_ENTRIES,
	OPT_MAP_SIZE,
	OPT_MAX_READERS,
	OPT_SYNC,
};

static const struct option longopts[] = {
	{ "dir",		required_argument,	NULL,	'd' },
	{ "ttl",		required_argument,	NULL,	OPT_TTL },
	{ "max-entries",	required_argument,	NULL,	OPT_MAX_ENTRIES },
	{ "map-size",		required_argument,	NULL,	OPT_MAP_SIZE },
	{ "max-readers",	required_argument,	NULL,	OPT_MAX_READERS },
	{ "sync",		no_argument,		NULL,	OPT_SYNC },
	{ "help",		no_argument,		NULL,	OPT_HELP },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 }
};

/* The whole text, for -h and for bad usage alike. */
const char cli_synopsis[] =
    "[-h] [-d dir|url] [--ttl dur] [--max-entries n]\n"
    "           [--map-size bytes] [--max-readers n] [--sync]\n"
    "           command [arg ...]\n"
    "commands:\n"
    "  key routing_key model affinity_key\n"
    "  get key | get --session routing_key model affinity_key | get --stdin\n"
    "  put key cluster_id\n"
    "  del key\n"
    "  list\n"
    "  stats\n"
    "  compact\n"
    "  dump\n"
    "  load [--progress]\n"
    "options (defaults):\n"
    "  -d, --dir dir|url    store directory or redis://, redis+sentinel://,\n"
    "                       redis+cluster:// URL ($STARGATE_LAST_CLUSTER_STORE,\n"
    "                       else " SG_STORE_DEFAULT_PATH ")\n"
    "  --ttl dur            entry TTL ($STARGATE_LAST_CLUSTER_TTL, else 10m)\n"
    "  --max-entries n      capacity "
    "($STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES,\n"
    "                       else 100000)\n"
    "  --map-size bytes     initial LMDB map size (64m, grows)\n"
    "  --max-readers n      LMDB reader slots (126)\n"
    "  --sync               make every group commit durable (off)\n"
    "  -h, --help           this text; --version: the version\n";

const char cli_help[] = "";

/* Exit status for a library failure; opening says which phase failed. */
enum phase { PH_RUN, PH_OPEN_READ, PH_OPEN_CREATE };

static int
exit_for(int rc, enum phase ph)
{
	/* A full disk is an I/O error whatever the phase. */
	if (ph != PH_RUN && rc != ENOSPC && rc != EDQUOT) {
		switch (rc) {
		case ENOENT: case ENOTDIR: case EACCES: case EPERM:
		case EROFS: case EISDIR: case ELOOP: case ENAMETOOLONG:
		case EEXIST:
			return ph == PH_OPEN_READ ? EX_NOINPUT : EX_CANTCREAT;
		default:
			break;
		}
	}
	switch (rc) {
	case ECONNREFUSED: case ECONNRESET: case ETIMEDOUT: case ENOTCONN:
	case EHOSTUNREACH: case ENETUNREACH: case EHOSTDOWN:
				return EX_UNAVAILABLE;	/* Redis */
	case 0:			return EX_OK;
	case SG_EINVAL:		return EX_DATAERR;
	case SG_ECONFIG:	return EX_USAGE;
	case SG_ENOMEM:		return EX_SOFTWARE;
	case SG_EFULL:		/* FALLTHROUGH */
	case EAGAIN:		/* FALLTHROUGH */
	case EBUSY:		return EX_TEMPFAIL;
	case SG_ESTORE:		/* FALLTHROUGH */
	case SG_EIO:		return EX_IOERR;
	default:
		return rc > 0 ? EX_IOERR : EX_SOFTWARE;
	}
}

static int
fail(int rc, enum phase ph, const sg_error *e, const char *what)
{
	if (e != NULL && e->text[0] != '\0' && what == NULL)
		cli_complain(NULL, 0, "%s", e->text);
	else if (e != NULL && e->text[0] != '\0')
		cli_complain(NULL, 0, "%s: %s", what, e->text);
	else
		cli_complain(NULL, 0, "%s: %s", what != NULL ? what : "store",
		    sg_strerror(rc));
	return exit_for(rc, ph);
}

/* --- option values ------------------------------------------------------- */

static int
parse_count(const char *s, uint64_t *n)
{
	if (sg_parse_u64(s, strlen(s), UINT64_MAX, n) != 0 || *n == 0)
		return -1;
	return 0;
}

/* Bytes, optionally with a binary suffix k, m, g or t. */
static int
parse_bytes(const char *s, uint64_t *n)
{
	size_t len = strlen(s);
	uint64_t mul = 1, v;

	if (len > 0) {
		switch (s[len - 1]) {
		case 'k': case 'K': mul = 1ULL << 10; len--; break;
		case 'm': case 'M': mul = 1ULL << 20; len--; break;
		case 'g': case 'G': mul = 1ULL << 30; len--; break;
		case 't': case 'T': mul = 1ULL << 40; len--; break;
		default: break;
		}
	}
	if (sg_parse_u64(s, len, UINT64_MAX / mul, &v) != 0 || v == 0)
		return -1;
	*n = v * mul;
	return 0;
}

/* --- output -------------------------------------------------------------- */

/*
 * Print o, a new reference (NULL: json_pack failed), as one line (flush:
 * and flush), and drop it.  Returns 0, or a reported EX_IOERR or
 * EX_SOFTWARE.
 */
static int
emit(json_t *o, bool flush)
{
	int rc;

	if (o == NULL)
		return cli_oom();
	rc = cli_emit(o, flush);
	json_decref(o);
	return rc;
}

/* --- commands ------------------------------------------------------------ */

struct ctx {
	sg_store_opts	 o;
	sg_store	*s;
	sg_error	 e;
	bool		 redis;		/* the store is a Redis URL */
};

static int
open_store(struct ctx *c, bool create)
{
	int rc;

	c->o.create = create;
	sg_error_clear(&c->e);
	if ((rc = sg_store_open(&c->s, &c->o, &c->e)) != 0)
		return fail(rc, create ? PH_OPEN_CREATE : PH_OPEN_READ, &c->e,
		    NULL);
	return EX_OK;
}

static bool
key_ok(const char *k)
{
	if (sg_lc_key_valid(k, strlen(k)))
		return true;
	cli_complain(NULL, 0,
	    "bad key: expected lc:v1: followed by 64 lowercase hex digits");
	return false;
}

static int
cmd_key(int argc, char *argv[])
{
	char k[SG_LC_KEY_LEN + 1];

	if (argc != 4)
		cli_usage(EX_USAGE);
	sg_lc_key(k, argv[1], strlen(argv[1]), argv[2], strlen(argv[2]),
	    argv[3], strlen(argv[3]));
	if (puts(k) == EOF)
		return cli_write_error();
	return cli_finish(EX_OK);
}

static int
get_stdin(struct ctx *c)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	long lineno = 0;
	int status = EX_OK, rc, st;

	while ((len = getline(&line, &cap, stdin)) != -1) {
		sg_store_entry ent;
		json_t *o;

		lineno++;
		while (len > 0 && (line[len - 1] == '\n' ||
		    line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		if (!sg_lc_key_valid(line, (size_t)len)) {
			cli_complain("<stdin>", lineno, "bad key");
			status = EX_DATAERR;
			continue;
		}
		rc = sg_store_lookup(c->s, line, (size_t)len, &ent, &c->e);
		if (rc != 0 && rc != SG_ENOTFOUND) {
			status = fail(rc, PH_RUN, &c->e, "lookup");
			break;
		}
		o = json_pack("{s:s, s:o}", "key", line, "cluster_id",
		    rc == 0 ? json_stringn(ent.cluster_id, ent.cluster_id_len) :
		    json_null());
		/* One answer per question, at once: usable as a coprocess. */
		if ((st = emit(o, true)) != 0) {
			status = st;
			break;
		}
	}
	free(line);
	return status;
}

static int
cmd_get(struct ctx *c, int argc, char *argv[])
{
	char kbuf[SG_LC_KEY_LEN + 1];
	const char *k;
	sg_store_entry ent;
	int rc, st;

	if (argc == 2 && strcmp(argv[1], "--stdin") == 0) {
		if ((st = open_store(c, false)) != EX_OK)
			return st;
		return cli_finish(get_stdin(c));
	}
	if (argc == 5 && strcmp(argv[1], "--session") == 0) {
		sg_lc_key(kbuf, argv[2], strlen(argv[2]), argv[3],
		    strlen(argv[3]), argv[4], strlen(argv[4]));
		k = kbuf;
	} else if (argc == 2 && argv[1][0] != '-') {
		k = argv[1];
		if (!key_ok(k))
			return EX_DATAERR;
	} else
		cli_usage(EX_USAGE);
	if ((st = open_store(c, false)) != EX_OK)
		return st;
	rc = sg_store_lookup(c->s, k, strlen(k), &ent, &c->e);
	if (rc == SG_ENOTFOUND)
		return EXIT_FAILURE;	/* a miss, like grep */
	if (rc != 0)
		return fail(rc, PH_RUN, &c->e, "lookup");
	if (fwrite(ent.cluster_id, 1, ent.cluster_id_len, stdout) !=
	    ent.cluster_id_len || fputc('\n', stdout) == EOF)
		return cli_write_error();
	return cli_finish(EX_OK);
}

static int
cmd_put(struct ctx *c, int argc, char *argv[])
{
	int rc, st;

	if (argc != 3)
		cli_usage(EX_USAGE);
	if (!key_ok(argv[1]))
		return EX_DATAERR;
	if (!sg_lc_cluster_id_valid(argv[2], strlen(argv[2]))) {
		cli_complain(NULL, 0, "invalid cluster id: must be 1..%d bytes "
		    "of printable ASCII", SG_ID_MAX);
		return EX_DATAERR;
	}
	if ((st = open_store(c, true)) != EX_OK)
		return st;
	if ((rc = sg_store_put(c->s, argv[1], strlen(argv[1]), argv[2],
	    strlen(argv[2]), &c->e)) != 0 ||
	    (rc = sg_store_flush(c->s, &c->e)) != 0)
		return fail(rc, PH_RUN, &c->e, "put");
	return EX_OK;
}

static int
cmd_del(struct ctx *c, int argc, char *argv[])
{
	sg_store_entry ent;
	int rc, st, found;

	if (argc != 2)
		cli_usage(EX_USAGE);
	if (!key_ok(argv[1]))
		return EX_DATAERR;
	if ((st = open_store(c, false)) != EX_OK)
		return st;
	rc = sg_store_lookup(c->s, argv[1], strlen(argv[1]), &ent, &c->e);
	if (rc != 0 && rc != SG_ENOTFOUND)
		return fail(rc, PH_RUN, &c->e, "del");
	found = rc == 0;
	if ((rc = sg_store_del(c->s, argv[1], strlen(argv[1]), &c->e)) != 0 ||
	    (rc = sg_store_flush(c->s, &c->e)) != 0)
		return fail(rc, PH_RUN, &c->e, "del");
	return found ? EX_OK : EXIT_FAILURE;
}

struct list_arg {
	bool	dump;		/* dump: written_ms, else list: age_ms */
	int	status;		/* a failed output's exit code (reported) */
};

static int
list_fn(const sg_store_entry *e, void *arg)
{
	struct list_arg *la = arg;
	json_t *o;

	o = json_pack("{s:s, s:s%, s:I}", "key", e->key, "cluster_id",
	    e->cluster_id, e->cluster_id_len,
	    la->dump ? "written_ms" : "age_ms",
	    (json_int_t)(la->dump ? e->written_ms : e->age_ms));
	la->status = emit(o, false);
	return la->status != 0 ? EIO : 0;
}

static int
cmd_list(struct ctx *c, int argc, bool dump)
{
	struct list_arg la = { dump, EX_OK };
	int rc, st;

	if (argc != 1)
		cli_usage(EX_USAGE);
	if ((st = open_store(c, false)) != EX_OK)
		return st;
	rc = sg_store_iterate(c->s, false, list_fn, &la, &c->e);
	if (la.status != EX_OK)
		return cli_finish(la.status);
	if (rc != 0)
		return fail(rc, PH_RUN, &c->e, dump ? "dump" : "list");
	return cli_finish(EX_OK);
}

/* Redis's figures: no map, file or readers; memory and nodes instead. */
static json_t *
redis_stats(const struct ctx *c, const sg_store_stats *s)
{
	char url[SG_LCCONF_STORE_MAX];

	sg_store_path_redact(url, sizeof(url), c->o.path);
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I}",
	    "backend", s->backend,
	    "path", url,
	    "entries", (json_int_t)s->entries,
	    "expired", (json_int_t)s->expired,
	    "oldest_age_ms", (json_int_t)s->oldest_age_ms,
	    "ttl_ms", (json_int_t)s->ttl_ms,
	    "used_memory", (json_int_t)s->mem_used,
	    "maxmemory", (json_int_t)s->mem_max,
	    "maxmemory_policy", s->mem_policy,
	    "nodes", (json_int_t)s->nodes);
}

static int
cmd_stats(struct ctx *c, int argc)
{
	sg_store_stats s;
	json_t *o;
	int rc, st;

	if (argc != 1)
		cli_usage(EX_USAGE);
	if ((st = open_store(c, false)) != EX_OK)
		return st;
	if ((rc = sg_store_stats_get(c->s, &s, &c->e)) != 0)
		return fail(rc, PH_RUN, &c->e, "stats");
	if (strcmp(s.backend, "redis") == 0)
		return cli_finish(emit(redis_stats(c, &s), false));
	o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
	    "s:I, s:I, s:I, s:I, s:I, s:I}",
	    "backend", s.backend,
	    "path", c->o.path,
	    "entries", (json_int_t)s.entries,
	    "expired", (json_int_t)s.expired,
	    "oldest_age_ms", (json_int_t)s.oldest_age_ms,
	    "ttl_ms", (json_int_t)s.ttl_ms,
	    "max_entries", (json_int_t)s.max_entries,
	    "map_size", (json_int_t)s.map_size,
	    "map_used", (json_int_t)s.map_used,
	    "file_size", (json_int_t)s.file_size,
	    "page_size", (json_int_t)s.page_size,
	    "last_txnid", (json_int_t)s.last_txnid,
	    "max_readers", (json_int_t)s.max_readers,
	    "readers_used", (json_int_t)s.readers_used,
	    "stale_readers_cleared", (json_int_t)s.stale_readers,
	    "generation", (json_int_t)s.generation);
	return cli_finish(emit(o, false));
}

static int
cmd_compact(struct ctx *c, int argc)
{
	sg_store_compact_result r;
	json_t *o;
	int rc, st;

	if (argc != 1)
		cli_usage(EX_USAGE);
	if (c->redis) {
		cli_complain(NULL, 0, "nothing to compact: Redis expires "
		    "entries itself (SET ... PX) and bounds its memory "
		    "(maxmemory-policy allkeys-lru)");
		return EX_OK;
	}
	if ((st = open_store(c, false)) != EX_OK)
		return st;
	if ((rc = sg_store_compact(c->s, &r, &c->e)) != 0)
		return fail(rc, PH_RUN, &c->e, "compact");
	o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:b}",
	    "expired", (json_int_t)r.expired,
	    "evicted", (json_int_t)r.evicted,
	    "entries", (json_int_t)r.entries,
	    "bytes_before", (json_int_t)r.bytes_before,
	    "bytes_after", (json_int_t)r.bytes_after,
	    "generation", (json_int_t)r.generation,
	    "swapped", r.swapped);
	return cli_finish(emit(o, false));
}

/*
 * load --progress: after each group commit the store thread prints how
 * many records are committed so far.  It writes with write(2), one line at
 * a time, and only after the commit returned, so a reader that sees
 * {"committed":N} knows the first N accepted records are in the store even
 * if this process is killed the next instant.
 */
static volatile int progress_failed;

static void
progress_fn(const sg_store_commit *ci, void *arg)
{
	char buf[64];
	int n;

	(void)arg;
	if (ci->rc != 0)
		return;
	n = snprintf(buf, sizeof(buf), "{\"committed\":%llu}\n",
	    (unsigned long long)ci->committed);
	if (write(STDOUT_FILENO, buf, (size_t)n) != n)
		progress_failed = 1;
}

static int
load_one(struct ctx *c, json_t *rec, const char **why)
{
	json_t *jk = json_object_get(rec, "key");
	json_t *ji = json_object_get(rec, "cluster_id");
	json_t *jt = json_object_get(rec, "written_ms");
	const char *k, *id;
	size_t idlen;
	int rc;

	if (!json_is_string(jk) || !sg_lc_key_valid(json_string_value(jk),
	    json_string_length(jk))) {
		*why = "bad or missing \"key\"";
		return SG_EINVAL;
	}
	if (!json_is_string(ji) || !sg_lc_cluster_id_valid(
	    json_string_value(ji), json_string_length(ji))) {
		*why = "bad or missing \"cluster_id\"";
		return SG_EINVAL;
	}
	if (jt != NULL && (!json_is_integer(jt) ||
	    json_integer_value(jt) < 0)) {
		*why = "\"written_ms\" is not a non-negative integer";
		return SG_EINVAL;
	}
	k = json_string_value(jk);
	id = json_string_value(ji);
	idlen = json_string_length(ji);
	for (;;) {
		if (jt != NULL)
			rc = sg_store_put_at(c->s, k, SG_LC_KEY_LEN, id, idlen,
			    (uint64_t)json_integer_value(jt), &c->e);
		else
			rc = sg_store_put(c->s, k, SG_LC_KEY_LEN, id, idlen,
			    &c->e);
		if (rc != EAGAIN)
			return rc;
		/* Queue full: let the store thread catch up. */
		if ((rc = sg_store_flush(c->s, &c->e)) != 0)
			return rc;
	}
}

static int
cmd_load(struct ctx *c, int argc, char *argv[])
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	long lineno = 0;
	uint64_t loaded = 0, skipped = 0;
	int status = EX_OK, rc, st;

	if (argc == 2 && strcmp(argv[1], "--progress") == 0) {
		c->o.on_commit = progress_fn;
		fflush(stdout);
	} else if (argc != 1)
		cli_usage(EX_USAGE);
	if ((st = open_store(c, true)) != EX_OK)
		return st;
	while ((len = getline(&line, &cap, stdin)) != -1) {
		json_error_t jerr;
		const char *why = NULL;
		json_t *rec;

		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue;
		if (len > (ssize_t)SG_MAX_RECORD) {
			cli_complain("<stdin>", lineno, "record too long");
			status = EX_DATAERR;
			skipped++;
			continue;
		}
		rec = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES,
		    &jerr);
		if (rec == NULL || !json_is_object(rec)) {
			cli_complain("<stdin>", lineno, "%s",
			    rec == NULL ? jerr.text : "not a JSON object");
			json_decref(rec);
			status = EX_DATAERR;
			skipped++;
			continue;
		}
		rc = load_one(c, rec, &why);
		json_decref(rec);
		if (rc == SG_EINVAL && why != NULL) {
			cli_complain("<stdin>", lineno, "%s", why);
			status = EX_DATAERR;
			skipped++;
			continue;
		}
		if (rc != 0) {
			free(line);
			return fail(rc, PH_RUN, &c->e, "load");
		}
		loaded++;
	}
	free(line);
	if (ferror(stdin)) {
		cli_complain(NULL, 0, "read error: %s", strerror(errno));
		return EX_IOERR;
	}
	if ((rc = sg_store_flush(c->s, &c->e)) != 0)
		return fail(rc, PH_RUN, &c->e, "load");
	if (progress_failed)
		return cli_finish(EX_IOERR);
	if ((st = emit(json_pack("{s:I, s:I}", "loaded", (json_int_t)loaded,
	    "skipped", (json_int_t)skipped), false)) != 0)
		return cli_finish(st);
	return cli_finish(status);
}

/* --- main ---------------------------------------------------------------- */

/*
 * The STARGATE_LAST_CLUSTER_* environment through sg_lcconf (the rules
 * sg-proxy reads too), then flags through the same setter: flags win, and
 * a bad value names its variable or flag.  ENABLED and LOOKUP_TIMEOUT mean
 * nothing here but are checked all the same: one environment file serves
 * both programs, and a bad value in it should fail loudly everywhere.
 */
static int
env_opts(sg_lcconf *lc)
{
	sg_error e;

	sg_error_clear(&e);
	if (sg_lcconf_from_env(lc, getenv, &e) != 0) {
		cli_complain(NULL, 0, "%s", e.text);
		return -1;
	}
	return 0;
}

/* A flag that maps onto a variable; exits 64 on a bad value. */
static void
flag_opt(sg_lcconf *lc, const char *var, const char *flag, const char *v)
{
	sg_error e;

	sg_error_clear(&e);
	if (sg_lcconf_set(lc, var, v, flag, &e) != 0)
		cli_usage_error("%s", e.text);
}

int
main(int argc, char *argv[])
{
	struct ctx c;
	sg_lcconf lc;
	const char *cmd;
	int ch, status;

	memset(&c, 0, sizeof(c));
	sg_store_opts_init(&c.o);
	sg_lcconf_init(&lc);
	if (env_opts(&lc) != 0)
		return EX_USAGE;
	/* '+': options stop at the command. */
	while ((ch = getopt_long(argc, argv, "+d:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			if (*optarg == '\0')
				cli_usage(EX_USAGE);
			flag_opt(&lc, SG_LCCONF_STORE, "-d", optarg);
			break;
		case OPT_TTL:
			flag_opt(&lc, SG_LCCONF_TTL, "--ttl", optarg);
			break;
		case OPT_MAX_ENTRIES:
			flag_opt(&lc, SG_LCCONF_MAX_ENTRIES, "--max-entries",
			    optarg);
			break;
		case OPT_MAP_SIZE:
			if (parse_bytes(optarg, &c.o.map_size) != 0) {
				cli_usage_error("--map-size: not a size > 0: "
				    "'%s'", optarg);
			}
			if (c.o.map_size > c.o.map_size_max)
				c.o.map_size_max = c.o.map_size;
			break;
		case OPT_MAX_READERS: {
			uint64_t n;

			if (parse_count(optarg, &n) != 0 || n > 100000) {
				cli_usage_error("--max-readers: not an "
				    "integer in 1..100000: '%s'", optarg);
			}
			c.o.max_readers = (unsigned)n;
			break;
		}
		case OPT_SYNC:
			c.o.sync = true;
			break;
		case 'h':
		case OPT_HELP:
			cli_usage(EX_OK);
		case OPT_VERSION:
			return cli_version();
		default:
			cli_usage(EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		cli_usage(EX_USAGE);
	sg_lcconf_store_opts(&lc, &c.o);	/* lc lives to the end of main */
	c.redis = lc.backend == SG_LC_BACKEND_REDIS;
	cmd = argv[0];
	if (strcmp(cmd, "key") == 0)
		status = cmd_key(argc, argv);
	else if (strcmp(cmd, "get") == 0)
		status = cmd_get(&c, argc, argv);
	else if (strcmp(cmd, "put") == 0)
		status = cmd_put(&c, argc, argv);
	else if (strcmp(cmd, "del") == 0)
		status = cmd_del(&c, argc, argv);
	else if (strcmp(cmd, "list") == 0)
		status = cmd_list(&c, argc, false);
	else if (strcmp(cmd, "dump") == 0)
		status = cmd_list(&c, argc, true);
	else if (strcmp(cmd, "stats") == 0)
		status = cmd_stats(&c, argc);
	else if (strcmp(cmd, "compact") == 0)
		status = cmd_compact(&c, argc);
	else if (strcmp(cmd, "load") == 0)
		status = cmd_load(&c, argc, argv);
	else {
		cli_usage_error("unknown command '%s'", cmd);
	}
	sg_store_close(c.s);
	return status;
}

/*
 * sg-proxy — the Stargate routing daemon (sg-proxy(8)): --role router (the
 * trusted side: trusted headers in, clusters out), gateway (the public
 * side: identity, last-cluster store, header hygiene, forwarding to
 * --router-url) or all (the default: both in one process).
 *
 * main.c turns the command line into a pconf (the last-cluster settings:
 * STARGATE_LAST_CLUSTER_* through sg_lcconf, the flags over them), loads
 * and checks the cluster file and the lb-config (router and all), the
 * --api-keys file and, for an LMDB store, opens and closes the store once
 * so that a bad directory stops startup (--check stops there), creates what the workers
 * share (the metrics registry, in shared memory when there are several
 * workers; the listening socket, opened once before fork so that port 0
 * works with any number of workers), then either runs the single worker in
 * this process (--workers 1) or forks N workers and becomes their master.
 *
 * The master does nothing but wait for signals: SIGTERM/SIGINT and SIGHUP
 * are forwarded to every worker; a worker that dies while the master is
 * not stopping is started again (at most WORKER_RESPAWN_MAX times in
 * WORKER_RESPAWN_WINDOW seconds, then the master gives up with EX_OSERR).
 * The master exits 0 once every worker has exited after a stop signal.
 *
 * Exit codes (sysexits): 0 clean stop, 64 usage, 66 missing file, 69
 * cannot listen, 71 OS error, 78 bad configuration.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "../common/cli.h"
#include "proxy.h"

#define WORKERS_MAX		256
#define WORKER_RESPAWN_MAX	10
#define WORKER_RESPAWN_WINDOW	10
#define LISTEN_BACKLOG		1024

const char cli_progname[] = "sg-proxy";
const char cli_synopsis[] =
    "[--role all|router] --listen ADDR:PORT --clusters FILE [--lb-config FILE]\n"
    "       sg-proxy --role gateway --router-url URL --listen ADDR:PORT\n"
    "        [--api-keys FILE] [--last-cluster BOOL] [--last-cluster-ttl DUR]\n"
    "        [--last-cluster-timeout DUR] [--last-cluster-max-entries N]\n"
    "        [--last-cluster-store DIR|URL]\n"
    "        [--workers N] [--log-level debug|info|warn|error] [--seed N]\n"
    "        [--port-file FILE] [--max-body-bytes N] [--max-header-bytes N]\n"
    "        [--max-headers N] [--header-timeout-ms MS] [--body-timeout-ms MS]\n"
    "        [--keepalive-timeout-ms MS] [--send-timeout-ms MS]\n"
    "        [--connect-timeout-ms MS] [--upstream-timeout-ms MS]\n"
    "        [--upstream-client native|curl]\n"
    "        [--max-retries N] [--ready-timeout-ms MS] [--drain-timeout-ms MS]\n"
    "        [--decision-log FILE] [--decision-log-sample F]\n"
    "        [--metrics-prefix P] [--pid-file FILE] [-n | --check]\n"
    "       sg-proxy -h | --help | --version\n";
const char cli_help[] =
    "\n"
    "Route OpenAI-style inference requests across engine clusters.\n"
    "\n"
    "  --role ROLE              all (gateway and router in one process, the\n"
    "                           default), gateway or router\n"
    "  --router-url URL         gateway: the router, http://HOST:PORT\n"
    "  --api-keys FILE          gateway: allowed keys, SHA256HEX [ROUTING_KEY\n"
    "                           [PRIORITY]] per line (default: all pass)\n"
    "  --last-cluster BOOL      gateway: the last-cluster store on or off\n"
    "                           (STARGATE_LAST_CLUSTER_ENABLED, false)\n"
    "  --last-cluster-ttl DUR   entry lifetime (STARGATE_LAST_CLUSTER_TTL, 10m)\n"
    "  --last-cluster-timeout DUR\n"
    "                           lookup bound\n"
    "                           (STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT, 20ms)\n"
    "  --last-cluster-max-entries N\n"
    "                           capacity\n"
    "                           (STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES, 100000)\n"
    "  --last-cluster-store DIR|URL\n"
    "                           LMDB directory or redis:// URL\n"
    "                           (STARGATE_LAST_CLUSTER_STORE,\n"
    "                           /var/lib/stargate/lastcluster)\n"
    "  --listen ADDR:PORT       listening address (127.0.0.1:8080; port 0: any)\n"
    "  --clusters FILE          cluster file, stargate-clusters(5)\n"
    "  --lb-config FILE         lb-config.json (default: permissive)\n"
    "  --workers N              worker processes (1)\n"
    "  --log-level LEVEL        debug, info, warn or error (info)\n"
    "  --seed N                 routing PRNG seed (0)\n"
    "  --port-file FILE         write the bound port here\n"
    "  --max-body-bytes N       request body limit, 413 beyond (67108864)\n"
    "  --max-header-bytes N     request header bytes (65536)\n"
    "  --max-headers N          request header count (100)\n"
    "  --header-timeout-ms MS   deadline for a request head, from its first\n"
    "                           byte (10000)\n"
    "  --body-timeout-ms MS     deadline for a request body, from the end of\n"
    "                           the head (10000)\n"
    "  --keepalive-timeout-ms MS\n"
    "                           idle keep-alive connection lifetime (75000)\n"
    "  --send-timeout-ms MS     a reply whose output makes no progress for\n"
    "                           this long is abandoned (60000)\n"
    "  --connect-timeout-ms MS  upstream connect timeout (2000)\n"
    "  --upstream-timeout-ms MS upstream idle timeout (600000)\n"
    "  --upstream-client C      native or curl: HTTP client of attempts\n"
    "                           (native)\n"
    "  --max-retries N          retry budget per request (2)\n"
    "  --ready-timeout-ms MS    /readyz turns 200 by then at the latest (10000)\n"
    "  --drain-timeout-ms MS    SIGTERM drain bound (30000)\n"
    "  --decision-log FILE      NDJSON decision log (reopened on SIGHUP)\n"
    "  --decision-log-sample F  share of decisions logged, 0..1 (1.0)\n"
    "  --metrics-prefix P       metric name prefix (stargate_)\n"
    "  --pid-file FILE          write the master's pid here\n"
    "  -n, --check              check the configuration and exit\n"
    "  -h, --help               this help\n"
    "  --version                print the version\n";

enum {
	OPT_ROLE = CHAR_MAX + 1,
	OPT_LISTEN,
	OPT_CLUSTERS,
	OPT_LBCONF,
	OPT_WORKERS,
	OPT_LOGLEVEL,
	OPT_SEED,
	OPT_PORTFILE,
	OPT_MAXBODY,
	OPT_MAXHDRBYTES,
	OPT_MAXHDRS,
	OPT_HDRTIMEOUT,
	OPT_BODYTIMEOUT,
	OPT_KATIMEOUT,
	OPT_SENDTIMEOUT,
	OPT_CONNTIMEOUT,
	OPT_UPTIMEOUT,
	OPT_UPCLIENT,
	OPT_RETRIES,
	OPT_READY,
	OPT_DRAIN,
	OPT_DLOG,
	OPT_DLOGSAMPLE,
	OPT_PREFIX,
	OPT_PIDFILE,
	OPT_VERSION,
	OPT_ROUTERURL,
	OPT_APIKEYS,
	OPT_LC,
	OPT_LCTTL,
	OPT_LCTIMEOUT,
	OPT_LCMAX,
	OPT_LCSTORE,
};

static const struct option longopts[] = {
	{ "role",		required_argument,	NULL,	OPT_ROLE },
	{ "listen",		required_argument,	NULL,	OPT_LISTEN },
	{ "clusters",		required_argument,	NULL,	OPT_CLUSTERS },
	{ "lb-config",		required_argument,	NULL,	OPT_LBCONF },
	{ "workers",		required_argument,	NULL,	OPT_WORKERS },
	{ "log-level",		required_argument,	NULL,	OPT_LOGLEVEL },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "port-file",		required_argument,	NULL,	OPT_PORTFILE },
	{ "max-body-bytes",	required_argument,	NULL,	OPT_MAXBODY },
	{ "max-header-bytes",	required_argument,	NULL,	OPT_MAXHDRBYTES },
	{ "max-headers",	required_argument,	NULL,	OPT_MAXHDRS },
	{ "header-timeout-ms",	required_argument,	NULL,	OPT_HDRTIMEOUT },
	{ "body-timeout-ms",	required_argument,	NULL,	OPT_BODYTIMEOUT },
	{ "keepalive-timeout-ms", required_argument,	NULL,	OPT_KATIMEOUT },
	{ "send-timeout-ms",	required_argument,	NULL,	OPT_SENDTIMEOUT},
	{ "connect-timeout-ms",	required_argument,	NULL,	OPT_CONNTIMEOUT },
	{ "upstream-timeout-ms", required_argument,	NULL,	OPT_UPTIMEOUT },
	{ "upstream-client",	required_argument,	NULL,	OPT_UPCLIENT },
	{ "max-retries",	required_argument,	NULL,	OPT_RETRIES },
	{ "ready-timeout-ms",	required_argument,	NULL,	OPT_READY },
	{ "drain-timeout-ms",	required_argument,	NULL,	OPT_DRAIN },
	{ "decision-log",	required_argument,	NULL,	OPT_DLOG },
	{ "decision-log-sample", required_argument,	NULL,	OPT_DLOGSAMPLE },
	{ "metrics-prefix",	required_argument,	NULL,	OPT_PREFIX },
	{ "pid-file",		required_argument,	NULL,	OPT_PIDFILE },
	{ "router-url",		required_argument,	NULL,	OPT_ROUTERURL },
	{ "api-keys",		required_argument,	NULL,	OPT_APIKEYS },
	{ "last-cluster",	required_argument,	NULL,	OPT_LC },
	{ "last-cluster-ttl",	required_argument,	NULL,	OPT_LCTTL },
	{ "last-cluster-timeout", required_argument,	NULL,	OPT_LCTIMEOUT },
	{ "last-cluster-max-entries", required_argument, NULL,	OPT_LCMAX },
	{ "last-cluster-store",	required_argument,	NULL,	OPT_LCSTORE },
	{ "check",		no_argument,		NULL,	'n' },
	{ "help",		no_argument,		NULL,	'h' },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 },
};

/* An integer option with bounds, as a table so that parsing is one loop. */
struct uopt {
	int		 opt;
	const char	*name;
	size_t		 off;
	uint64_t	 min, max;
};

#define UOFF(f)	offsetof(pconf, f)
static const struct uopt uopts[] = {
	{ OPT_SEED,	"--seed",		UOFF(seed),	0, UINT64_MAX },
	{ OPT_MAXBODY,	"--max-body-bytes",	UOFF(max_body),	0, 1ULL << 40 },
	{ OPT_MAXHDRBYTES, "--max-header-bytes", UOFF(max_header_bytes), 256,
	    1u << 24 },
	{ OPT_MAXHDRS,	"--max-headers",	UOFF(max_headers), 1, 10000 },
	{ OPT_HDRTIMEOUT, "--header-timeout-ms", UOFF(header_timeout_ms), 1,
	    86400000 },
	{ OPT_BODYTIMEOUT, "--body-timeout-ms",	UOFF(body_timeout_ms), 1,
	    86400000 },
	{ OPT_KATIMEOUT, "--keepalive-timeout-ms", UOFF(keepalive_timeout_ms),
	    1, 86400000 },
	{ OPT_SENDTIMEOUT, "--send-timeout-ms",	UOFF(send_timeout_ms), 1,
	    86400000 },
	{ OPT_CONNTIMEOUT, "--connect-timeout-ms", UOFF(connect_timeout_ms), 1,
	    86400000 },
	{ OPT_UPTIMEOUT, "--upstream-timeout-ms", UOFF(upstream_timeout_ms), 1,
	    86400000ULL * 7 },
	{ OPT_RETRIES,	"--max-retries",	UOFF(max_retries), 0, 100 },
	{ OPT_READY,	"--ready-timeout-ms",	UOFF(ready_timeout_ms), 0,
	    86400000 },
	{ OPT_DRAIN,	"--drain-timeout-ms",	UOFF(drain_timeout_ms), 0,
	    86400000 },
};

static proxy P;
static pconf C;
static bool pid_written;

/* The last-cluster flags: applied over the environment after parsing. */
static const struct lcflag {
	int		 opt;
	const char	*flag;
	const char	*var;
} lcflags[] = {
	{ OPT_LC,	"--last-cluster",		SG_LCCONF_ENABLED },
	{ OPT_LCTTL,	"--last-cluster-ttl",		SG_LCCONF_TTL },
	{ OPT_LCTIMEOUT, "--last-cluster-timeout",	SG_LCCONF_TIMEOUT },
	{ OPT_LCMAX,	"--last-cluster-max-entries",	SG_LCCONF_MAX_ENTRIES },
	{ OPT_LCSTORE,	"--last-cluster-store",		SG_LCCONF_STORE },
};
#define NLCFLAGS	(sizeof(lcflags) / sizeof(lcflags[0]))
static const char *lcvals[NLCFLAGS];

static void cleanup(proxy *p);

static void
conf_defaults(pconf *c)
{
	memset(c, 0, sizeof(*c));
	c->role = "all";
	c->listen = "127.0.0.1:8080";
	c->workers = 1;
	c->log_level = SG_LOG_INFO;
	c->max_body = 67108864;
	c->max_header_bytes = 65536;
	c->max_headers = 100;
	c->header_timeout_ms = 10000;
	c->body_timeout_ms = 10000;
	c->keepalive_timeout_ms = 75000;
	c->send_timeout_ms = 60000;
	c->connect_timeout_ms = 2000;
	c->upstream_timeout_ms = 600000;
	c->max_retries = 2;
	c->ready_timeout_ms = 10000;
	c->drain_timeout_ms = PROXY_DRAIN_MS;
	c->decision_log_sample = 1.0;
	c->metrics_prefix = "stargate_";
}

/* "ADDR:PORT", "[v6]:PORT" or ":PORT" into c->host and c->port. */
static int
parse_listen(pconf *c, const char *s)
{
	const char *colon, *hs = s;
	size_t hl;
	uint64_t port;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (end == NULL || end[1] != ':')
			return -1;
		hs = s + 1;
		hl = (size_t)(end - hs);
		colon = end + 1;
	} else {
		if ((colon = strrchr(s, ':')) == NULL)
			return -1;
		hl = (size_t)(colon - s);
	}
	if (hl >= sizeof(c->host))
		return -1;
	if (sg_parse_u64(colon + 1, strlen(colon + 1), 65535, &port) != 0)
		return -1;
	if (hl == 0)
		snprintf(c->host, sizeof(c->host), "0.0.0.0");
	else
		snprintf(c->host, sizeof(c->host), "%.*s", (int)hl, hs);
	c->port = (uint16_t)port;
	return 0;
}

static void
parse_args(pconf *c, int argc, char **argv)
{
	int ch;
	size_t i;
	uint64_t v;

	while ((ch = getopt_long(argc, argv, "hn", longopts, NULL)) != -1) {
		for (i = 0; i < sizeof(uopts) / sizeof(uopts[0]); i++)
			if (uopts[i].opt == ch)
				break;
		if (i < sizeof(uopts) / sizeof(uopts[0])) {
			if (cli_opt_u64(uopts[i].name, optarg, &v) != 0)
				cli_usage(EX_USAGE);
			if (v < uopts[i].min || v > uopts[i].max)
				cli_usage_error("%s: expected %llu..%llu, got "
				    "'%s'", uopts[i].name,
				    (unsigned long long)uopts[i].min,
				    (unsigned long long)uopts[i].max, optarg);
			*(uint64_t *)(void *)((char *)c + uopts[i].off) = v;
			continue;
		}
		for (i = 0; i < NLCFLAGS; i++)
			if (lcflags[i].opt == ch)
				break;
		if (i < NLCFLAGS) {
			lcvals[i] = optarg;
			continue;
		}
		switch (ch) {
		case OPT_ROUTERURL:
			c->router_url = optarg;
			break;
		case OPT_APIKEYS:
			c->api_keys = optarg;
			break;
		case OPT_ROLE:
			c->role = optarg;
			break;
		case OPT_LISTEN:
			c->listen = optarg;
			break;
		case OPT_CLUSTERS:
			c->clusters = optarg;
			break;
		case OPT_LBCONF:
			c->lbconf = optarg;
			break;
		case OPT_WORKERS:
			if (cli_opt_u64("--workers", optarg, &v) != 0)
				cli_usage(EX_USAGE);
			if (v < 1 || v > WORKERS_MAX)
				cli_usage_error("--workers: expected 1..%d, "
				    "got '%s'", WORKERS_MAX, optarg);
			c->workers = (unsigned)v;
			break;
		case OPT_LOGLEVEL:
			if (sg_log_level_parse(optarg, &c->log_level) != 0)
				cli_usage_error("--log-level: expected debug, "
				    "info, warn or error, got '%s'", optarg);
			break;
		case OPT_PORTFILE:
			c->port_file = optarg;
			break;
		case OPT_DLOG:
			c->decision_log = optarg;
			break;
		case OPT_DLOGSAMPLE: {
			char *end;

			errno = 0;
			c->decision_log_sample = strtod(optarg, &end);
			if (optarg[0] == '\0' || *end != '\0' || errno != 0 ||
			    !(c->decision_log_sample >= 0.0 &&
			    c->decision_log_sample <= 1.0))
				cli_usage_error("--decision-log-sample: "
				    "expected a number in 0..1, got '%s'",
				    optarg);
			break;
		}
		case OPT_PREFIX:
			c->metrics_prefix = optarg;
			break;
		case OPT_PIDFILE:
			c->pid_file = optarg;
			break;
		case OPT_UPCLIENT:
			if (strcmp(optarg, "native") == 0)
				c->upstream_curl = false;
			else if (strcmp(optarg, "curl") == 0)
				c->upstream_curl = true;
			else
				cli_usage_error("--upstream-client: expected "
				    "native or curl, got '%s'", optarg);
			break;
		case 'n':
			c->check = true;
			break;
		case 'h':
			cli_usage(EX_OK);
		case OPT_VERSION:
			exit(cli_version());
		default:
			cli_usage(EX_USAGE);
		}
	}
	if (optind < argc)
		cli_usage_error("unexpected operand '%s'", argv[optind]);
	if (parse_listen(c, c->listen) != 0)
		cli_usage_error("--listen: expected ADDR:PORT, got '%s'",
		    c->listen);
}

/* A metrics prefix must keep every name valid. */
static bool
prefix_ok(const char *s)
{
	size_t i;

	if (strlen(s) > 64)
		return false;
	for (i = 0; s[i] != '\0'; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    ch == '_' || ch == ':' || (i > 0 && ch >= '0' && ch <= '9')))
			return false;
	}
	return true;
}

int
conf_load_clusters(const char *path, sg_clusterfile **out, bool quiet,
    sg_error *err)
{
	struct stat st;
	int rc;

	if (stat(path, &st) != 0) {
		snprintf(err->text, sizeof(err->text), "%s: %s", path,
		    strerror(errno));
		if (!quiet)
			cli_complain(NULL, 0, "%s", err->text);
		return EX_NOINPUT;
	}
	if ((rc = sg_clusterfile_load(out, path, err)) != 0) {
		if (!quiet)
			cli_complain(NULL, 0, "%s", err->text[0] != '\0' ?
			    err->text : sg_strerror(rc));
		return rc == SG_ENOMEM ? EX_SOFTWARE : EX_CONFIG;
	}
	return 0;
}

/* The environment, less the variables a flag overrides (a flag wins,
 * even over a variable that would not parse). */
static char *
lc_getenv(const char *name)
{
	size_t i;

	for (i = 0; i < NLCFLAGS; i++)
		if (lcvals[i] != NULL && strcmp(lcflags[i].var, name) == 0)
			return NULL;
	return getenv(name);
}

/* The last-cluster settings: environment, then the flags over it. */
static int
conf_lc(pconf *c)
{
	sg_error err;
	size_t i;

	memset(&err, 0, sizeof(err));
	sg_lcconf_init(&c->lc);
	if (sg_lcconf_from_env(&c->lc, lc_getenv, &err) != 0) {
		cli_complain(NULL, 0, "%s", err.text);
		return EX_CONFIG;
	}
	for (i = 0; i < NLCFLAGS; i++)
		if (lcvals[i] != NULL && sg_lcconf_set(&c->lc, lcflags[i].var,
		    lcvals[i], lcflags[i].flag, &err) != 0) {
			cli_complain(NULL, 0, "%s", err.text);
			return EX_CONFIG;
		}
	return 0;
}

/* --router-url: http://HOST:PORT[/path]. */
static bool
router_url_ok(const char *u)
{
	size_t n = strlen(u);

	return n > 7 && n < PROXY_URL_MAX && strncmp(u, "http://", 7) == 0 &&
	    u[7] != '/' && u[7] != '\0';
}

/* Check the options that need more than their own value. */
static int
conf_check(pconf *c)
{
	int rc;

	if (strcmp(c->role, "all") == 0)
		c->role_id = ROLE_ALL;
	else if (strcmp(c->role, "gateway") == 0)
		c->role_id = ROLE_GATEWAY;
	else if (strcmp(c->role, "router") == 0)
		c->role_id = ROLE_ROUTER;
	else {
		cli_complain(NULL, 0, "--role: expected all, gateway or "
		    "router, got '%s'", c->role);
		return EX_USAGE;
	}
	if (c->role_id == ROLE_GATEWAY) {
		if (c->clusters != NULL) {
			cli_complain(NULL, 0, "--clusters: not taken by "
			    "--role gateway (the router has the clusters)");
			return EX_USAGE;
		}
		if (c->router_url == NULL) {
			cli_complain(NULL, 0, "--router-url: required for "
			    "--role gateway");
			return EX_USAGE;
		}
		if (!router_url_ok(c->router_url)) {
			cli_complain(NULL, 0, "--router-url: expected "
			    "http://HOST:PORT, got '%s'", c->router_url);
			return EX_USAGE;
		}
	} else {
		if (c->router_url != NULL) {
			cli_complain(NULL, 0, "--router-url: only for --role "
			    "gateway");
			return EX_USAGE;
		}
		if (c->clusters == NULL) {
			cli_complain(NULL, 0, "--clusters: a cluster file is "
			    "required for --role %s", c->role);
			return EX_USAGE;
		}
	}
	if (c->role_id == ROLE_ROUTER && c->api_keys != NULL) {
		cli_complain(NULL, 0, "--api-keys: only for --role gateway "
		    "or all");
		return EX_USAGE;
	}
	if ((rc = conf_lc(c)) != 0)
		return rc;
	if (!prefix_ok(c->metrics_prefix)) {
		cli_complain(NULL, 0, "--metrics-prefix: expected "
		    "[a-zA-Z_:][a-zA-Z0-9_:]*, got '%s'", c->metrics_prefix);
		return EX_USAGE;
	}
	return 0;
}

/* An LMDB store is opened (created) once here, so that a directory that
 * cannot hold one stops startup; the workers open their own. */
static int
check_store(const pconf *c)
{
	sg_store_opts o;
	sg_store *s = NULL;
	sg_error err;
	int rc;

	if (c->role_id == ROLE_ROUTER || !c->lc.enabled ||
	    c->lc.backend != SG_LC_BACKEND_LMDB)
		return 0;
	memset(&err, 0, sizeof(err));
	sg_store_opts_init(&o);
	sg_lcconf_store_opts(&c->lc, &o);
	o.create = true;
	if ((rc = sg_store_open(&s, &o, &err)) != 0) {
		cli_complain(NULL, 0, "%s: %s", SG_LCCONF_STORE,
		    err.text[0] != '\0' ? err.text : sg_strerror(rc));
		return EX_CONFIG;
	}
	sg_store_close(s);
	return 0;
}

/* The lb-config and one router over it (proves the config usable). */
static int
load_lbconf(proxy *p)
{
	sg_error err;
	struct stat st;
	int rc;

	memset(&err, 0, sizeof(err));
	if (p->conf->lbconf != NULL && stat(p->conf->lbconf, &st) != 0) {
		cli_complain(NULL, 0, "%s: %s", p->conf->lbconf,
		    strerror(errno));
		return EX_NOINPUT;
	}
	rc = p->conf->lbconf != NULL ?
	    sg_lbconf_load(&p->lb, p->conf->lbconf, &err) :
	    sg_lbconf_default(&p->lb, &err);
	if (rc != 0) {
		cli_complain(NULL, 0, "%s", err.text[0] != '\0' ? err.text :
		    sg_strerror(rc));
		return rc == SG_ENOMEM ? EX_SOFTWARE : EX_CONFIG;
	}
	return 0;
}

static int
open_listener(proxy *p, char *host, size_t hostsz, unsigned *port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1, on = 1, fam;
	struct sockaddr_in s4;
	struct sockaddr_in6 s6;

	memset(&s4, 0, sizeof(s4));
	memset(&s6, 0, sizeof(s6));
	if (inet_pton(AF_INET, p->conf->host, &s4.sin_addr) == 1) {
		fam = AF_INET;
		s4.sin_family = AF_INET;
		s4.sin_port = htons(p->conf->port);
	} else if (inet_pton(AF_INET6, p->conf->host, &s6.sin6_addr) == 1) {
		fam = AF_INET6;
		s6.sin6_family = AF_INET6;
		s6.sin6_port = htons(p->conf->port);
	} else {
		cli_complain(NULL, 0, "--listen: '%s' is not a numeric IPv4 "
		    "or IPv6 address", p->conf->host);
		return EX_USAGE;
	}
	if ((fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0)
		goto fail;
	if (fam == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on,
		    sizeof(on));
	if ((fam == AF_INET ? bind(fd, (struct sockaddr *)&s4, sizeof(s4)) :
	    bind(fd, (struct sockaddr *)&s6, sizeof(s6))) != 0 ||
	    listen(fd, LISTEN_BACKLOG) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		goto fail;
	if (ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr,
		    host, (socklen_t)hostsz);
		*port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	} else {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr,
		    host, (socklen_t)hostsz);
		*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	}
	p->listen_fd = fd;
	return 0;
fail:
	cli_complain(NULL, 0, "cannot listen on %s: %s", p->conf->listen,
	    strerror(errno));
	if (fd >= 0)
		close(fd);
	return EX_UNAVAILABLE;
}

/* Write text to path atomically (path.tmp, then rename). */
static int
write_file_atomic(const char *path, const char *text)
{
	char tmp[PATH_MAX];
	FILE *fp;
	int ok, e;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return ENAMETOOLONG;
	if ((fp = fopen(tmp, "w")) == NULL)
		return errno;
	fputs(text, fp);
	ok = fflush(fp) == 0 && !ferror(fp);
	if (fclose(fp) != 0 || !ok) {
		unlink(tmp);
		return EIO;
	}
	if (rename(tmp, path) != 0) {
		e = errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

/* --- workers and the master ---------------------------------------------------- */

static pid_t
spawn(proxy *p, int no, const sigset_t *old)
{
	pid_t pid = fork();
	int rc;

	if (pid != 0)
		return pid;
	/* the child */
	sigprocmask(SIG_SETMASK, old, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	p->is_worker = true;
	p->worker_no = no;
	rc = worker_run(p);
	cleanup(p);
	exit(rc);
}

static void
forward_signal(const pid_t *pids, unsigned n, int sig)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], sig);
}

static int
master(proxy *p)
{
	pid_t pids[WORKERS_MAX];
	time_t respawns[WORKER_RESPAWN_MAX];
	unsigned n = p->conf->workers, i, alive = 0, nresp = 0;
	sigset_t set, old;
	bool stopping = false;
	int rc = EX_OK;

	memset(pids, 0, sizeof(pids));
	memset(respawns, 0, sizeof(respawns));
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	for (i = 0; i < n; i++) {
		if ((pids[i] = spawn(p, (int)i, &old)) < 0) {
			cli_complain(NULL, 0, "fork: %s", strerror(errno));
			forward_signal(pids, i, SIGTERM);
			stopping = true;
			rc = EX_OSERR;
			pids[i] = 0;
			break;
		}
		alive++;
	}
	while (alive > 0) {
		struct timespec ts = { 1, 0 };
		int sig = sigtimedwait(&set, NULL, &ts);
		pid_t pid;
		int st;

		if (sig == SIGTERM || sig == SIGINT) {
			stopping = true;
			forward_signal(pids, n, SIGTERM);
		} else if (sig == SIGHUP)
			forward_signal(pids, n, SIGHUP);
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			for (i = 0; i < n && pids[i] != pid; i++)
				;
			if (i == n)
				continue;
			pids[i] = 0;
			alive--;
			if (stopping) {
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
					rc = EX_SOFTWARE;
				continue;
			}
			cli_complain(NULL, 0, "worker %u (pid %ld) %s %d; "
			    "starting it again", i, (long)pid,
			    WIFEXITED(st) ? "exited with" : "killed by signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			if (nresp == WORKER_RESPAWN_MAX) {
				if (time(NULL) - respawns[0] <
				    WORKER_RESPAWN_WINDOW) {
					cli_complain(NULL, 0, "workers keep "
					    "dying; stopping");
					stopping = true;
					rc = EX_OSERR;
					forward_signal(pids, n, SIGTERM);
					continue;
				}
				memmove(respawns, respawns + 1,
				    sizeof(respawns[0]) * (nresp - 1));
				nresp--;
			}
			respawns[nresp++] = time(NULL);
			if ((pids[i] = spawn(p, (int)i, &old)) < 0)
				pids[i] = 0;
			else
				alive++;
		}
	}
	return rc;
}

int
main(int argc, char **argv)
{
	sg_clusterfile *cf = NULL;
	sg_error err;
	char host[INET6_ADDRSTRLEN + 2], buf[64];
	unsigned port = 0;
	int rc, e;

	memset(&err, 0, sizeof(err));
	conf_defaults(&C);
	parse_args(&C, argc, argv);
	memset(&P, 0, sizeof(P));
	P.conf = &C;
	P.listen_fd = -1;
	if ((rc = conf_check(&C)) != 0) {
		if (rc == EX_USAGE)
			cli_usage(EX_USAGE);
		return rc;
	}
	P.gw_edge = C.role_id != ROLE_ROUTER;
	if (C.role_id != ROLE_GATEWAY &&
	    (rc = conf_load_clusters(C.clusters, &cf, false, &err)) != 0)
		return rc;
	if ((rc = load_lbconf(&P)) != 0)
		goto out;
	if (C.api_keys != NULL && (rc = gateway_load_keys(&P, C.api_keys)) != 0)
		goto out;
	if ((rc = check_store(&C)) != 0)
		goto out;
	if (sg_router_new(&P.rt, P.lb, C.seed, &err) != 0) {
		cli_complain(NULL, 0, "%s", err.text);
		rc = EX_CONFIG;
		goto out;
	}
	if (C.check) {
		printf("configuration OK\n");
		rc = cli_finish(EX_OK);
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK) {
		cli_complain(NULL, 0, "cannot initialise libcurl");
		rc = EX_OSERR;
		goto out;
	}
	if ((P.log = plog_new(C.log_level)) == NULL) {
		rc = cli_oom();
		goto out;
	}
	if ((e = sg_metrics_new(&P.reg, 16u << 20, C.workers > 1, &err)) != 0 ||
	    (e = metrics_declare(P.reg, C.metrics_prefix, &P.m, &err)) != 0 ||
	    (P.gw_edge && (e = metrics_declare_gateway(P.reg, &P.m,
	    C.lc.enabled, &err)) != 0)) {
		cli_complain(NULL, 0, "metrics: %s", err.text[0] != '\0' ?
		    err.text : sg_strerror(e));
		rc = EX_OSERR;
		goto out;
	}
	if ((rc = open_listener(&P, host, sizeof(host), &port)) != 0) {
		if (rc == EX_USAGE)
			cli_usage(EX_USAGE);
		goto out;
	}
	if (C.port_file != NULL) {
		snprintf(buf, sizeof(buf), "%u\n", port);
		if ((e = write_file_atomic(C.port_file, buf)) != 0) {
			cli_complain(NULL, 0, "cannot write port file '%s': %s",
			    C.port_file, strerror(e));
			rc = EX_CANTCREAT;
			goto out;
		}
	}
	if (C.pid_file != NULL) {
		snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
		if ((e = write_file_atomic(C.pid_file, buf)) != 0) {
			cli_complain(NULL, 0, "cannot write pid file '%s': %s",
			    C.pid_file, strerror(e));
			rc = EX_CANTCREAT;
			goto out;
		}
		pid_written = true;
	}
	printf(strchr(host, ':') != NULL ? "listening on [%s]:%u\n" :
	    "listening on %s:%u\n", host, port);
	if (fflush(stdout) != 0) {
		rc = EX_IOERR;
		goto out;
	}
	/* The cluster file moves into the worker(s). */
	if (cf != NULL) {
		cgen *g = NULL;

		if ((rc = gen_build(&P, cf, &g, &err)) != 0) {
			cli_complain(NULL, 0, "%s", err.text);
			rc = EX_SOFTWARE;
			goto out;
		}
		cf = NULL;
		gen_install(&P, g);
	}
	rc = C.workers == 1 ? worker_run(&P) : master(&P);
out:
	if (pid_written)
		unlink(C.pid_file);
	sg_clusterfile_free(cf);
	cleanup(&P);
	return rc;
}

/* Everything main() made; also run by a worker before it exits. */
static void
cleanup(proxy *p)
{
	if (p->gen != NULL)
		gen_unref(p->gen);
	p->gen = NULL;
	cstates_free(p);
	sg_fleet_free(p->fleet);
	p->fleet = NULL;
	sg_router_free(p->rt);
	p->rt = NULL;
	sg_lbconf_free(p->lb);
	p->lb = NULL;
	gateway_free_keys(p);
	sg_metrics_free(p->reg);
	p->reg = NULL;
	sg_logger_free(p->log);
	p->log = NULL;
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	p->listen_fd = -1;
	curl_global_cleanup();
}

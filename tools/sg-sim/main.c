/*
 * sg-sim — discrete-event simulation of session-aware routing: the real
 * libstargate router in virtual time against clusters of the shared engine
 * model, one row per algorithm and last_cluster_affinity setting.  This file
 * parses options, runs the rows (optionally on several threads; each row is
 * independent, so the output does not depend on the thread count) and
 * writes the reports.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "sg-sim/sim.h"

static const char *progname = "sg-sim";

enum {
	OPT_HELP = CHAR_MAX + 1,
	OPT_VERSION,
	OPT_CSV,
	OPT_JSON,
	OPT_ROWS,
	OPT_SEED,
	OPT_SVG,
	OPT_EXPORT,
};

static const struct option longopts[] = {
	{ "jobs",	required_argument,	NULL,	'j' },
	{ "check",	no_argument,		NULL,	'n' },
	{ "verbose",	no_argument,		NULL,	'v' },
	{ "csv",	no_argument,		NULL,	OPT_CSV },
	{ "json",	no_argument,		NULL,	OPT_JSON },
	{ "rows",	required_argument,	NULL,	OPT_ROWS },
	{ "seed",	required_argument,	NULL,	OPT_SEED },
	{ "svg",	required_argument,	NULL,	OPT_SVG },
	{ "export-trace", required_argument,	NULL,	OPT_EXPORT },
	{ "help",	no_argument,		NULL,	OPT_HELP },
	{ "version",	no_argument,		NULL,	OPT_VERSION },
	{ NULL,		0,			NULL,	0 }
};

static void __attribute__((noreturn))
usage(int status)
{
	fprintf(status == EX_OK ? stdout : stderr,
	    "usage: %s [-nv] [-j jobs] [--csv | --json] [--rows list] [--seed n]\n"
	    "       [--svg file] scenario.json | -\n"
	    "       %s [--seed n] --export-trace file scenario.json | -\n"
	    "       %s -h | --help | --version\n", progname, progname,
	    progname);
	exit(status);
}

typedef struct work {
	const scenario	*sc;
	const sim_traffic *tr;		/* drawn once for every row, or NULL */
	sim_result	*res;
	int		*rc;
	sg_error	*err;
	double		*secs;
	size_t		 next;
	pthread_mutex_t	 mu;
} work;

static double
mono(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *
worker(void *arg)
{
	work *w = arg;

	for (;;) {
		size_t i;
		double t0;

		pthread_mutex_lock(&w->mu);
		i = w->next++;
		pthread_mutex_unlock(&w->mu);
		if (i >= w->sc->nrows)
			break;
		t0 = mono();
		sg_error_clear(&w->err[i]);
		w->rc[i] = sim_run_traffic(w->sc, &w->sc->rows[i], w->tr,
		    &w->res[i], &w->err[i]);
		w->secs[i] = mono() - t0;
	}
	return NULL;
}

/* --export-trace: the scenario's sessions as NDJSON ("-": stdout). */
static int
write_trace(const char *path, const scenario *sc)
{
	FILE *fp = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
	int rc;

	if (sc->has_trace) {
		fprintf(stderr, "%s: --export-trace: the scenario replays a "
		    "trace already\n", progname);
		if (fp != stdout && fp != NULL)
			fclose(fp);
		return EX_USAGE;
	}
	if (fp == NULL) {
		fprintf(stderr, "%s: cannot create '%s': %s\n", progname, path,
		    strerror(errno));
		return EX_CANTCREAT;
	}
	rc = trace_export(fp, sc);
	if (fp == stdout ? fflush(fp) != 0 || ferror(fp) : fclose(fp) != 0)
		rc = -1;
	if (rc != 0) {
		fprintf(stderr, "%s: cannot write '%s'\n", progname, path);
		return EX_IOERR;
	}
	return EX_OK;
}

/* What the command line asks for. */
struct cli {
	const char	*svg, *rows, *export;
	uint64_t	 seed, jobs;
	bool		 has_seed, verbose, check;
	int		 fmt;		/* 0, OPT_CSV or OPT_JSON */
};

/* Parse the options into o; usage errors, -h and --version exit here. */
static void
parse_args(int argc, char *argv[], struct cli *o)
{
	int ch;

	while ((ch = getopt_long(argc, argv, "hj:nv", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			if (sg_parse_u64(optarg, strlen(optarg), SIM_MAX_ROWS,
			    &o->jobs) != 0 || o->jobs == 0) {
				fprintf(stderr, "%s: --jobs: expected 1 to %d\n",
				    progname, SIM_MAX_ROWS);
				usage(EX_USAGE);
			}
			break;
		case 'n':
			o->check = true;
			break;
		case 'v':
			o->verbose = true;
			break;
		case OPT_CSV:
		case OPT_JSON:
			if (o->fmt != 0 && o->fmt != ch) {
				fprintf(stderr, "%s: --csv and --json exclude "
				    "each other\n", progname);
				usage(EX_USAGE);
			}
			o->fmt = ch;
			break;
		case OPT_ROWS:
			o->rows = optarg;
			break;
		case OPT_SEED:
			if (sg_parse_u64(optarg, strlen(optarg), UINT64_MAX,
			    &o->seed) != 0) {
				fprintf(stderr, "%s: --seed: expected an unsigned "
				    "64-bit integer\n", progname);
				usage(EX_USAGE);
			}
			o->has_seed = true;
			break;
		case OPT_SVG:
			o->svg = optarg;
			break;
		case OPT_EXPORT:
			o->export = optarg;
			break;
		case 'h':
		case OPT_HELP:
			usage(EX_OK);
		case OPT_VERSION:
			printf("%s %s\n", progname, SG_VERSION);
			exit(fflush(stdout) == 0 && !ferror(stdout) ? EX_OK :
			    EX_IOERR);
		default:
			usage(EX_USAGE);
		}
	}
}

/* Every row, on up to jobs threads (this one among them); returns how many. */
static uint64_t
run_rows(work *w, uint64_t jobs)
{
	pthread_t th[SIM_MAX_ROWS];
	size_t i, nth;

	pthread_mutex_init(&w->mu, NULL);
	if (jobs > w->sc->nrows)
		jobs = w->sc->nrows;
	for (nth = 0; nth + 1 < jobs; nth++)
		if (pthread_create(&th[nth], NULL, worker, w) != 0)
			break;
	worker(w);
	for (i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&w->mu);
	return jobs;
}

/*
 * The first row's error, if any (its exit status), and with -v every row's
 * speed and the total's (total seconds, traffic drawn included, on jobs
 * threads).
 */
static int
rows_status(const work *w, const struct cli *o, double total, uint64_t jobs)
{
	const scenario *sc = w->sc;
	uint64_t simulated = 0;
	size_t i;

	for (i = 0; i < sc->nrows; i++) {
		const sim_result *r = &w->res[i];

		if (w->rc[i] != 0) {
			fprintf(stderr, "%s: %s\n", progname, w->err[i].text);
			return w->rc[i] == SG_ENOMEM ? EX_OSERR : EX_SOFTWARE;
		}
		simulated += r->simulated;
		if (o->verbose)
			fprintf(stderr, "%s: row %s: %llu requests (%llu "
			    "decisions, %llu background) in %.3f s: %.0f "
			    "requests/s\n", progname, sc->rows[i].name,
			    (unsigned long long)r->simulated,
			    (unsigned long long)r->decisions,
			    (unsigned long long)r->background, w->secs[i],
			    w->secs[i] > 0 ? (double)r->simulated /
			    w->secs[i] : 0);
	}
	if (o->verbose)
		fprintf(stderr, "%s: %zu rows, %llu requests in %.3f s "
		    "(%llu thread%s): %.0f requests/s\n", progname, sc->nrows,
		    (unsigned long long)simulated, total,
		    (unsigned long long)jobs, jobs == 1 ? "" : "s",
		    total > 0 ? (double)simulated / total : 0);
	return EX_OK;
}

static int
write_svg(const char *path, const scenario *sc, const sim_result *res)
{
	FILE *fp = fopen(path, "w");
	int rc;

	if (fp == NULL) {
		fprintf(stderr, "%s: cannot create '%s': %s\n", progname,
		    path, strerror(errno));
		return EX_CANTCREAT;
	}
	rc = report_svg(fp, sc, res);
	if (fclose(fp) != 0 || rc != 0) {
		fprintf(stderr, "%s: cannot write '%s'\n", progname, path);
		return EX_IOERR;
	}
	return EX_OK;
}

static int
write_report(int fmt, const scenario *sc, const sim_result *res)
{
	int rc;

	if (fmt == OPT_JSON)
		rc = report_json(stdout, sc, res);
	else if (fmt == OPT_CSV)
		rc = report_csv(stdout, sc, res);
	else
		rc = report_table(stdout, sc, res);
	if (rc != 0 || fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: cannot write the standard output\n",
		    progname);
		return EX_IOERR;
	}
	return EX_OK;
}

int
main(int argc, char *argv[])
{
	struct cli o = { NULL, NULL, NULL, 0, 1, false, false, false, 0 };
	sim_result res[SIM_MAX_ROWS];
	sg_error errs[SIM_MAX_ROWS], err;
	double secs[SIM_MAX_ROWS], t0;
	uint64_t jobs;
	int rcs[SIM_MAX_ROWS];
	scenario sc;
	sim_traffic *tr = NULL;
	work w;
	int rc, status = EX_OK;

	parse_args(argc, argv, &o);
	argc -= optind;
	argv += optind;
	if (argc != 1)
		usage(EX_USAGE);

	sg_error_clear(&err);
	if ((rc = scenario_load(&sc, argv[0], &err)) != 0) {
		fprintf(stderr, "%s: %s\n", progname, err.text);
		return rc == SG_EINVAL ? EX_DATAERR : rc == SG_ENOMEM ?
		    EX_OSERR : EX_NOINPUT;
	}
	if (o.rows != NULL && scenario_select_rows(&sc, o.rows, &err) != 0) {
		fprintf(stderr, "%s: %s\n", progname, err.text);
		scenario_free(&sc);
		return EX_USAGE;
	}
	if (o.has_seed)
		sc.seed = o.seed;
	if (o.check)
		goto out;
	if (o.export != NULL) {
		status = write_trace(o.export, &sc);
		goto out;
	}

	memset(&w, 0, sizeof(w));
	w.sc = &sc;
	w.res = res;
	w.rc = rcs;
	w.err = errs;
	w.secs = secs;
	t0 = mono();
	/* Rows replay the same traffic: with several, it is drawn once. */
	if (sc.nrows > 1 && (rc = sim_traffic_new(&sc, &tr, &err)) != 0) {
		fprintf(stderr, "%s: %s\n", progname, err.text);
		status = EX_OSERR;
		goto out;
	}
	w.tr = tr;
	jobs = run_rows(&w, o.jobs);
	if ((status = rows_status(&w, &o, mono() - t0, jobs)) != EX_OK)
		goto out;
	if (o.svg != NULL && (status = write_svg(o.svg, &sc, res)) != EX_OK)
		goto out;
	status = write_report(o.fmt, &sc, res);
out:
	sim_traffic_free(tr);
	scenario_free(&sc);
	return status;
}

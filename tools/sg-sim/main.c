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

int
main(int argc, char *argv[])
{
	const char *svg = NULL, *rows = NULL, *export = NULL;
	sim_result res[SIM_MAX_ROWS];
	sg_error errs[SIM_MAX_ROWS], err;
	double secs[SIM_MAX_ROWS], t0, total;
	int rcs[SIM_MAX_ROWS];
	pthread_t th[SIM_MAX_ROWS];
	scenario sc;
	sim_traffic *tr = NULL;
	work w;
	uint64_t seed = 0, jobs = 1, simulated = 0;
	bool has_seed = false, verbose = false, check = false;
	int ch, fmt = 0, rc, status = EX_OK;
	size_t i, nth = 0;

	while ((ch = getopt_long(argc, argv, "hj:nv", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			if (sg_parse_u64(optarg, strlen(optarg), SIM_MAX_ROWS,
			    &jobs) != 0 || jobs == 0) {
				fprintf(stderr, "%s: --jobs: expected 1 to %d\n",
				    progname, SIM_MAX_ROWS);
				usage(EX_USAGE);
			}
			break;
		case 'n':
			check = true;
			break;
		case 'v':
			verbose = true;
			break;
		case OPT_CSV:
		case OPT_JSON:
			if (fmt != 0 && fmt != ch) {
				fprintf(stderr, "%s: --csv and --json exclude "
				    "each other\n", progname);
				usage(EX_USAGE);
			}
			fmt = ch;
			break;
		case OPT_ROWS:
			rows = optarg;
			break;
		case OPT_SEED:
			if (sg_parse_u64(optarg, strlen(optarg), UINT64_MAX,
			    &seed) != 0) {
				fprintf(stderr, "%s: --seed: expected an unsigned "
				    "64-bit integer\n", progname);
				usage(EX_USAGE);
			}
			has_seed = true;
			break;
		case OPT_SVG:
			svg = optarg;
			break;
		case OPT_EXPORT:
			export = optarg;
			break;
		case 'h':
		case OPT_HELP:
			usage(EX_OK);
		case OPT_VERSION:
			printf("%s %s\n", progname, SG_VERSION);
			return fflush(stdout) == 0 && !ferror(stdout) ? EX_OK :
			    EX_IOERR;
		default:
			usage(EX_USAGE);
		}
	}
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
	if (rows != NULL && scenario_select_rows(&sc, rows, &err) != 0) {
		fprintf(stderr, "%s: %s\n", progname, err.text);
		scenario_free(&sc);
		return EX_USAGE;
	}
	if (has_seed)
		sc.seed = seed;
	if (check)
		goto out;
	if (export != NULL) {
		status = write_trace(export, &sc);
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
	pthread_mutex_init(&w.mu, NULL);
	if (jobs > sc.nrows)
		jobs = sc.nrows;
	for (nth = 0; nth + 1 < jobs; nth++)
		if (pthread_create(&th[nth], NULL, worker, &w) != 0)
			break;
	worker(&w);
	for (i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	total = mono() - t0;
	pthread_mutex_destroy(&w.mu);

	for (i = 0; i < sc.nrows; i++) {
		if (rcs[i] != 0) {
			fprintf(stderr, "%s: %s\n", progname, errs[i].text);
			status = rcs[i] == SG_ENOMEM ? EX_OSERR : EX_SOFTWARE;
			goto out;
		}
		simulated += res[i].simulated;
		if (verbose)
			fprintf(stderr, "%s: row %s: %llu requests (%llu "
			    "decisions, %llu background) in %.3f s: %.0f "
			    "requests/s\n", progname, sc.rows[i].name,
			    (unsigned long long)res[i].simulated,
			    (unsigned long long)res[i].decisions,
			    (unsigned long long)res[i].background, secs[i],
			    secs[i] > 0 ? (double)res[i].simulated / secs[i] :
			    0);
	}
	if (verbose)
		fprintf(stderr, "%s: %zu rows, %llu requests in %.3f s "
		    "(%llu thread%s): %.0f requests/s\n", progname, sc.nrows,
		    (unsigned long long)simulated, total,
		    (unsigned long long)jobs, jobs == 1 ? "" : "s",
		    total > 0 ? (double)simulated / total : 0);

	if (svg != NULL) {
		FILE *fp = fopen(svg, "w");

		if (fp == NULL) {
			fprintf(stderr, "%s: cannot create '%s': %s\n", progname,
			    svg, strerror(errno));
			status = EX_CANTCREAT;
			goto out;
		}
		rc = report_svg(fp, &sc, res);
		if (fclose(fp) != 0 || rc != 0) {
			fprintf(stderr, "%s: cannot write '%s'\n", progname, svg);
			status = EX_IOERR;
			goto out;
		}
	}
	if (fmt == OPT_JSON)
		rc = report_json(stdout, &sc, res);
	else if (fmt == OPT_CSV)
		rc = report_csv(stdout, &sc, res);
	else
		rc = report_table(stdout, &sc, res);
	if (rc != 0 || fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: cannot write the standard output\n",
		    progname);
		status = EX_IOERR;
	}
out:
	sim_traffic_free(tr);
	scenario_free(&sc);
	return status;
}

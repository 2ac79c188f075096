/*
 * sg-bench — benchmarks of the Stargate toolkit.  One program, one mode per
 * measured part:
 *   sg-bench decide ...   per-decision latency of every algorithm (decide.c)
 *   sg-bench store ...    last-cluster store lookups and writes (store.c)
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "sg-bench/bench.h"

static void
usage(FILE *fp)
{
	fprintf(fp,
	    "usage: sg-bench decide [options]\n"
	    "       sg-bench store [options]\n"
	    "       sg-bench -h | --help | --version\n"
	    "Run 'sg-bench MODE --help' for the options of a mode.\n");
}

int
main(int argc, char *argv[])
{
	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return EX_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sg-bench %s\n", SG_VERSION);
		return EX_OK;
	}
	if (strcmp(argv[1], "decide") == 0)
		return bench_decide_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "store") == 0)
		return bench_store_main(argc - 1, argv + 1);
	fprintf(stderr, "sg-bench: unknown mode '%s'\n", argv[1]);
	usage(stderr);
	return EX_USAGE;
}

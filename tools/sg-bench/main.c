/*
 * sg-bench — benchmarks of the Stargate toolkit.  One program, one mode per
 * measured part:
 *   sg-bench decide ...   per-decision latency of every algorithm (decide.c)
 *   sg-bench store ...    last-cluster store lookups and writes (store.c)
 *   sg-bench report ...   every comparison, one report: runs the script
 *                         tools/sg-bench/report.sh found near this program
 *                         (installed as share/stargate/sg-bench-report.sh)
 *                         with -b set to this program's directory
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "sg-bench/bench.h"

static void
usage(FILE *fp)
{
	fprintf(fp,
	    "usage: sg-bench decide [options]\n"
	    "       sg-bench store [options]\n"
	    "       sg-bench report [-o dir] [-r runs] [-q] [-P]\n"
	    "       sg-bench -h | --help | --version\n"
	    "Run 'sg-bench MODE --help' for the options of a mode.\n");
}

/*
 * `sg-bench report`: exec sh report.sh -b BINDIR ARGS..., the script
 * looked for as BINDIR/../share/stargate/sg-bench-report.sh, then as
 * tools/sg-bench/report.sh in BINDIR's parents (a build tree).
 */
static int
report_main(int argc, char *argv[])
{
	char self[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 64];
	char *args[64], *slash;
	ssize_t len;
	int i, up, n = 0;

	if ((len = readlink("/proc/self/exe", self, sizeof(self) - 1)) < 0) {
		fprintf(stderr, "sg-bench: /proc/self/exe: %s\n",
		    strerror(errno));
		return EX_OSERR;
	}
	self[len] = '\0';
	memcpy(dir, self, (size_t)len + 1);
	if ((slash = strrchr(dir, '/')) != NULL)
		*slash = '\0';
	snprintf(path, sizeof(path), "%s/../share/stargate/sg-bench-report.sh",
	    dir);
	for (up = 1; access(path, R_OK) != 0 && up <= 4; up++) {
		int k, off;

		off = snprintf(path, sizeof(path), "%s", dir);
		for (k = 0; k < up && off < (int)sizeof(path); k++)
			off += snprintf(path + off, sizeof(path) - (size_t)off,
			    "/..");
		if (off < (int)sizeof(path))
			snprintf(path + off, sizeof(path) - (size_t)off,
			    "/tools/sg-bench/report.sh");
	}
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "sg-bench: report: the report script is not "
		    "installed next to %s\n", self);
		return EX_UNAVAILABLE;
	}
	if (argc > 58) {
		fprintf(stderr, "sg-bench: report: too many arguments\n");
		return EX_USAGE;
	}
	args[n++] = "sh";
	args[n++] = path;
	args[n++] = "-b";
	args[n++] = dir;
	for (i = 1; i < argc; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	execvp("sh", args);
	fprintf(stderr, "sg-bench: report: sh: %s\n", strerror(errno));
	return EX_OSERR;
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
	if (strcmp(argv[1], "report") == 0)
		return report_main(argc - 1, argv + 1);
	fprintf(stderr, "sg-bench: unknown mode '%s'\n", argv[1]);
	usage(stderr);
	return EX_USAGE;
}

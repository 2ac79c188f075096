/*
 * driver.c — run a fuzz target over files without libFuzzer.
 *
 *   fuzz_<name> FILE|DIR...
 *
 * Every file named, and every regular file in every directory named (in
 * name order), is fed once to the target's LLVMFuzzerTestOneInput().  This
 * is how `make test` replays each committed corpus under the project's
 * own sanitizer build: a crash, a sanitizer report or a failed property
 * (an abort) ends the run with a non-zero status; otherwise the driver
 * prints how many inputs it ran and exits 0.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Targets without one-time setup do not define it. */
#pragma weak LLVMFuzzerInitialize

static int
run_file(const char *path, size_t *count)
{
	FILE *f;
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;
	int rc = 0;

	if ((f = fopen(path, "rb")) == NULL) {
		fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
		return 1;
	}
	for (;;) {
		if (cap - len < 65536) {
			uint8_t *b = realloc(buf, cap + 65536);

			if (b == NULL) {
				fprintf(stderr, "driver: out of memory\n");
				rc = 1;
				goto out;
			}
			buf = b;
			cap += 65536;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "driver: %s: read error\n", path);
		rc = 1;
		goto out;
	}
	/* An exact-size copy, so ASan sees reads past the input's end. */
	{
		uint8_t *exact = malloc(len > 0 ? len : 1);

		if (exact == NULL) {
			rc = 1;
			goto out;
		}
		memcpy(exact, buf, len);
		(void)LLVMFuzzerTestOneInput(exact, len);
		free(exact);
	}
	(*count)++;
out:
	free(buf);
	fclose(f);
	return rc;
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
run_dir(const char *dir, size_t *count)
{
	DIR *d;
	struct dirent *e;
	char **names = NULL, path[4096];
	size_t n = 0, cap = 0, i;
	struct stat st;
	int rc = 0;

	if ((d = opendir(dir)) == NULL) {
		fprintf(stderr, "driver: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **nn = realloc(names, (cap + 64) * sizeof(*nn));

			if (nn == NULL) {
				rc = 1;
				goto out;
			}
			names = nn;
			cap += 64;
		}
		if ((names[n] = strdup(e->d_name)) == NULL) {
			rc = 1;
			goto out;
		}
		n++;
	}
	qsort(names, n, sizeof(*names), cmp_names);
	for (i = 0; i < n && rc == 0; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
		    names[i]) >= sizeof(path) || stat(path, &st) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		rc = run_file(path, count);
	}
out:
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
}

int
main(int argc, char *argv[])
{
	struct stat st;
	size_t count = 0;
	int i, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 64;
	}
	if (LLVMFuzzerInitialize != NULL)
		(void)LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc && rc == 0; i++) {
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "driver: %s: %s\n", argv[i],
			    strerror(errno));
			rc = 1;
		} else if (S_ISDIR(st.st_mode))
			rc = run_dir(argv[i], &count);
		else
			rc = run_file(argv[i], &count);
	}
	if (rc == 0)
		printf("%zu inputs\n", count);
	return rc == 0 ? 0 : 66;
}

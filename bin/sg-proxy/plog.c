/*
 * plog.c — the clock and the log sink of sg-proxy.
 *
 * Log records are built by libstargate's sg_log (logfmt, secrets only in
 * hashed form); this sink writes each one to stderr with a single
 * write(2), so that lines of several workers never interleave.  Times:
 * mono_ms() for every duration and deadline, wall_s() only for the "ts"
 * of log records.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy.h"

double
mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
}

size_t
fmt_label(char *buf, size_t cap, const char *prefix, uint64_t v)
{
	char d[20];
	size_t n = 0, pl = strlen(prefix), i;

	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	if (pl + n >= cap)
		pl = n = 0;
	memcpy(buf, prefix, pl);
	for (i = 0; i < n; i++)
		buf[pl + i] = d[n - 1 - i];
	buf[pl + n] = '\0';
	return pl + n;
}

double
wall_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void
ms_to_tv(double ms, struct timeval *tv)
{
	long long us;

	if (!(ms > 0))
		ms = 0;
	if (ms > 1e12)
		ms = 1e12;
	/* Round up: a timer must not fire before the time it stands for. */
	us = (long long)(ms * 1000.0);
	if ((double)us < ms * 1000.0)
		us++;
	tv->tv_sec = (time_t)(us / 1000000);
	tv->tv_usec = (suseconds_t)(us % 1000000);
}

/* Records end in a newline; one write(2) each. */
static void
sink(void *ctx, int level, const char *line, size_t len)
{
	(void)ctx;
	(void)level;
	(void)!write(STDERR_FILENO, line, len);
}

sg_logger *
plog_new(int level)
{
	sg_logger *lg = NULL;

	if (sg_logger_new(&lg, level, sink, NULL, NULL) != 0)
		return NULL;
	return lg;
}

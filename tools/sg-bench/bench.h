/*
 * bench.h — the modes of sg-bench.  Each takes argv with argv[0] = mode
 * name, parses its own options (getopt_long) and returns a sysexits code.
 */
#ifndef SG_BENCH_H
#define SG_BENCH_H

int	bench_decide_main(int argc, char *argv[]);	/* decide.c */
int	bench_store_main(int argc, char *argv[]);	/* store.c */

#endif

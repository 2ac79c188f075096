/*
 * fuzz.h — what every fuzz target in tests/fuzz/ shares.
 *
 * A target is one file fuzz_<name>.c defining LLVMFuzzerTestOneInput()
 * (and, when it needs one-time setup, LLVMFuzzerInitialize()).  It is
 * built twice: with clang -fsanitize=fuzzer,address,undefined for
 * `make fuzz`, and with the project's compiler and sanitizers, linked to
 * driver.c, which feeds it every file of its corpus once (`make test`).
 * A target checks properties with FZ_ASSERT, which aborts: libFuzzer and
 * the driver both report an abort as a failure.
 *
 * Structured targets read their input through a small cursor (fz_in):
 * bytes past the end read as zero, so every input is a valid program.
 */
#ifndef SG_FUZZ_H
#define SG_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int	LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * bin/common/cli.c points argv[0] at the program's name from .init_array;
 * libFuzzer re-executes argv[0] (-merge, -fork) and copies argv before any
 * hook of ours, so a target linking cli.o puts the real path back with
 * FZ_RESTORE_ARGV0, an .init_array entry of its own that runs after
 * cli.o's (the Makefile links the target's object after cli.o).
 */
#define FZ_RESTORE_ARGV0						\
static void								\
fz_argv0(int argc, char **argv, char **envp)				\
{									\
	static char exe[4096];						\
	ssize_t n;							\
									\
	(void)envp;							\
	if (argc > 0 && (n = readlink("/proc/self/exe", exe,		\
	    sizeof(exe) - 1)) > 0) {					\
		exe[n] = '\0';						\
		argv[0] = exe;						\
	}								\
}									\
__attribute__((section(".init_array"), used))				\
static void (*const fz_argv0_init)(int, char **, char **) = fz_argv0

/* A property that must hold; on failure print where and abort. */
#define FZ_ASSERT(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: property failed: %s\n",		\
		    __FILE__, __LINE__, #cond);				\
		abort();						\
	}								\
} while (0)

/* A cursor over the fuzz input. */
typedef struct fz_in {
	const uint8_t	*p;
	size_t		 n;
} fz_in;

static inline uint8_t
fz_u8(fz_in *in)
{
	uint8_t v = 0;

	if (in->n > 0) {
		v = *in->p++;
		in->n--;
	}
	return v;
}

static inline uint32_t
fz_u32(fz_in *in)
{
	uint32_t v = 0;
	int i;

	for (i = 0; i < 4; i++)
		v = v << 8 | fz_u8(in);
	return v;
}

static inline uint64_t
fz_u64(fz_in *in)
{
	return (uint64_t)fz_u32(in) << 32 | fz_u32(in);
}

/* A value below n (n > 0). */
static inline size_t
fz_below(fz_in *in, size_t n)
{
	return n <= 256 ? fz_u8(in) % n : fz_u32(in) % n;
}

static inline bool
fz_bool(fz_in *in)
{
	return fz_u8(in) & 1;
}

/* Split text[0..n) at the first "\n\n" (or "\r\n\r\n"): *head is what
 * comes before, *body what follows (empty when there is no separator). */
static inline void
fz_split(const char *text, size_t n, size_t *head, const char **body,
    size_t *blen)
{
	size_t i;

	for (i = 0; i + 1 < n; i++) {
		if (text[i] == '\n' && text[i + 1] == '\n') {
			*head = i + 1;
			*body = text + i + 2;
			*blen = n - i - 2;
			return;
		}
		if (i + 3 < n && memcmp(text + i, "\r\n\r\n", 4) == 0) {
			*head = i + 2;
			*body = text + i + 4;
			*blen = n - i - 4;
			return;
		}
	}
	*head = n;
	*body = text + n;
	*blen = 0;
}

#endif /* SG_FUZZ_H */

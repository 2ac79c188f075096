/*
 * allocfail.c — an LD_PRELOAD shim that counts the allocations of a running
 * program and makes chosen ones fail, so that a test can walk every
 * allocation on a request path (tools/allocfail/README).
 *
 * It interposes malloc(3), calloc, realloc, reallocarray, free, strdup(3),
 * strndup, posix_memalign(3), aligned_alloc, memalign, valloc and pvalloc.
 * Each wrapper calls the next definition in the lookup order (dlsym(3)
 * RTLD_NEXT): glibc's allocator, or the sanitizer's when the shim is loaded
 * in front of libasan.  strdup and strndup are implemented on the shim's
 * malloc, so each is one allocation, counted once.
 *
 * Control: a page of 64-bit slots shared with the controller.  With
 * ALLOCFAIL_CTL=FILE the page is FILE mapped MAP_SHARED (created and grown
 * to one page if needed); without it the page is private and only the
 * environment sets it.  The slots (index: name):
 *
 *   0 magic     "ALLOCFL1" once the shim has mapped the page
 *   1 pid       the process that owns the page (a forked child never
 *               touches it: pthread_atfork(3) turns the shim off there)
 *   2 armed     controller: nonzero counts and injects; 0 does neither
 *   3 fail_at   controller: the armed allocation number to fail (1-based;
 *               0 counts only)
 *   4 fail_run  controller: how many allocations to fail from fail_at on
 *               (0 means 1; UINT64_MAX: every one until disarmed)
 *   5 count     allocations seen while armed (the controller zeroes it
 *               before arming)
 *   6 injected  failures injected so far
 *   7 live      allocations not yet freed (signed), always kept
 *   8 bytes     their usable bytes (malloc_usable_size(3)), always kept
 *               (0 in front of libasan, whose malloc_usable_size refuses
 *               the blocks of its own start-up pool)
 *   9 total     allocations ever
 *  10 fail_ra   return address of the last failed call (the caller)
 *  11 fail_n    the armed allocation number of that failure
 *  12 nskip     controller: how many skip ranges follow (at most 16)
 *  13 skipped   allocations that were to fail but called from a skip range
 *  16 + 2i, 17 + 2i  skip range i: [lo, hi) of code addresses (a
 *               function known to crash on a failure it cannot report,
 *               in a library we do not own); an allocation with a frame
 *               in a skip range on its stack never fails
 *  48 nframes   the depth of the stack below recorded (at most 16)
 *  49 .. 64     the stack of the last failed call, innermost first
 *
 * The environment gives the starting values: ALLOCFAIL_NTH (fail_at),
 * ALLOCFAIL_RUN (fail_run), ALLOCFAIL_ARM=1 (armed from the first
 * allocation; otherwise the controller arms it after startup).
 *
 * Every slot is a C11 atomic, so the program's threads (sg-proxy's store
 * thread) and the controller may touch them at once; the allocation
 * number is a fetch-and-add, so "the Nth allocation" is well defined
 * across threads (which thread gets it depends on their interleaving).
 *
 * Bootstrap: dlsym itself may call calloc before the real functions are
 * known.  While they are being looked up, allocations come from a small
 * static arena (never freed, never counted); free and realloc recognise
 * arena pointers by address.
 *
 * A failed call returns NULL (posix_memalign: ENOMEM) and sets errno to
 * ENOMEM, as the real allocator does when memory runs out.  realloc(p, 0)
 * with p not NULL frees p and is no failure point; realloc failing leaves
 * p allocated, as realloc(3) documents.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define AF_MAGIC	0x314c46434f4c4c41ull	/* "ALLOCFL1" little-endian */
#define AF_PAGE		4096
#define AF_ARENA	(256u << 10)
#define AF_FRAMES	48		/* stack depth the skip ranges see */

enum {
	S_MAGIC, S_PID, S_ARMED, S_FAIL_AT, S_FAIL_RUN, S_COUNT, S_INJECTED,
	S_LIVE, S_BYTES, S_TOTAL, S_FAIL_RA, S_FAIL_N, S_NSKIP, S_SKIPPED,
	S_SKIP = 16, S_SKIP_MAX = 16,
	S_NFRAMES = 48, S_FRAMES = 49, S_FRAMES_MAX = 16,
	S_NSLOTS = S_FRAMES + S_FRAMES_MAX
};

typedef void	*(*malloc_fn)(size_t);
typedef void	*(*calloc_fn)(size_t, size_t);
typedef void	*(*realloc_fn)(void *, size_t);
typedef void	 (*free_fn)(void *);
typedef int	 (*pmemalign_fn)(void **, size_t, size_t);
typedef void	*(*memalign_fn)(size_t, size_t);
typedef void	*(*valloc_fn)(size_t);
typedef size_t	 (*usable_fn)(void *);

static malloc_fn	real_malloc;
static calloc_fn	real_calloc;
static realloc_fn	real_realloc;
static free_fn		real_free;
static pmemalign_fn	real_posix_memalign;
static memalign_fn	real_aligned_alloc;
static memalign_fn	real_memalign;
static valloc_fn	real_valloc;
static valloc_fn	real_pvalloc;
static usable_fn	real_usable;

static _Atomic int	resolving;
static _Atomic int	resolved;
static _Atomic int	disabled;	/* in a forked child */

static _Atomic uint64_t	private_page[S_NSLOTS];
static _Atomic uint64_t	*ctl = private_page;

/* The bootstrap arena: a bump allocator with a size word before each
 * block. */
static _Alignas(16) unsigned char arena[AF_ARENA];
static _Atomic size_t	arena_used;

static bool
in_arena(const void *p)
{
	const unsigned char *c = p;

	return c >= arena && c < arena + sizeof(arena);
}

static void *
arena_alloc(size_t n, size_t align)
{
	size_t off, start, need;

	if (align < 16)
		align = 16;
	need = n + align + 16;
	if (n > sizeof(arena) || need > sizeof(arena))
		return NULL;
	off = atomic_fetch_add(&arena_used, need);
	if (off + need > sizeof(arena))
		return NULL;
	start = (off + 16 + align - 1) & ~(align - 1);
	memcpy(arena + start - sizeof(size_t), &n, sizeof(size_t));
	return arena + start;
}

static size_t
arena_size(const void *p)
{
	size_t n;

	memcpy(&n, (const unsigned char *)p - sizeof(size_t), sizeof(n));
	return n;
}

static void
resolve(void)
{
	int expect = 0;

	if (atomic_load(&resolved))
		return;
	if (!atomic_compare_exchange_strong(&resolving, &expect, 1))
		return;		/* a nested call: the arena serves it */
	real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
	real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
	real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
	real_free = (free_fn)dlsym(RTLD_NEXT, "free");
	real_posix_memalign = (pmemalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
	real_aligned_alloc = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
	real_memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
	real_valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
	real_pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
	real_usable = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
	/* libasan's refuses the blocks of its own start-up pool: no bytes */
	if (dlsym(RTLD_DEFAULT, "__asan_init") != NULL)
		real_usable = NULL;
	if (real_malloc == NULL || real_calloc == NULL ||
	    real_realloc == NULL || real_free == NULL)
		abort();
	atomic_store(&resolved, 1);
	atomic_store(&resolving, 0);
}

/* True while the real functions are not known: use the arena. */
static bool
bootstrap(void)
{
	if (atomic_load_explicit(&resolved, memory_order_acquire))
		return false;
	resolve();
	return !atomic_load(&resolved);
}

static uint64_t
env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return dflt;
	return (uint64_t)v;
}

static void
on_fork_child(void)
{
	atomic_store(&disabled, 1);
}

static void
map_control(void)
{
	const char *path = getenv("ALLOCFAIL_CTL");
	struct stat st;
	void *m;
	int fd;

	if (path == NULL || *path == '\0')
		return;
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_size < AF_PAGE &&
	    ftruncate(fd, AF_PAGE) != 0) {
		close(fd);
		return;
	}
	m = mmap(NULL, AF_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED)
		ctl = m;
}

__attribute__((constructor)) static void
allocfail_init(void)
{
	resolve();
	map_control();
	atomic_store(&ctl[S_FAIL_AT], env_u64("ALLOCFAIL_NTH", 0));
	atomic_store(&ctl[S_FAIL_RUN], env_u64("ALLOCFAIL_RUN", 1));
	atomic_store(&ctl[S_PID], (uint64_t)getpid());
	(void)pthread_atfork(NULL, NULL, on_fork_child);
	{
		void *fr[2];

		(void)backtrace(fr, 2);		/* loads the unwinder now */
	}
	/* armed last: the shim's own set-up never fails */
	atomic_store(&ctl[S_ARMED], env_u64("ALLOCFAIL_ARM", 0));
	atomic_store(&ctl[S_MAGIC], AF_MAGIC);
}

/*
 * True if a frame of the calling stack is in a skip range.  backtrace(3)
 * loads the unwinder on its first call, which allocates: the constructor
 * calls it once, before anything is armed.
 */
static bool
skipped(void)
{
	void *fr[AF_FRAMES];
	uint64_t a, n, i;
	int nf, f;

	if ((n = atomic_load(&ctl[S_NSKIP])) == 0)
		return false;
	if (n > S_SKIP_MAX)
		n = S_SKIP_MAX;
	nf = backtrace(fr, AF_FRAMES);
	for (f = 0; f < nf; f++) {
		a = (uint64_t)(uintptr_t)fr[f];
		for (i = 0; i < n; i++)
			if (a >= atomic_load(&ctl[S_SKIP + 2 * i]) &&
			    a < atomic_load(&ctl[S_SKIP + 2 * i + 1]))
				return true;
	}
	return false;
}

/* The stack of a failing call, for the controller's report. */
static void
record_stack(void)
{
	void *fr[S_FRAMES_MAX];
	int nf, f;

	/* the innermost frames are the shim's own: the controller drops them */
	nf = backtrace(fr, S_FRAMES_MAX);
	for (f = 0; f < nf; f++)
		atomic_store(&ctl[S_FRAMES + f], (uint64_t)(uintptr_t)fr[f]);
	atomic_store(&ctl[S_NFRAMES], (uint64_t)nf);
}

/* Count one allocation call; true if this one is to fail. */
static bool
inject(void *ra)
{
	uint64_t n, at, run;

	if (atomic_load_explicit(&disabled, memory_order_relaxed))
		return false;
	atomic_fetch_add_explicit(&ctl[S_TOTAL], 1, memory_order_relaxed);
	if (atomic_load_explicit(&ctl[S_ARMED], memory_order_relaxed) == 0)
		return false;
	n = atomic_fetch_add(&ctl[S_COUNT], 1) + 1;
	at = atomic_load(&ctl[S_FAIL_AT]);
	if (at == 0 || n < at)
		return false;
	run = atomic_load(&ctl[S_FAIL_RUN]);
	if (run == 0)
		run = 1;
	if (n - at >= run)
		return false;
	if (skipped()) {
		atomic_fetch_add(&ctl[S_SKIPPED], 1);
		return false;
	}
	atomic_fetch_add(&ctl[S_INJECTED], 1);
	atomic_store(&ctl[S_FAIL_RA], (uint64_t)(uintptr_t)ra);
	atomic_store(&ctl[S_FAIL_N], n);
	record_stack();
	errno = ENOMEM;
	return true;
}

static size_t
usable(void *p)
{
	return real_usable != NULL ? real_usable(p) : 0;
}

static void *
note_alloc(void *p)
{
	if (p != NULL && !atomic_load_explicit(&disabled,
	    memory_order_relaxed)) {
		atomic_fetch_add_explicit(&ctl[S_LIVE], 1,
		    memory_order_relaxed);
		atomic_fetch_add_explicit(&ctl[S_BYTES], usable(p),
		    memory_order_relaxed);
	}
	return p;
}

static void
note_free(void *p)
{
	if (!atomic_load_explicit(&disabled, memory_order_relaxed)) {
		atomic_fetch_sub_explicit(&ctl[S_LIVE], 1,
		    memory_order_relaxed);
		atomic_fetch_sub_explicit(&ctl[S_BYTES], usable(p),
		    memory_order_relaxed);
	}
}

static void *
do_malloc(size_t n, void *ra)
{
	if (bootstrap())
		return arena_alloc(n, 16);
	if (inject(ra))
		return NULL;
	return note_alloc(real_malloc(n));
}

void *
malloc(size_t n)
{
	return do_malloc(n, __builtin_return_address(0));
}

void *
calloc(size_t nmemb, size_t size)
{
	void *p;

	if (bootstrap()) {
		if (size != 0 && nmemb > SIZE_MAX / size)
			return NULL;
		p = arena_alloc(nmemb * size, 16);
		if (p != NULL)
			memset(p, 0, nmemb * size);
		return p;
	}
	if (inject(__builtin_return_address(0)))
		return NULL;
	return note_alloc(real_calloc(nmemb, size));
}

void
free(void *p)
{
	if (p == NULL || in_arena(p))
		return;
	if (bootstrap())
		return;		/* cannot happen: p came from somewhere */
	note_free(p);
	real_free(p);
}

static void *
do_realloc(void *p, size_t n, void *ra)
{
	void *q;
	size_t old;

	if (p == NULL)
		return do_malloc(n, ra);
	if (in_arena(p) || bootstrap()) {
		if ((q = do_malloc(n, ra)) == NULL)
			return NULL;
		old = arena_size(p);
		memcpy(q, p, old < n ? old : n);
		return q;
	}
	if (n == 0) {
		note_free(p);
		return real_realloc(p, 0);
	}
	if (inject(ra))
		return NULL;
	old = usable(p);
	if ((q = real_realloc(p, n)) == NULL)
		return NULL;
	if (!atomic_load_explicit(&disabled, memory_order_relaxed)) {
		atomic_fetch_sub_explicit(&ctl[S_BYTES], old,
		    memory_order_relaxed);
		atomic_fetch_add_explicit(&ctl[S_BYTES], usable(q),
		    memory_order_relaxed);
	}
	return q;
}

void *
realloc(void *p, size_t n)
{
	return do_realloc(p, n, __builtin_return_address(0));
}

void *
reallocarray(void *p, size_t nmemb, size_t size)
{
	if (size != 0 && nmemb > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(p, nmemb * size, __builtin_return_address(0));
}

#undef strdup
#undef strndup

char *
strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d;

	if ((d = do_malloc(n, __builtin_return_address(0))) != NULL)
		memcpy(d, s, n);
	return d;
}

char *
strndup(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	char *d;

	if ((d = do_malloc(n + 1, __builtin_return_address(0))) != NULL) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

int
posix_memalign(void **out, size_t align, size_t n)
{
	void *p;
	int rc;

	if (bootstrap()) {
		if ((p = arena_alloc(n, align)) == NULL)
			return ENOMEM;
		*out = p;
		return 0;
	}
	if (inject(__builtin_return_address(0)))
		return ENOMEM;
	if (real_posix_memalign == NULL)
		return ENOMEM;
	p = NULL;
	rc = real_posix_memalign(&p, align, n);
	if (rc == 0)
		*out = note_alloc(p);
	return rc;
}

/* aligned_alloc, memalign, valloc and pvalloc share one shape. */
static void *
do_aligned(memalign_fn fn, size_t align, size_t n, void *ra)
{
	if (bootstrap())
		return arena_alloc(n, align);
	if (inject(ra))
		return NULL;
	if (fn == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	return note_alloc(fn(align, n));
}

void *
aligned_alloc(size_t align, size_t n)
{
	return do_aligned(real_aligned_alloc, align, n,
	    __builtin_return_address(0));
}

void *
memalign(size_t align, size_t n)
{
	return do_aligned(real_memalign, align, n,
	    __builtin_return_address(0));
}

void *
valloc(size_t n)
{
	if (bootstrap())
		return arena_alloc(n, AF_PAGE);
	if (inject(__builtin_return_address(0)) || real_valloc == NULL)
		return NULL;
	return note_alloc(real_valloc(n));
}

void *
pvalloc(size_t n)
{
	if (bootstrap())
		return arena_alloc((n + AF_PAGE - 1) & ~(size_t)(AF_PAGE - 1),
		    AF_PAGE);
	if (inject(__builtin_return_address(0)) || real_pvalloc == NULL)
		return NULL;
	return note_alloc(real_pvalloc(n));
}

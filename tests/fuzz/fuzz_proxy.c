/*
 * fuzz_proxy.c — sg-proxy's request path end to end: raw client bytes in
 * on a TCP connection, through sg-proxy's HTTP/1.1 server (h1s.c), its
 * handlers (gateway identity, routing, forwarding) and its upstream
 * client to a real engine, and the answer back.
 *
 * One-time setup (LLVMFuzzerInitialize): an sg-mockengine process (the
 * engine; the one built next to this binary, or $FZ_MOCKENGINE) and the
 * real sg-proxy --role all --workers 1 over it, its main() compiled into
 * this binary as sg_proxy_main() and run on a thread of this process, so
 * its code is instrumented and its memory checked with the harness's.
 * The proxy is ready once /readyz answers 200 (stats polled).
 *
 * Each input: control byte [0] (bits 0-2 the size of the pieces the
 * bytes are sent in: 1, 7, 64, 512 or all; bit 3 half-close after
 * sending), then the bytes, sent on a new connection; the answer is read
 * until the proxy closes or stays silent for a short while (longer for
 * the first byte, unless the client half-closed).
 *
 * Properties: whatever the proxy answers starts with an HTTP/1.x status
 * line; and after every input the proxy still answers GET /healthz with
 * 200 within a few seconds (no crash, hang or lost event loop).
 */
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

int	sg_proxy_main(int argc, char *argv[]);

FZ_RESTORE_ARGV0;

#define IDLE_MS		50	/* silence that ends an answer */
#define FIRST_MS	1000	/* wait for a first byte */
#define HEALTH_MS	5000	/* liveness bound */

static char tmpdir[64] = "/tmp/fzproxy.XXXXXX";
static pid_t engine = -1;
static unsigned proxy_port;

static void
path_in(char *out, size_t cap, const char *name)
{
	FZ_ASSERT((size_t)snprintf(out, cap, "%s/%s", tmpdir, name) < cap);
}

static unsigned
wait_port(const char *name)
{
	char path[128], buf[16];
	unsigned port = 0;
	int i, fd;
	ssize_t n;

	path_in(path, sizeof(path), name);
	for (i = 0; i < 1000 && port == 0; i++) {
		if ((fd = open(path, O_RDONLY)) >= 0) {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n > 0) {
				buf[n] = '\0';
				port = (unsigned)strtoul(buf, NULL, 10);
			}
		}
		if (port == 0)
			usleep(10000);
	}
	FZ_ASSERT(port > 0 && port < 65536);
	return port;
}

static void
stop_engine(void)
{
	char path[128];

	if (engine > 0) {
		kill(engine, SIGTERM);
		(void)waitpid(engine, NULL, 0);
		engine = -1;
	}
	path_in(path, sizeof(path), "eng.port");
	unlink(path);
	path_in(path, sizeof(path), "proxy.port");
	unlink(path);
	path_in(path, sizeof(path), "clusters.json");
	unlink(path);
	rmdir(tmpdir);
}

/* The sg-mockengine built beside this binary ($O/fuzz/ or $O/tests/fuzz/). */
static void
engine_path(char *out, size_t cap)
{
	static const char *const rel[] = { "/../bin/sg-mockengine",
	    "/../../bin/sg-mockengine" };
	char exe[PATH_MAX];
	const char *env = getenv("FZ_MOCKENGINE");
	ssize_t n;
	size_t i;
	char *slash;

	if (env != NULL) {
		FZ_ASSERT(strlen(env) < cap);
		memcpy(out, env, strlen(env) + 1);
		return;
	}
	FZ_ASSERT((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) > 0);
	exe[n] = '\0';
	FZ_ASSERT((slash = strrchr(exe, '/')) != NULL);
	*slash = '\0';
	for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		FZ_ASSERT((size_t)snprintf(out, cap, "%s%s", exe, rel[i]) <
		    cap);
		if (access(out, X_OK) == 0)
			return;
	}
	fprintf(stderr, "fuzz_proxy: no sg-mockengine beside %s "
	    "(set FZ_MOCKENGINE)\n", exe);
	abort();
}

static void
start_engine(void)
{
	char bin[PATH_MAX], pf[128];
	int fd;

	engine_path(bin, sizeof(bin));
	path_in(pf, sizeof(pf), "eng.port");
	FZ_ASSERT((engine = fork()) >= 0);
	if (engine == 0) {
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		if ((fd = open("/dev/null", O_RDWR)) >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(bin, "sg-mockengine", "-l", "127.0.0.1", "-p", "0",
		    "--port-file", pf, "--cluster-id", "A", "-m", "llama",
		    "-c", "64", "-t", "4", "--prefill-tps", "100000000",
		    "--decode-tps", "100000000", (char *)NULL);
		_exit(127);
	}
}

static void *
proxy_thread(void *arg)
{
	static char cf[128], pf[128];
	static char *argv[] = { "sg-proxy", "--role", "all", "--listen",
	    "127.0.0.1:0", "--port-file", pf, "--clusters", cf,
	    "--workers", "1", "--log-level", "error", "--max-body-bytes",
	    "65536", "--header-timeout-ms", "2000", "--body-timeout-ms",
	    "2000", "--upstream-timeout-ms", "2000", "--max-retries", "1",
	    NULL };

	(void)arg;
	path_in(cf, sizeof(cf), "clusters.json");
	path_in(pf, sizeof(pf), "proxy.port");
	(void)sg_proxy_main((int)(sizeof(argv) / sizeof(argv[0])) - 1, argv);
	fprintf(stderr, "fuzz_proxy: sg-proxy stopped\n");
	abort();
	return NULL;
}

static int
connect_proxy(void)
{
	struct sockaddr_in sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)proxy_port);
	FZ_ASSERT((fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	FZ_ASSERT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Read into buf until EOF, an error, first_ms of silence before the
 * first byte or idle_ms after it, or total_ms. */
static size_t
read_answer(int fd, char *buf, size_t cap, int first_ms, int idle_ms,
    uint64_t total_ms)
{
	uint64_t end = now_ms() + total_ms;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t len = 0;
	char sink[4096];
	ssize_t n;

	while (now_ms() < end) {
		if (poll(&pfd, 1, len == 0 ? first_ms : idle_ms) <= 0)
			break;
		n = recv(fd, len < cap ? buf + len : sink,
		    len < cap ? cap - len : sizeof(sink), 0);
		if (n <= 0)
			break;
		if (len < cap)
			len += (size_t)n;
	}
	return len;
}

/* GET path answers 200 within HEALTH_MS. */
static bool
answers_200(const char *path)
{
	char req[128], buf[256];
	size_t len;
	int fd = connect_proxy();

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: fuzz\r\n"
	    "Connection: close\r\n\r\n", path);
	(void)send(fd, req, strlen(req), MSG_NOSIGNAL);
	len = read_answer(fd, buf, sizeof(buf) - 1, HEALTH_MS, HEALTH_MS,
	    HEALTH_MS);
	close(fd);
	buf[len] = '\0';
	return len >= 12 && strncmp(buf, "HTTP/1.1 200", 12) == 0;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char cf[128], text[512];
	pthread_t th;
	unsigned eport;
	FILE *f;
	int i;

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	FZ_ASSERT(mkdtemp(tmpdir) != NULL);
	atexit(stop_engine);
	start_engine();
	eport = wait_port("eng.port");
	snprintf(text, sizeof(text), "{\"stats_interval_ms\": 50, "
	    "\"clusters\": [{\"id\": \"A\", \"url\": \"http://127.0.0.1:%u\", "
	    "\"models\": [\"llama\"], \"stats\": {\"format\": \"stargate\"}, "
	    "\"max_engine_concurrency\": 64}]}\n", eport);
	path_in(cf, sizeof(cf), "clusters.json");
	FZ_ASSERT((f = fopen(cf, "w")) != NULL);
	FZ_ASSERT(fputs(text, f) >= 0 && fclose(f) == 0);
	FZ_ASSERT(pthread_create(&th, NULL, proxy_thread, NULL) == 0);
	FZ_ASSERT(pthread_detach(th) == 0);
	proxy_port = wait_port("proxy.port");
	for (i = 0; i < 200 && !answers_200("/readyz"); i++)
		usleep(50000);
	FZ_ASSERT(answers_200("/readyz"));
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pieces[] = { 1, 7, 64, 512, SIZE_MAX, SIZE_MAX,
	    SIZE_MAX, SIZE_MAX };
	static char buf[65536];
	size_t piece, off, n, len;
	int fd;

	if (size < 1 || size > 65536)
		return 0;
	piece = pieces[data[0] & 7];
	fd = connect_proxy();
	for (off = 1; off < size; off += n) {
		n = size - off < piece ? size - off : piece;
		if (send(fd, data + off, n, MSG_NOSIGNAL) < 0)
			break;
	}
	if (data[0] & 0x08)
		(void)shutdown(fd, SHUT_WR);
	/* a complete request takes a routing decision and an engine's
	 * answer: wait for its first byte (a half-close makes the proxy
	 * drop the connection at once, so no wait is needed then) */
	len = read_answer(fd, buf, sizeof(buf), data[0] & 0x08 ? IDLE_MS :
	    FIRST_MS, IDLE_MS, 3000);
	close(fd);
	if (getenv("FZ_PROXY_SHOW") != NULL)	/* debugging: the status line */
		fprintf(stderr, "answer: %.*s\n", (int)strcspn(buf, "\r\n") <
		    (int)len ? (int)strcspn(buf, "\r\n") : (int)len, buf);
#ifdef FZ_SKIP_KNOWN
	/* to fuzz on past /work/fz-bugs.txt item 4 (the version echoed) */
	if (len >= 8 && strncmp(buf, "HTTP/", 5) == 0)
		memcpy(buf, "HTTP/1.", 7);
#endif
	if (len > 0) {
		if (len < 8 || strncmp(buf, "HTTP/1.", 7) != 0)
			fprintf(stderr, "answer: %.*s\n",
			    (int)(len > 200 ? 200 : len), buf);
		FZ_ASSERT(len >= 8 && strncmp(buf, "HTTP/1.", 7) == 0);
	}
	FZ_ASSERT(answers_200("/healthz"));
	return 0;
}

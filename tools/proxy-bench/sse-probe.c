/*
 * sse-probe — the server-sent-events half of tools/proxy-bench/run.
 *
 * One small program with two modes, built by the run script into its
 * temporary directory (never committed as a binary):
 *
 *   sse-probe serve PORTFILE
 *	An HTTP/1.1 keep-alive server on 127.0.0.1 (port 0, written to
 *	PORTFILE).  GET /stats answers a fixed Stargate snapshot cluster
 *	object (so that sg-proxy can poll it), GET /healthz answers "ok",
 *	and any POST answers a chunked text/event-stream of N events, one
 *	every I microseconds on an absolute schedule, each carrying the
 *	CLOCK_MONOTONIC time at which it was written:
 *	    data: {"seq":7,"t":123456789012}\n\n
 *	then "data: [DONE]" and the last chunk.  N and I come from the
 *	request headers x-sse-events and x-sse-interval-us, which a proxy
 *	forwards like any other header.
 *
 *   sse-probe client HOST PORT EVENTS INTERVAL_US STREAMS [RAWFILE]
 *	Opens STREAMS connections at once, POSTs one streaming request on
 *	each (with the routing headers sg-proxy requires), de-chunks the
 *	answers and, for every event, takes arrival time minus the stamped
 *	time: the one-way latency of that event from the backend's write to
 *	the client's read, through whatever sits in between.  Prints one line
 *	    SSE events=N p50_us=.. p90_us=.. p99_us=.. max_us=.. mean_us=..
 *	and, with RAWFILE, every latency in nanoseconds, one per line.
 *
 * Client and server share the machine's monotonic clock, so the latencies
 * are exact; both run the same code path whether a proxy is in between or
 * not, so "through a proxy minus direct" is what the proxy adds per event.
 * The server is single-threaded (ppoll, nanosecond timeouts); the client
 * too.  Everything is bounded: at most MAXCONN connections, 16 KiB of
 * request head, 1000000 events per stream.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXCONN		256
#define HEADMAX		16384
#define MAXEVENTS	1000000

static const char stats_body[] =
    "{\"id\":\"A\",\"rtt_ms\":0.1,\"max_engine_concurrency\":1000000,"
    "\"running\":0,\"queued\":0,\"queued_input_tokens\":0,"
    "\"last_mean_input_tps\":1000000,\"max_input_tps\":1000000,"
    "\"kv_capacity_tokens\":100000000,\"kv_used_tokens\":0,"
    "\"kv_free_tokens\":100000000,\"queue_time_ms_by_priority\":{}}";

static volatile sig_atomic_t stop;

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void
die(const char *what)
{
	fprintf(stderr, "sse-probe: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Write all of p[0..n) to a socket, waiting (briefly) when it is full. */
static int
write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };

			if (poll(&pf, 1, 1000) <= 0)
				return -1;
			continue;
		}
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* --- server ---------------------------------------------------------- */

struct sconn {
	int		 fd;
	char		 buf[HEADMAX];
	size_t		 len;
	size_t		 discard;	/* body bytes still to skip */
	int		 streaming;
	uint64_t	 next_ns, interval_ns;
	long		 seq, nevents;
};

static long
header_num(const char *head, const char *name, long dflt, long max)
{
	size_t nl = strlen(name);
	const char *p = head;

	while ((p = strchr(p, '\n')) != NULL) {
		p++;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			long v = strtol(p + nl + 1, NULL, 10);

			return v < 0 ? dflt : v > max ? max : v;
		}
	}
	return dflt;
}

static int
send_fixed(struct sconn *c, const char *ctype, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n"
	    "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", ctype,
	    strlen(body));

	if (write_all(c->fd, head, (size_t)n) != 0)
		return -1;
	return write_all(c->fd, body, strlen(body));
}

/* One complete request head is in c->buf[0..hlen); answer it. */
static int
serve_request(struct sconn *c, size_t hlen)
{
	static const char sse_head[] = "HTTP/1.1 200 OK\r\n"
	    "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
	    "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n";
	char save = c->buf[hlen];

	c->buf[hlen] = '\0';
	c->discard = (size_t)header_num(c->buf, "content-length", 0,
	    1L << 30);
	if (strncmp(c->buf, "GET /stats", 10) == 0) {
		c->buf[hlen] = save;
		return send_fixed(c, "application/json", stats_body);
	}
	if (strncmp(c->buf, "GET ", 4) == 0) {
		c->buf[hlen] = save;
		return send_fixed(c, "text/plain", "ok");
	}
	c->nevents = header_num(c->buf, "x-sse-events", 100, MAXEVENTS);
	c->interval_ns = (uint64_t)header_num(c->buf, "x-sse-interval-us",
	    1000, 10000000) * 1000u;
	c->buf[hlen] = save;
	c->seq = 0;
	c->streaming = 1;
	c->next_ns = now_ns() + c->interval_ns;
	return write_all(c->fd, sse_head, sizeof(sse_head) - 1);
}

/* Consume whatever complete requests (and bodies) the buffer holds. */
static int
server_input(struct sconn *c)
{
	for (;;) {
		char *end;
		size_t hlen, take;

		if (c->discard > 0) {
			take = c->discard < c->len ? c->discard : c->len;
			memmove(c->buf, c->buf + take, c->len - take);
			c->len -= take;
			c->discard -= take;
			if (c->discard > 0)
				return 0;
		}
		if (c->streaming || c->len == 0)
			return 0;
		end = memmem(c->buf, c->len, "\r\n\r\n", 4);
		if (end == NULL)
			return c->len == sizeof(c->buf) ? -1 : 0;
		hlen = (size_t)(end - c->buf) + 4;
		if (serve_request(c, hlen) != 0)
			return -1;
		memmove(c->buf, c->buf + hlen, c->len - hlen);
		c->len -= hlen;
	}
}

/* Emit the next event (or the end) of a stream whose time has come. */
static int
server_tick(struct sconn *c)
{
	char ev[128], chunk[160];
	int n, m;

	if (c->seq < c->nevents)
		n = snprintf(ev, sizeof(ev), "data: {\"seq\":%ld,\"t\":%llu}"
		    "\n\n", c->seq, (unsigned long long)now_ns());
	else
		n = snprintf(ev, sizeof(ev), "data: [DONE]\n\n");
	m = snprintf(chunk, sizeof(chunk), "%x\r\n%s\r\n%s", n, ev,
	    c->seq < c->nevents ? "" : "0\r\n\r\n");
	if (write_all(c->fd, chunk, (size_t)m) != 0)
		return -1;
	if (c->seq++ >= c->nevents) {
		c->streaming = 0;
		return server_input(c);
	}
	c->next_ns += c->interval_ns;
	return 0;
}

static void
sconn_close(struct sconn **cs, size_t *n, size_t i)
{
	close(cs[i]->fd);
	free(cs[i]);
	cs[i] = cs[--*n];
}

static int
serve(const char *portfile)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct sconn *cs[MAXCONN];
	struct pollfd pf[MAXCONN + 1];
	size_t n = 0, i;
	int one = 1, lfd;
	char tmp[4096];
	FILE *f;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(lfd, 128) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
		die("listen");
	snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
	if ((f = fopen(tmp, "w")) == NULL)
		die(tmp);
	fprintf(f, "%u\n", ntohs(sa.sin_port));
	if (fclose(f) != 0 || rename(tmp, portfile) != 0)
		die(portfile);
	while (!stop) {
		uint64_t t = now_ns(), next = UINT64_MAX;
		struct timespec to, *top = NULL;

		for (i = 0; i < n; i++) {
			while (cs[i]->streaming && cs[i]->next_ns <= t) {
				if (server_tick(cs[i]) != 0) {
					sconn_close(cs, &n, i);
					i--;
					break;
				}
			}
		}
		for (i = 0; i < n; i++)
			if (cs[i]->streaming && cs[i]->next_ns < next)
				next = cs[i]->next_ns;
		if (next != UINT64_MAX) {
			t = now_ns();
			next = next > t ? next - t : 0;
			to.tv_sec = (time_t)(next / 1000000000u);
			to.tv_nsec = (long)(next % 1000000000u);
			top = &to;
		}
		pf[0].fd = lfd;
		pf[0].events = n < MAXCONN ? POLLIN : 0;
		for (i = 0; i < n; i++) {
			pf[i + 1].fd = cs[i]->fd;
			pf[i + 1].events = POLLIN;
		}
		if (ppoll(pf, n + 1, top, NULL) < 0) {
			if (errno == EINTR)
				continue;
			die("ppoll");
		}
		for (i = n; i-- > 0;) {
			struct sconn *c = cs[i];
			ssize_t r;

			if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (c->len == sizeof(c->buf)) {
				/* streaming with a full buffer: drop input */
				r = read(c->fd, tmp, sizeof(tmp));
			} else {
				r = read(c->fd, c->buf + c->len,
				    sizeof(c->buf) - c->len);
				if (r > 0)
					c->len += (size_t)r;
			}
			if (r == 0 || (r < 0 && errno != EAGAIN &&
			    errno != EINTR) || (r > 0 && server_input(c) != 0))
				sconn_close(cs, &n, i);
		}
		if (pf[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);

			if (fd >= 0) {
				struct sconn *c = calloc(1, sizeof(*c));

				if (c == NULL) {
					close(fd);
					continue;
				}
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
				    sizeof(one));
				c->fd = fd;
				cs[n++] = c;
			}
		}
	}
	while (n > 0)
		sconn_close(cs, &n, 0);
	close(lfd);
	return 0;
}

/* --- client ---------------------------------------------------------- */

enum cstate { C_HEAD, C_SIZE, C_DATA, C_DATA_CRLF, C_DONE };

struct cconn {
	int		 fd;
	enum cstate	 st;
	char		 line[HEADMAX];	/* head, or chunk-size line, or event */
	size_t		 llen;
	size_t		 chunk_left;
	char		 ev[512];	/* event text being assembled */
	size_t		 elen;
};

static uint64_t	*lat;
static size_t	 nlat, caplat;

static void
record(uint64_t v)
{
	if (nlat == caplat) {
		caplat = caplat ? caplat * 2 : 4096;
		if ((lat = realloc(lat, caplat * sizeof(*lat))) == NULL)
			die("realloc");
	}
	lat[nlat++] = v;
}

/* Event text complete ("...\n\n"): stamp it. */
static int
client_event(struct cconn *c, uint64_t t)
{
	const char *p;

	c->ev[c->elen] = '\0';
	if (strstr(c->ev, "[DONE]") != NULL)
		return 1;
	if ((p = strstr(c->ev, "\"t\":")) != NULL) {
		uint64_t s = strtoull(p + 4, NULL, 10);

		record(t > s ? t - s : 0);
	}
	return 0;
}

/* Feed de-chunked body bytes; events end with a blank line. */
static int
client_body(struct cconn *c, const char *p, size_t n, uint64_t t)
{
	for (size_t i = 0; i < n; i++) {
		if (c->elen < sizeof(c->ev) - 1)
			c->ev[c->elen++] = p[i];
		if (c->elen >= 2 && c->ev[c->elen - 1] == '\n' &&
		    c->ev[c->elen - 2] == '\n') {
			if (client_event(c, t))
				return 1;
			c->elen = 0;
		}
	}
	return 0;
}

/* Parse what arrived: status line and head, then chunked framing. */
static int
client_input(struct cconn *c, const char *p, size_t n, uint64_t t)
{
	while (n > 0 && c->st != C_DONE) {
		if (c->st == C_DATA) {
			size_t take = n < c->chunk_left ? n : c->chunk_left;

			if (client_body(c, p, take, t))
				c->st = C_DONE;
			p += take;
			n -= take;
			if ((c->chunk_left -= take) == 0 && c->st != C_DONE)
				c->st = C_DATA_CRLF;
			continue;
		}
		if (c->llen < sizeof(c->line) - 1)
			c->line[c->llen++] = *p;
		p++;
		n--;
		c->line[c->llen] = '\0';
		if (c->st == C_HEAD) {
			if (c->llen >= 4 &&
			    strcmp(c->line + c->llen - 4, "\r\n\r\n") == 0) {
				if (strncmp(c->line, "HTTP/1.1 200", 12) != 0) {
					fprintf(stderr, "sse-probe: bad "
					    "answer: %.80s\n", c->line);
					return -1;
				}
				c->st = C_SIZE;
				c->llen = 0;
			}
		} else if (c->llen >= 2 && c->line[c->llen - 1] == '\n') {
			if (c->st == C_DATA_CRLF) {
				c->st = C_SIZE;
			} else if (c->llen > 2) {
				c->chunk_left = strtoul(c->line, NULL, 16);
				c->st = c->chunk_left ? C_DATA : C_DONE;
			}
			c->llen = 0;
		}
	}
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double
pct(double q)
{
	size_t k;

	if (nlat == 0)
		return 0;
	k = (size_t)(q * (double)(nlat - 1) + 0.5);
	return (double)lat[k] / 1000.0;
}

static int
client(const char *host, int port, long events, long interval_us,
    int streams, const char *rawfile)
{
	struct cconn *cs = calloc((size_t)streams, sizeof(*cs));
	struct pollfd pf[MAXCONN];
	struct sockaddr_in sa = { .sin_family = AF_INET };
	static const char body[] = "{\"model\":\"bench-model\","
	    "\"stream\":true,\"messages\":[{\"role\":\"user\","
	    "\"content\":\"hello\"}]}";
	char req[1024], buf[65536];
	int i, left = streams, one = 1, reqlen;
	double sum = 0;
	uint64_t deadline;

	if (cs == NULL || streams < 1 || streams > MAXCONN)
		return 2;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return 2;
	reqlen = snprintf(req, sizeof(req),
	    "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
	    "Content-Type: application/json\r\nx-request-id: sse-probe\r\n"
	    "x-model: bench-model\r\nx-input-tokens: 8\r\n"
	    "x-sse-events: %ld\r\nx-sse-interval-us: %ld\r\n"
	    "Content-Length: %zu\r\n\r\n%s", host, port, events,
	    interval_us, strlen(body), body);
	for (i = 0; i < streams; i++) {
		if ((cs[i].fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
		    connect(cs[i].fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			die("connect");
		setsockopt(cs[i].fd, IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof(one));
	}
	for (i = 0; i < streams; i++)
		if (write_all(cs[i].fd, req, (size_t)reqlen) != 0)
			die("write");
	deadline = now_ns() + (uint64_t)(events * interval_us + 30000000) *
	    1000u;
	while (left > 0) {
		int n = 0;

		for (i = 0; i < streams; i++) {
			if (cs[i].st == C_DONE)
				continue;
			pf[n].fd = cs[i].fd;
			pf[n].events = POLLIN;
			n++;
		}
		if (poll(pf, (nfds_t)n, 1000) < 0 && errno != EINTR)
			die("poll");
		if (now_ns() > deadline) {
			fprintf(stderr, "sse-probe: timed out\n");
			return 1;
		}
		for (i = 0, n = 0; i < streams; i++) {
			ssize_t r;
			uint64_t t;

			if (cs[i].st == C_DONE)
				continue;
			if (!(pf[n++].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(cs[i].fd, buf, sizeof(buf));
			t = now_ns();
			if (r <= 0) {
				fprintf(stderr, "sse-probe: stream ended "
				    "early\n");
				return 1;
			}
			if (client_input(&cs[i], buf, (size_t)r, t) != 0)
				return 1;
			if (cs[i].st == C_DONE)
				left--;
		}
	}
	for (i = 0; i < streams; i++)
		close(cs[i].fd);
	free(cs);
	qsort(lat, nlat, sizeof(*lat), cmp_u64);
	for (size_t k = 0; k < nlat; k++)
		sum += (double)lat[k];
	printf("SSE events=%zu p50_us=%.1f p90_us=%.1f p99_us=%.1f "
	    "max_us=%.1f mean_us=%.1f\n", nlat, pct(0.50), pct(0.90),
	    pct(0.99), nlat ? (double)lat[nlat - 1] / 1000.0 : 0.0,
	    nlat ? sum / (double)nlat / 1000.0 : 0.0);
	if (rawfile != NULL) {
		FILE *f = fopen(rawfile, "w");

		if (f == NULL)
			die(rawfile);
		for (size_t k = 0; k < nlat; k++)
			fprintf(f, "%llu\n", (unsigned long long)lat[k]);
		fclose(f);
	}
	free(lat);
	return nlat == (size_t)events * (size_t)streams ? 0 : 1;
}

int
main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };

	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		return serve(argv[2]);
	if ((argc == 7 || argc == 8) && strcmp(argv[1], "client") == 0)
		return client(argv[2], (int)strtol(argv[3], NULL, 10),
		    strtol(argv[4], NULL, 10), strtol(argv[5], NULL, 10),
		    (int)strtol(argv[6], NULL, 10), argc == 8 ? argv[7] : NULL);
	fprintf(stderr, "usage: sse-probe serve PORTFILE\n"
	    "       sse-probe client HOST PORT EVENTS INTERVAL_US STREAMS "
	    "[RAWFILE]\n");
	return 2;
}

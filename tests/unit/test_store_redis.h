/*
 * test_store_redis.h — real redis-server processes for the Redis store's
 * unit tests: started on 127.0.0.1 on free ports in a private directory,
 * waited for (PING, bounded), stopped by pid.  A test calls rs_skip_absent()
 * first: without redis-server on PATH it is skipped, never failed.
 * Header-only (static inline functions), included by test_store_redis*.c.
 */
#ifndef TEST_STORE_REDIS_H
#define TEST_STORE_REDIS_H

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#define RS_ARGS_MAX	32

struct rsrv {
	pid_t	pid;
	int	port;
	char	dir[64];
	char	conf[96];
};

static inline bool
rs_have(const char *prog)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

#define rs_skip_absent() do {						\
	if (!rs_have("redis-server") || !rs_have("redis-cli"))		\
		skip();							\
} while (0)

static inline int
rs_free_port(void)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static inline bool
rs_port_free(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	assert_true(fd >= 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* A free port whose cluster bus port (port + 10000) is free too. */
static inline int
rs_cluster_port(void)
{
	int i, p;

	for (i = 0; i < 200; i++) {
		p = rs_free_port();
		if (p + 10000 <= 65535 && rs_port_free(p + 10000))
			return p;
		p = 20000 + (int)(random() % 30000);
		if (rs_port_free(p) && rs_port_free(p + 10000))
			return p;
	}
	fail_msg("no free port pair for a cluster node");
	return -1;
}

static inline void
rs_sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) *
	    1000000L };

	nanosleep(&ts, NULL);
}

/* A blocking command on 127.0.0.1:port; NULL if it cannot connect. */
static inline redisReply *
rs_cmd(int port, const char *fmt, ...)
{
	struct timeval tv = { 1, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *r = NULL;
	va_list ap;

	if (c == NULL || c->err != 0) {
		if (c != NULL)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return r;
}

/* The string (or status) reply of a command, into buf; "" if none. */
static inline const char *
rs_str(char *buf, size_t cap, int port, const char *fmt, ...)
{
	struct timeval tv = { 1, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *r = NULL;
	va_list ap;

	buf[0] = '\0';
	if (c == NULL || c->err != 0) {
		if (c != NULL)
			redisFree(c);
		return buf;
	}
	redisSetTimeout(c, tv);
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (r != NULL && (r->type == REDIS_REPLY_STRING ||
	    r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR))
		snprintf(buf, cap, "%.*s", (int)r->len, r->str);
	else if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		snprintf(buf, cap, "%lld", r->integer);
	if (r != NULL)
		freeReplyObject(r);
	redisFree(c);
	return buf;
}

static inline bool
rs_ping(int port)
{
	redisReply *r = rs_cmd(port, "PING");
	bool ok = r != NULL;	/* PONG, or NOAUTH: up either way */

	if (r != NULL)
		freeReplyObject(r);
	return ok;
}

/*
 * Start prog ("redis-server" or "redis-sentinel"-style: redis-server with
 * a config file and --sentinel) on r->port (0: a free one) with extra
 * arguments (NULL-terminated).  conf_text, if not NULL, is written to a
 * config file given first (sentinels need a writable one).
 */
static inline void
rs_startv(struct rsrv *r, const char *conf_text, const char *const *extra)
{
	const char *argv[RS_ARGS_MAX];
	char port[16];
	int i, n = 0, tries;
	pid_t pid;

	if (r->port == 0)
		r->port = rs_free_port();
	if (r->dir[0] == '\0') {
		snprintf(r->dir, sizeof(r->dir), "/tmp/sg-test-redis-XXXXXX");
		assert_non_null(mkdtemp(r->dir));
	}
	snprintf(port, sizeof(port), "%d", r->port);
	argv[n++] = "redis-server";
	if (conf_text != NULL) {
		FILE *f;

		snprintf(r->conf, sizeof(r->conf), "%s/redis.conf", r->dir);
		assert_non_null(f = fopen(r->conf, "w"));
		fputs(conf_text, f);
		fclose(f);
		argv[n++] = r->conf;
	}
	argv[n++] = "--port";
	argv[n++] = port;
	argv[n++] = "--bind";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--dir";
	argv[n++] = r->dir;
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--appendonly";
	argv[n++] = "no";
	argv[n++] = "--daemonize";
	argv[n++] = "no";
	argv[n++] = "--logfile";
	argv[n++] = "redis.log";
	for (i = 0; extra != NULL && extra[i] != NULL && n < RS_ARGS_MAX - 1;
	    i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	r->pid = pid;
	for (tries = 0; tries < 500 && !rs_ping(r->port); tries++)
		rs_sleep_ms(10);
	assert_true(rs_ping(r->port));
}

static inline void
rs_start(struct rsrv *r, ...)
{
	const char *extra[RS_ARGS_MAX];
	const char *a;
	va_list ap;
	int n = 0;

	va_start(ap, r);
	while ((a = va_arg(ap, const char *)) != NULL && n < RS_ARGS_MAX - 1)
		extra[n++] = a;
	va_end(ap);
	extra[n] = NULL;
	rs_startv(r, NULL, extra);
}

/* Kill (SIGKILL, after SIGCONT in case it is stopped) and reap. */
static inline void
rs_kill(struct rsrv *r)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, SIGCONT);
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = 0;
}

static inline int
rs_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Kill and remove the directory. */
static inline void
rs_stop(struct rsrv *r)
{
	rs_kill(r);
	if (r->dir[0] != '\0')
		nftw(r->dir, rs_rm, 8, FTW_DEPTH | FTW_PHYS);
	r->dir[0] = '\0';
}

#endif /* TEST_STORE_REDIS_H */

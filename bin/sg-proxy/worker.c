/*
 * worker.c — one sg-proxy worker: an event base, the h1s server (h1s.h)
 * on the shared listening socket, the curl multi, the stats poller, the
 * span exporter and the decision log, all on the same loop.  The server's
 * limits and deadlines are the --max-* and --*-timeout-ms flags
 * (sg-proxy(8) LIMITS, TIMEOUTS).
 *
 * Timers: precise, to the millisecond, without a timer descriptor.  The
 * base asks for libevent's precise timers (CLOCK_MONOTONIC, not the
 * coarse clock, whose tick is 4 ms here: timers would fire up to a tick
 * early, and routing polls are 1 to 9 ms), but libevent's epoll backend
 * then also re-arms a timerfd before every epoll_wait(2), one
 * timerfd_settime(2) per loop iteration: about 1 us on a VM, two per
 * proxied request at concurrency 1, more than any other per-request cost
 * the loop adds.  Without a timerfd the backend bounds the wait with
 * epoll_wait's own timeout, rounded up to the millisecond, and checks the
 * timers on its precise clock afterwards, so a timer never fires early
 * and at most about a millisecond late (nginx's timers behave the same).
 * libevent falls back to that when timerfd_create(2) fails with ENOSYS,
 * which is what the daemon's own timerfd_create below answers (for
 * libevent's sake; the LMDB store's thread, the one other user of a timer
 * descriptor in the process, makes the system call itself).
 *
 * Signals (libevent signal events, so handlers run on the loop):
 *   SIGTERM, SIGINT  drain: stop accepting (h1s_server_drain: idle
 *                    keep-alive connections are closed, busy ones after
 *                    their answer), /readyz answers 503, requests in
 *                    flight finish; when the last
 *                    one is done, or after --drain-timeout-ms, the loop
 *                    stops and whatever is left is cancelled;
 *   SIGHUP           reload the cluster file (clusters.c) and reopen the
 *                    decision log.
 *
 * Shutdown order: requests (their curl handles and reservations), the
 * server (its connections), the poller, the multi, the exporter (flushed
 * for a bounded time), the decision log.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "proxy.h"

#define OTLP_DRAIN_MS	3000

static void
log_simple(proxy *p, int level, const char *msg, const char *k,
    const char *v)
{
	sg_log_rec r;

	sg_log_begin(&r, p->log, level, wall_s(), msg);
	if (k != NULL)
		sg_log_str(&r, k, v);
	sg_log_u64(&r, "worker", (uint64_t)p->worker_no);
	sg_log_end(&r);
}

proxy *proxy_self;

/* See "Timers" above: libevent then uses epoll_wait's own timeout. */
int
timerfd_create(int clockid, int flags)
{
	(void)clockid;
	(void)flags;
	errno = ENOSYS;
	return -1;
}

void
worker_maybe_exit(proxy *p)
{
	if (p->draining && p->inflight == 0 && p->flushing == 0 &&
	    gateway_idle(p))
		event_base_loopexit(p->base, NULL);
}

/* The reply was written whole, or its client left first (h1s runs one
 * of the two, once). */
static void
on_reply_over(h1s_req *req, void *arg)
{
	proxy *p = arg;

	(void)req;
	if (p->flushing > 0)
		p->flushing--;
	worker_maybe_exit(p);
}

void
worker_track_reply(h1s_req *req)
{
	proxy *p = proxy_self;

	if (p == NULL || req == NULL)
		return;
	p->flushing++;
	h1s_on_drain(req, NULL, NULL);
	h1s_on_close(req, on_reply_over, p);
	h1s_on_complete(req, on_reply_over, p);
}

static void
on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
	proxy *p = arg;
	sg_log_rec r;

	(void)fd;
	(void)what;
	sg_log_begin(&r, p->log, SG_LOG_WARN, wall_s(),
	    "drain timeout: cancelling requests in flight");
	sg_log_u64(&r, "inflight", p->inflight);
	sg_log_end(&r);
	event_base_loopexit(p->base, NULL);
}

static void
start_drain(proxy *p)
{
	struct timeval tv;

	if (p->draining)
		return;
	p->draining = true;
	if (p->srv != NULL)
		h1s_server_drain(p->srv);
	log_simple(p, SG_LOG_INFO, "draining", NULL, NULL);
	if (p->inflight == 0 && p->flushing == 0 && gateway_idle(p)) {
		event_base_loopexit(p->base, NULL);
		return;
	}
	ms_to_tv((double)p->conf->drain_timeout_ms, &tv);
	p->drain_timer = evtimer_new(p->base, on_drain_timeout, p);
	if (p->drain_timer == NULL || evtimer_add(p->drain_timer, &tv) != 0)
		event_base_loopexit(p->base, NULL);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	proxy *p = arg;
	sg_error err;

	(void)what;
	if (sig == SIGHUP) {
		if (p->gen != NULL) {
			gen_reload(p);
			forward_prepare(p);
		}
		memset(&err, 0, sizeof(err));
		if (p->dlog != NULL && dlog_reopen(p->dlog, &err) != 0)
			log_simple(p, SG_LOG_ERROR,
			    "cannot reopen the decision log", "error",
			    err.text);
		return;
	}
	start_drain(p);
}

static int
setup_http(proxy *p)
{
	const pconf *c = p->conf;
	h1s_limits lim;

	h1s_limits_default(&lim);
	lim.max_target = PROXY_MAX_TARGET;
	lim.max_header_bytes = c->max_header_bytes;
	lim.max_headers = c->max_headers;
	lim.max_body = c->max_body;		/* the replay limit */
	lim.header_timeout_ms = c->header_timeout_ms;
	lim.body_timeout_ms = c->body_timeout_ms;
	lim.keepalive_timeout_ms = c->keepalive_timeout_ms;
	lim.send_timeout_ms = c->send_timeout_ms;
	if ((p->srv = h1s_server_new(p->base, p->listen_fd, &lim, &http_cbs,
	    p)) == NULL)
		return EX_OSERR;
	return 0;
}

static int
setup_extras(proxy *p)
{
	otlp_options oo;
	dlog_options dop;
	sg_error err;
	int rc;

	memset(&err, 0, sizeof(err));
	memset(&oo, 0, sizeof(oo));
	oo.endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
	oo.service_name = "sg-proxy";
	if ((rc = otlp_exporter_new(&p->otlp, p->base, &oo, &err)) != 0) {
		log_simple(p, SG_LOG_ERROR, "OTLP exporter disabled",
		    "error", err.text);
		p->otlp = NULL;
	}
	memset(&dop, 0, sizeof(dop));
	dop.path = p->conf->decision_log;
	dop.sample = p->conf->decision_log_sample;
	dop.seed = p->conf->seed;
	dop.worker = p->worker_no;
	dop.base = p->base;
	memset(&err, 0, sizeof(err));
	if ((rc = dlog_open(&p->dlog, &dop, &err)) != 0) {
		fprintf(stderr, "sg-proxy: %s\n", err.text[0] != '\0' ?
		    err.text : "cannot open the decision log");
		return rc > 0 ? EX_CANTCREAT : EX_CONFIG;
	}
	return 0;
}

/* The native upstream client (unless --upstream-client curl). */
static int
setup_h1(proxy *p)
{
	h1_limits lim;

	if (p->conf->upstream_curl && p->conf->role_id != ROLE_GATEWAY)
		return 0;
	h1_limits_default(&lim);
	lim.connect_timeout_ms = p->conf->connect_timeout_ms;
	lim.max_idle = 256;
	if ((p->h1 = h1_pool_new(p->base, &lim)) == NULL)
		return EX_OSERR;
	forward_prepare(p);
	return 0;
}

/* Cancel every request still in flight (shutdown). */
static void
cancel_all(proxy *p)
{
	while (p->live != NULL) {
		preq *q = p->live;

		if (q->phase == PQ_STREAMING || q->req == NULL) {
			metrics_request(q, q->cur != NULL ? q->cur->cs->id :
			    "", q->ustatus);
			forward_cancel(q);
			preq_finish(q, q->ustatus);
		} else
			route_fail(q, 503, "shutting_down",
			    "the proxy is shutting down");
	}
}

static void
free_pool(proxy *p)
{
	while (p->free_reqs != NULL) {
		preq *q = p->free_reqs;

		p->free_reqs = q->next;
		if (q->timer != NULL)
			event_free(q->timer);
		pbuf_free(&q->ob);
		free(q->excl);
		free(q->url);
		free(q->hblk);
		free(q->gw.body);
		free(q->gw.rb);
		free(q);
	}
}

int
worker_run(proxy *p)
{
	struct event_config *cfg = NULL;
	int rc = EX_OSERR;

	proxy_self = p;
	/* the families are declared before fork; series are never removed */
	p->inflight_s = sg_metric_series(p->m.inflight, NULL);
	if ((cfg = event_config_new()) == NULL)
		goto out;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	if ((p->base = event_base_new_with_config(cfg)) == NULL)
		goto out;
	if ((p->hdrs = calloc(p->conf->max_headers + 1,
	    sizeof(*p->hdrs))) == NULL ||
	    (p->hbuf = malloc(p->hbufcap = (p->conf->max_header_bytes >
	    131072 ? p->conf->max_header_bytes : 131072) + 64)) == NULL ||
	    (p->view = sg_snapshot_new()) == NULL)
		goto out;
	if ((rc = upstream_init(p)) != 0 || (rc = setup_h1(p)) != 0 ||
	    (rc = setup_http(p)) != 0 ||
	    (rc = setup_extras(p)) != 0 ||
	    (p->gen != NULL && (rc = stats_init(p)) != 0) ||
	    (rc = gateway_worker_init(p)) != 0)
		goto out;
	rc = EX_OSERR;
	if ((p->sig_term = evsignal_new(p->base, SIGTERM, on_signal, p)) ==
	    NULL ||
	    (p->sig_int = evsignal_new(p->base, SIGINT, on_signal, p)) ==
	    NULL ||
	    (p->sig_hup = evsignal_new(p->base, SIGHUP, on_signal, p)) ==
	    NULL ||
	    evsignal_add(p->sig_term, NULL) != 0 ||
	    evsignal_add(p->sig_int, NULL) != 0 ||
	    evsignal_add(p->sig_hup, NULL) != 0)
		goto out;
	p->t_start = mono_ms();
	if (p->gen != NULL)
		stats_poll_all(p);
	log_simple(p, SG_LOG_INFO, "worker started", "role", p->conf->role);
	event_base_dispatch(p->base);
	rc = EX_OK;
	log_simple(p, SG_LOG_INFO, "worker stopped", NULL, NULL);
out:
	if (rc != EX_OK && rc != EX_CANTCREAT && rc != EX_CONFIG)
		fprintf(stderr, "sg-proxy: worker %d: cannot start: %s\n",
		    p->worker_no, strerror(errno));
	cancel_all(p);
	h1_pool_free(p->h1);
	p->h1 = NULL;
	if (p->srv != NULL)
		h1s_server_free(p->srv);
	p->srv = NULL;
	pbuf_free(&p->scratch);
	free_pool(p);
	stats_fini(p);
	gateway_worker_fini(p);
	if (p->otlp != NULL)
		otlp_exporter_drain(p->otlp, OTLP_DRAIN_MS);
	otlp_exporter_free(p->otlp);
	p->otlp = NULL;
	upstream_fini(p);
	dlog_close(p->dlog);
	p->dlog = NULL;
	if (p->sig_term != NULL)
		event_free(p->sig_term);
	if (p->sig_int != NULL)
		event_free(p->sig_int);
	if (p->sig_hup != NULL)
		event_free(p->sig_hup);
	if (p->drain_timer != NULL)
		event_free(p->drain_timer);
	sg_snapshot_free(p->view);
	p->view = NULL;
	free(p->view_idx);
	p->view_idx = NULL;
	free(p->hdrs);
	p->hdrs = NULL;
	free(p->hbuf);
	p->hbuf = NULL;
	if (p->base != NULL)
		event_base_free(p->base);
	p->base = NULL;
	if (cfg != NULL)
		event_config_free(cfg);
	return rc;
}

/*
 * upstream.c — libcurl's multi interface driven by the worker's libevent
 * loop (CURLMOPT_SOCKETFUNCTION, CURLMOPT_TIMERFUNCTION and
 * curl_multi_socket_action), shared by request forwarding and stats polls.
 *
 * One CURLM per worker: its connection cache keeps upstream connections
 * alive between requests (HTTP/1.1 keep-alive, TCP_NODELAY).  Easy handles
 * are reused from a free list (curl_easy_reset keeps their connection
 * and DNS caches' links through the multi), so the steady state allocates
 * no handle.  A transfer's end is reported through x->done, called from
 * the loop (never from inside a curl callback), after the handle has left
 * the multi; the owner then puts it back or starts it again.
 *
 * Clusters are http://IP:port URLs; a host name would resolve through
 * curl's threaded resolver (off the loop) if libcurl has one.
 */
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "proxy.h"

#define MAXCONNECTS	4096

/* Per socket: the libevent event watching it. */
typedef struct usock {
	struct event	*ev;
	curl_socket_t	 fd;
	proxy		*p;
} usock;

static void
check_done(proxy *p)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(p->multi, &left)) != NULL) {
		xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		if (x == NULL)
			continue;
		CURLcode rc = m->data.result;

		curl_multi_remove_handle(p->multi, x->easy);
		x->active = false;
		if (x->done != NULL)
			x->done(x, rc);
	}
}

static void
on_sock_event(evutil_socket_t fd, short what, void *arg)
{
	usock *s = arg;
	proxy *p = s->p;
	int running, flags = 0;

	if (what & EV_READ)
		flags |= CURL_CSELECT_IN;
	if (what & EV_WRITE)
		flags |= CURL_CSELECT_OUT;
	curl_multi_socket_action(p->multi, fd, flags, &running);
	check_done(p);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	proxy *p = arg;
	int running;

	(void)fd;
	(void)what;
	curl_multi_socket_action(p->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(p);
}

/* The event lives in the same allocation (event_assign), so a change of
 * what curl waits for allocates nothing. */
static int
sock_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *sockp)
{
	proxy *p = userp;
	usock *s = sockp;
	short kind;

	(void)e;
	if (what == CURL_POLL_REMOVE) {
		if (s != NULL) {
			event_del(s->ev);
			free(s);
			curl_multi_assign(p->multi, fd, NULL);
		}
		return 0;
	}
	kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
	    ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
	if (s == NULL) {
		if ((s = calloc(1, sizeof(*s) + event_get_struct_event_size())) ==
		    NULL)
			return -1;
		s->ev = (struct event *)(void *)(s + 1);
		s->p = p;
		s->fd = fd;
		curl_multi_assign(p->multi, fd, s);
	} else
		event_del(s->ev);
	if (event_assign(s->ev, p->base, fd, kind, on_sock_event, s) != 0 ||
	    event_add(s->ev, NULL) != 0)
		return -1;
	return 0;
}

static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	proxy *p = userp;
	struct timeval tv;

	(void)m;
	if (timeout_ms < 0) {
		evtimer_del(p->curl_timer);
		return 0;
	}
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	evtimer_add(p->curl_timer, &tv);
	return 0;
}

int
upstream_init(proxy *p)
{
	if ((p->multi = curl_multi_init()) == NULL ||
	    (p->curl_timer = evtimer_new(p->base, on_timer, p)) == NULL)
		return 71;	/* EX_OSERR */
	curl_multi_setopt(p->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
	curl_multi_setopt(p->multi, CURLMOPT_SOCKETDATA, p);
	curl_multi_setopt(p->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(p->multi, CURLMOPT_TIMERDATA, p);
	curl_multi_setopt(p->multi, CURLMOPT_MAXCONNECTS, (long)MAXCONNECTS);
	return 0;
}

void
upstream_fini(proxy *p)
{
	while (p->free_xfers != NULL) {
		xfer *x = p->free_xfers;

		p->free_xfers = x->next;
		curl_easy_cleanup(x->easy);
		free(x);
	}
	if (p->multi != NULL)
		curl_multi_cleanup(p->multi);	/* closes cached connections */
	p->multi = NULL;
	if (p->curl_timer != NULL)
		event_free(p->curl_timer);
	p->curl_timer = NULL;
}

xfer *
xfer_get(proxy *p)
{
	xfer *x = p->free_xfers;

	if (x != NULL) {
		p->free_xfers = x->next;
		curl_easy_reset(x->easy);
	} else {
		if ((x = calloc(1, sizeof(*x))) == NULL)
			return NULL;
		if ((x->easy = curl_easy_init()) == NULL) {
			free(x);
			return NULL;
		}
		x->p = p;
	}
	x->next = NULL;
	x->done = NULL;
	x->owner = NULL;
	x->active = false;
	x->errbuf[0] = '\0';
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, (char *)x);
	curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(x->easy, CURLOPT_HTTP_VERSION,
	    (long)CURL_HTTP_VERSION_1_1);
	return x;
}

int
xfer_start(xfer *x)
{
	if (curl_multi_add_handle(x->p->multi, x->easy) != CURLM_OK)
		return -1;
	x->active = true;
	return 0;
}

void
xfer_stop(xfer *x)
{
	if (x->active)
		curl_multi_remove_handle(x->p->multi, x->easy);
	x->active = false;
}

void
xfer_put(xfer *x)
{
	proxy *p = x->p;

	xfer_stop(x);
	x->done = NULL;
	x->owner = NULL;
	x->next = p->free_xfers;
	p->free_xfers = x;
}

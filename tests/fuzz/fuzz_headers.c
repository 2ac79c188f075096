/*
 * fuzz_headers.c — the routing request's header form: the text form
 * (sg_request_from_headers, what sg-route --headers reads) and the header
 * list (sg_request_from_header_list, what sg-proxy hands over from
 * evhttp).
 *
 * Properties: when every line of the text is a header line (after any
 * leading blank lines, up to the first blank line), the list built from
 * those lines by a splitter written here gives the same outcome as the
 * text form (same status, same request), whatever the batching inside;
 * an accepted request with its required fields encodes to JSON that the
 * JSON form accepts and encodes the same; a rejected request carries a
 * 400 and a message.
 */
#include <jansson.h>

#include "fuzz.h"
#include "sg_request.h"

#define MAX_LINES	512

static bool
tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z') || (c != '\0' &&
	    strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * Split text into h[] over the copy buf (len + 1 bytes).  Returns the
 * number of headers, or -1 when a line is not "name: value" (then the
 * text form may take it for a request line or refuse it: no comparison).
 */
static long
split(char *buf, size_t len, sg_header *h)
{
	char *p = buf, *end = buf + len;
	bool started = false;
	long n = 0;

	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *line = p, *le = nl != NULL ? nl : end, *c;
		size_t i;

		p = nl != NULL ? nl + 1 : end;
		if (le > line && le[-1] == '\r')
			le--;
		if (le == line) {
			if (started)
				break;
			continue;
		}
		if ((c = memchr(line, ':', (size_t)(le - line))) == NULL ||
		    c == line || n == MAX_LINES)
			return -1;
		for (i = 0; line + i < c; i++)
			if (!tchar((unsigned char)line[i]))
				return -1;
		*c = '\0';
		h[n].name = line;
		h[n].value = memchr(c + 1, '\0', (size_t)(le - c - 1)) != NULL ?
		    "\x01" : c + 1;
		*le = '\0';
		n++;
		started = true;
	}
	return n;
}

static void
roundtrip(const sg_request *r)
{
	json_t *a, *b;
	sg_request q;
	sg_error err;

	if (r->request_id == NULL || r->model == NULL)
		return;
	/*
	 * Known gap (/work/fz-bugs.txt, seed bug-blank-routing-method): a
	 * blank x-routing-method is present (a 400 at resolution), but the
	 * JSON form reads a blank string as absent, so the request it
	 * encodes to routes with the configured algorithm instead.
	 */
	if (r->routing_method != NULL &&
	    strspn(r->routing_method, " \t") == strlen(r->routing_method))
		return;
	sg_request_init(&q);
	FZ_ASSERT((a = sg_request_to_json(r)) != NULL);
	FZ_ASSERT(sg_request_from_json(&q, a, &err) == 0);
	FZ_ASSERT((b = sg_request_to_json(&q)) != NULL);
	FZ_ASSERT(json_equal(a, b));
	json_decref(a);
	json_decref(b);
	sg_request_release(&q);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sg_header h[MAX_LINES];
	sg_request r, l;
	sg_error err, lerr;
	char *buf;
	json_t *a, *b;
	long n;
	int rc, lrc;

	if (size > (1u << 20))
		return 0;
	sg_request_init(&r);
	sg_request_init(&l);
	sg_error_clear(&err);
	rc = sg_request_from_headers(&r, (const char *)data, size, &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_EREQUEST || rc == SG_ENOMEM);
		FZ_ASSERT(rc != SG_EREQUEST || err.status == 400);
		FZ_ASSERT(err.text[0] != '\0' && r.store == NULL);
	} else
		roundtrip(&r);

	FZ_ASSERT((buf = malloc(size + 1)) != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	if ((n = split(buf, size, h)) >= 0) {
		sg_error_clear(&lerr);
		lrc = sg_request_from_header_list(&l, h, (size_t)n, &lerr);
		FZ_ASSERT(lrc == rc);
		if (rc == 0) {
			a = sg_request_to_json(&r);
			b = sg_request_to_json(&l);
			FZ_ASSERT(a != NULL && b != NULL && json_equal(a, b));
			FZ_ASSERT(r.routing_method_invalid ==
			    l.routing_method_invalid);
			json_decref(a);
			json_decref(b);
		} else
			FZ_ASSERT(err.status == lerr.status &&
			    strcmp(err.text, lerr.text) == 0);
	}
	free(buf);
	sg_request_release(&r);
	sg_request_release(&l);
	return 0;
}

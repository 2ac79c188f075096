/*
 * sg_error.c — status codes and the caller-owned error record.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sg_common.h"

const char *
sg_strerror(int rc)
{
	switch (rc) {
	case SG_OK:		return "success";
	case SG_EINVAL:		return "invalid input";
	case SG_ECONFIG:	return "invalid configuration";
	case SG_ENOMEM:		return "out of memory";
	case SG_ENOTFOUND:	return "not found";
	case SG_EFULL:		return "store full";
	case SG_ESTORE:		return "store failure";
	case SG_EIO:		return "input/output error";
	case SG_ERANGE:		return "value out of range";
	case SG_EREQUEST:	return "request refused";
	default:
		return rc > 0 ? strerror(rc) : "unknown error";
	}
}

static void
vset(sg_error *err, const char *fmt, va_list ap)
{
	int n;

	n = vsnprintf(err->text, sizeof(err->text), fmt, ap);
	if (n < 0)
		err->text[0] = '\0';
}

int
sg_seterr(sg_error *err, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return rc;
	err->status = 0;
	err->code[0] = '\0';
	va_start(ap, fmt);
	vset(err, fmt, ap);
	va_end(ap);
	return rc;
}

int
sg_seterr_http(sg_error *err, int rc, int status, const char *code,
    const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return rc;
	err->status = status;
	snprintf(err->code, sizeof(err->code), "%s", code != NULL ? code : "");
	va_start(ap, fmt);
	vset(err, fmt, ap);
	va_end(ap);
	return rc;
}

void
sg_error_clear(sg_error *err)
{
	if (err != NULL)
		memset(err, 0, sizeof(*err));
}

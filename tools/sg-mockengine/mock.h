/*
 * mock.h — sg-mockengine internals shared by main.c (options, start-up,
 * signals) and serve.c (the HTTP endpoints driving the engine model).
 */
#ifndef SG_MOCKENGINE_H
#define SG_MOCKENGINE_H

#include <stdint.h>

#include "common/engine.h"

typedef struct mock_opts {
	const char	*listen;	/* address, default 127.0.0.1 */
	uint16_t	 port;		/* 0 = any free port */
	const char	*port_file;	/* write the bound port here */
	const char	*model;		/* served model id */
	const char	*cluster_id;	/* id in /stats, system_fingerprint */
	uint64_t	 tokens;	/* default response length */
	double		 jitter_ms;	/* max extra delay before the engine */
	uint64_t	 seed;		/* jitter and ids */
	uint64_t	 header_timeout_ms; /* request line and headers */
	uint64_t	 body_timeout_ms; /* the body, after the headers */
	eng_config	 eng;
} mock_opts;

/*
 * Serve until SIGTERM or SIGINT.  Prints "listening on ADDR:PORT" on stdout
 * once bound.  Returns a sysexits code.
 */
int	mock_serve(const mock_opts *o);

#endif /* SG_MOCKENGINE_H */

/*
 * sg_clusterfile.h — the cluster file of sg-proxy's router stage,
 * stargate-clusters(5) (stargate-clusters(5)): where each cluster is, the
 * models it serves, where and in which format its stats are read, and the
 * values an engine does not export.
 *
 * The codec is strict: unknown fields, wrong types, out-of-range values,
 * bad URLs and duplicate ids are SG_ECONFIG with a message naming the
 * field path ("clusters[1].stats.format: expected \"stargate\" or
 * \"vllm\"").  Defaults are applied on parse, so a parsed file is complete.
 */
#ifndef SG_CLUSTERFILE_H
#define SG_CLUSTERFILE_H

#include <jansson.h>

#include "sg_common.h"

#define SG_CF_MAX_MODELS	1024	/* models per cluster */
#define SG_CF_MAX_NAME		1024	/* bytes of a model name */
#define SG_CF_MAX_URL		2048	/* bytes of a URL */
#define SG_CF_MAX_FILE		(16u << 20)	/* bytes of a cluster file */

enum sg_stats_format { SG_STATS_STARGATE = 1, SG_STATS_VLLM };

typedef struct sg_clusterdef {
	char		 id[SG_ID_MAX + 1];	/* NUL-terminated */
	size_t		 id_len;
	char		*url;		/* http:// base URL, no trailing '/' */
	char		**models;	/* models served (>= 1, distinct) */
	size_t		 nmodels;
	int		 stats_format;	/* enum sg_stats_format */
	char		*stats_url;	/* default url + /stats or /metrics */
	uint64_t	 max_engine_concurrency;	/* 0 = not given */
	bool		 has_rtt;	/* rtt_ms given; else measured */
	double		 rtt_ms;
	/* fallbacks for values vLLM does not export (0 = not given): */
	double		 max_input_tps;
	uint64_t	 kv_capacity_tokens;
} sg_clusterdef;

typedef struct sg_clusterfile {
	uint64_t	 stats_interval_ms;	/* default 250, 10..60000 */
	uint64_t	 stats_stale_ms;	/* default 3000, > interval */
	uint64_t	 stats_timeout_ms;	/* default min(1000, stale) */
	size_t		 n;			/* clusters, >= 1 */
	sg_clusterdef	*c;
} sg_clusterfile;

/*
 * Parse a cluster file from text[0..len).  On success *out is a new file
 * (free with sg_clusterfile_free); on failure *out is NULL and err holds
 * "<field path>: <problem>" (or "<line>:<col>: invalid JSON: ...").
 * Returns 0, SG_ECONFIG or SG_ENOMEM.
 */
int	sg_clusterfile_parse(sg_clusterfile **out, const char *text, size_t len,
	    sg_error *err);
/*
 * Read and parse the file at path (at most SG_CF_MAX_FILE bytes); messages
 * are prefixed with the path.  A file that cannot be read is SG_ECONFIG
 * too, with the system's reason.
 */
int	sg_clusterfile_load(sg_clusterfile **out, const char *path,
	    sg_error *err);
void	sg_clusterfile_free(sg_clusterfile *cf);	/* NULL is a no-op */

/* The file with every default spelled out (new reference; NULL on ENOMEM).
 * Parsing it gives back an equal file. */
json_t	*sg_clusterfile_to_json(const sg_clusterfile *cf);

/* True if the cluster lists this model (exact, case-sensitive match). */
bool	sg_clusterdef_serves(const sg_clusterdef *d, const char *model);

/* Index of the cluster with this id, or -1. */
long	sg_clusterfile_find(const sg_clusterfile *cf, const char *id,
	    size_t len);

#endif /* SG_CLUSTERFILE_H */

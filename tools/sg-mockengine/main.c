/*
 * sg-mockengine — an OpenAI-compatible mock inference engine with the
 * Stargate engine model (slots, FIFO queue, prefill and decode rates, prefix
 * KV cache) running in real time.  This file parses options; serve.c serves.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "sg_common.h"
#include "sg-mockengine/mock.h"

static const char *progname = "sg-mockengine";

enum {
	OPT_HELP = CHAR_MAX + 1,
	OPT_VERSION,
	OPT_PORT_FILE,
	OPT_CLUSTER_ID,
	OPT_MAX_QUEUE,
	OPT_PREFILL_TPS,
	OPT_DECODE_TPS,
	OPT_KV_CAPACITY,
	OPT_BLOCK_TOKENS,
	OPT_TPS_WINDOW,
	OPT_PRIO_MAP,
	OPT_STEP_MODEL,
	OPT_MAX_BATCHED,
	OPT_STEP_FIXED,
	OPT_STEP_DECODE,
	OPT_STEP_PREFILL,
	OPT_JITTER,
	OPT_SEED,
	OPT_HDR_TIMEOUT,
	OPT_BODY_TIMEOUT,
};

static const struct option longopts[] = {
	{ "concurrency",	required_argument,	NULL,	'c' },
	{ "listen",		required_argument,	NULL,	'l' },
	{ "model",		required_argument,	NULL,	'm' },
	{ "port",		required_argument,	NULL,	'p' },
	{ "tokens",		required_argument,	NULL,	't' },
	{ "block-tokens",	required_argument,	NULL,	OPT_BLOCK_TOKENS },
	{ "body-timeout-ms",	required_argument,	NULL,	OPT_BODY_TIMEOUT },
	{ "header-timeout-ms",	required_argument,	NULL,	OPT_HDR_TIMEOUT },
	{ "cluster-id",		required_argument,	NULL,	OPT_CLUSTER_ID },
	{ "decode-tps",		required_argument,	NULL,	OPT_DECODE_TPS },
	{ "jitter-ms",		required_argument,	NULL,	OPT_JITTER },
	{ "kv-capacity",	required_argument,	NULL,	OPT_KV_CAPACITY },
	{ "max-batched-tokens",	required_argument,	NULL,	OPT_MAX_BATCHED },
	{ "max-queue",		required_argument,	NULL,	OPT_MAX_QUEUE },
	{ "port-file",		required_argument,	NULL,	OPT_PORT_FILE },
	{ "prefill-tps",	required_argument,	NULL,	OPT_PREFILL_TPS },
	{ "prio-map",		no_argument,		NULL,	OPT_PRIO_MAP },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "step-decode-ms",	required_argument,	NULL,	OPT_STEP_DECODE },
	{ "step-fixed-ms",	required_argument,	NULL,	OPT_STEP_FIXED },
	{ "step-model",		no_argument,		NULL,	OPT_STEP_MODEL },
	{ "step-prefill-ms",	required_argument,	NULL,	OPT_STEP_PREFILL },
	{ "tps-window",		required_argument,	NULL,	OPT_TPS_WINDOW },
	{ "help",		no_argument,		NULL,	OPT_HELP },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 }
};

static void __attribute__((noreturn))
usage(int status)
{
	fprintf(status == EX_OK ? stdout : stderr,
	    "usage: %s [-c slots] [-l address] [-m model] [-p port] [-t tokens]\n"
	    "       [--block-tokens n] [--body-timeout-ms ms] [--cluster-id id]\n"
	    "       [--decode-tps rate] [--header-timeout-ms ms]\n"
	    "       [--jitter-ms ms] [--kv-capacity tokens] [--max-batched-tokens n]\n"
	    "       [--max-queue n] [--port-file file] [--prefill-tps rate]\n"
	    "       [--prio-map] [--seed n] [--step-decode-ms ms] [--step-fixed-ms ms]\n"
	    "       [--step-model] [--step-prefill-ms ms] [--tps-window n]\n"
	    "       %s -h | --help | --version\n", progname, progname);
	exit(status);
}

static uint64_t
opt_u64(const char *name, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (sg_parse_u64(s, strlen(s), max, &v) != 0 || v < min) {
		fprintf(stderr, "%s: --%s: expected an integer in %llu..%llu, "
		    "got '%s'\n", progname, name, (unsigned long long)min,
		    (unsigned long long)max, s);
		exit(EX_USAGE);
	}
	return v;
}

/* A finite decimal number >= min (> min when strict). */
static double
opt_num(const char *name, const char *s, double min, int strict)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v) ||
	    v < min || (strict && v == min)) {
		fprintf(stderr, "%s: --%s: expected a number %s %g, got '%s'\n",
		    progname, name, strict ? ">" : ">=", min, s);
		exit(EX_USAGE);
	}
	return v;
}

int
main(int argc, char *argv[])
{
	mock_opts o;
	int ch;

	memset(&o, 0, sizeof(o));
	o.listen = "127.0.0.1";
	o.port = 8090;
	o.model = "dummy-model";
	o.cluster_id = "mock";
	o.tokens = 16;
	o.header_timeout_ms = 10000;
	o.body_timeout_ms = 30000;
	eng_config_default(&o.eng);

	while ((ch = getopt_long(argc, argv, "c:hl:m:p:t:", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'c':
			o.eng.slots = (uint32_t)opt_u64("concurrency", optarg,
			    1, 100000);
			break;
		case 'l':
			o.listen = optarg;
			break;
		case 'm':
			if (*optarg == '\0') {
				fprintf(stderr, "%s: --model: empty\n", progname);
				return EX_USAGE;
			}
			o.model = optarg;
			break;
		case 'p':
			o.port = (uint16_t)opt_u64("port", optarg, 0, 65535);
			break;
		case 't':
			o.tokens = opt_u64("tokens", optarg, 1, 1000000);
			break;
		case 'h':
			usage(EX_OK);
		case OPT_HDR_TIMEOUT:
			o.header_timeout_ms = opt_u64("header-timeout-ms",
			    optarg, 1, 3600000);
			break;
		case OPT_BODY_TIMEOUT:
			o.body_timeout_ms = opt_u64("body-timeout-ms", optarg,
			    1, 3600000);
			break;
		case OPT_BLOCK_TOKENS:
			o.eng.block_tokens = (uint32_t)opt_u64("block-tokens",
			    optarg, 1, 65536);
			break;
		case OPT_CLUSTER_ID:
			if (*optarg == '\0' || strlen(optarg) > SG_ID_MAX) {
				fprintf(stderr, "%s: --cluster-id: expected 1..%d "
				    "bytes\n", progname, SG_ID_MAX);
				return EX_USAGE;
			}
			o.cluster_id = optarg;
			break;
		case OPT_DECODE_TPS:
			o.eng.decode_tps = opt_num("decode-tps", optarg, 0, 1);
			break;
		case OPT_JITTER:
			o.jitter_ms = opt_num("jitter-ms", optarg, 0, 0);
			break;
		case OPT_KV_CAPACITY:
			o.eng.kv_capacity_tokens = opt_u64("kv-capacity", optarg,
			    0, UINT64_C(1) << 40);
			break;
		case OPT_MAX_BATCHED:
			o.eng.max_batched_tokens = (uint32_t)opt_u64(
			    "max-batched-tokens", optarg, 1, 1000000);
			break;
		case OPT_MAX_QUEUE:
			o.eng.max_queue = (uint32_t)opt_u64("max-queue", optarg,
			    0, 10000000);
			break;
		case OPT_PORT_FILE:
			o.port_file = optarg;
			break;
		case OPT_PREFILL_TPS:
			o.eng.prefill_tps = opt_num("prefill-tps", optarg, 0, 1);
			break;
		case OPT_PRIO_MAP:
			o.eng.prio_map = true;
			break;
		case OPT_SEED:
			o.seed = opt_u64("seed", optarg, 0, UINT64_MAX);
			break;
		case OPT_STEP_DECODE:
			o.eng.step_decode_ms_per_seq = opt_num("step-decode-ms",
			    optarg, 0, 0);
			break;
		case OPT_STEP_FIXED:
			o.eng.step_fixed_ms = opt_num("step-fixed-ms", optarg,
			    0, 0);
			break;
		case OPT_STEP_MODEL:
			o.eng.step_model = true;
			break;
		case OPT_STEP_PREFILL:
			o.eng.step_prefill_ms_per_token = opt_num(
			    "step-prefill-ms", optarg, 0, 1);
			break;
		case OPT_TPS_WINDOW:
			o.eng.tps_window = (uint32_t)opt_u64("tps-window", optarg,
			    1, 65536);
			break;
		case OPT_HELP:
			usage(EX_OK);
		case OPT_VERSION:
			printf("%s %s\n", progname, SG_VERSION);
			return fflush(stdout) == 0 && !ferror(stdout) ? EX_OK :
			    EX_IOERR;
		default:
			usage(EX_USAGE);
		}
	}
	argc -= optind;
	if (argc != 0)
		usage(EX_USAGE);
	/* The cache is counted in whole blocks, as vLLM's is. */
	o.eng.kv_capacity_tokens -= o.eng.kv_capacity_tokens %
	    o.eng.block_tokens;
	return mock_serve(&o);
}

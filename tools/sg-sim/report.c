/*
 * report.c — sg-sim's outputs: an aligned text table, one JSON object, CSV,
 * and a hand-written SVG chart (TTFT p99 and KV-cache reuse per row).
 *
 * Output is a function of the results only (no clock, no host), and
 * numbers are printed with fixed precision, so the same scenario and seed
 * give byte-identical reports.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sg-sim/sim.h"

static const char *
lca_name(int lca)
{
	return lca < 0 ? "-" : lca ? "on" : "off";
}

/* The algorithm column: the library's name, or the perfect row's. */
static const char *
alg_name(const sim_row *r)
{
	return r->alg == SIM_ALG_PERFECT ? r->name : sg_algorithm_name(r->alg);
}

/* x / the bound row's value; false without a bound row or a zero bound. */
static bool
ratio(const scenario *sc, const sim_result *res, size_t i, bool good,
    double *out)
{
	int b = scenario_bound_row(sc);
	double v, bv;

	if (b < 0)
		return false;
	v = good ? res[i].goodput_rps : res[i].kv_reuse;
	bv = good ? res[b].goodput_rps : res[b].kv_reuse;
	if (!(bv > 0))
		return false;
	*out = v / bv;
	return true;
}

static void
put_ratio(FILE *fp, const scenario *sc, const sim_result *res, size_t i,
    bool good, int width)
{
	double x;

	if (ratio(sc, res, i, good, &x))
		fprintf(fp, " %*.3f", width, x);
	else
		fprintf(fp, " %*s", width, "-");
}

int
report_table(FILE *fp, const scenario *sc, const sim_result *res)
{
	size_t i;

	fprintf(fp, "# scenario %s, seed %llu, %zu clusters, window %.0f-%.0f s, "
	    "TTFT SLO %.0f ms\n", sc->name, (unsigned long long)sc->seed,
	    sc->nclusters, sc->warmup_ms / 1000.0, sc->duration_ms / 1000.0,
	    sc->slo_ttft_ms);
	fprintf(fp, "%-22s %-3s %9s %8s %8s %11s %11s %11s %8s %9s %9s "
	    "%8s\n", "algorithm", "lca", "requests", "kv_reuse", "kv_ratio",
	    "ttft_p50_ms", "ttft_p99_ms", "goodput_rps", "gp_ratio",
	    "left_last", "wait_ms", "rejected");
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];

		fprintf(fp, "%-22s %-3s %9llu %8.3f", alg_name(r),
		    lca_name(r->lca), (unsigned long long)x->requests,
		    x->kv_reuse);
		put_ratio(fp, sc, res, i, false, 8);
		fprintf(fp, " %11.1f %11.1f %11.3f", x->ttft_p50_ms,
		    x->ttft_p99_ms, x->goodput_rps);
		put_ratio(fp, sc, res, i, true, 8);
		fprintf(fp, " %9.4f %9.1f %8llu\n", x->left_share,
		    x->mean_wait_ms, (unsigned long long)x->rejected);
	}
	return ferror(fp) ? -1 : 0;
}

static json_t *
rounded(double v, double scale)
{
	return json_real(round(v * scale) / scale);
}

int
report_json(FILE *fp, const scenario *sc, const sim_result *res)
{
	json_t *doc, *rows;
	int b = scenario_bound_row(sc);
	size_t i;
	int rc;

	doc = json_pack("{s:s,s:I,s:I,s:f,s:f,s:f}", "scenario", sc->name,
	    "seed", (json_int_t)sc->seed, "clusters", (json_int_t)sc->nclusters,
	    "warmup_s", sc->warmup_ms / 1000.0, "duration_s",
	    sc->duration_ms / 1000.0, "slo_ttft_ms", sc->slo_ttft_ms);
	rows = json_array();
	if (doc == NULL || rows == NULL) {
		json_decref(doc);
		json_decref(rows);
		return -1;
	}
	json_object_set_new(doc, "bound_row", b >= 0 ?
	    json_string(sc->rows[b].name) : json_null());
	json_object_set_new(doc, "rows", rows);
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];
		json_t *o = json_object();
		double q;

		json_object_set_new(o, "row", json_string(r->name));
		json_object_set_new(o, "algorithm", json_string(alg_name(r)));
		json_object_set_new(o, "last_cluster_affinity", r->lca < 0 ?
		    json_null() : json_boolean(r->lca));
		json_object_set_new(o, "requests", json_integer(
		    (json_int_t)x->requests));
		json_object_set_new(o, "completed", json_integer(
		    (json_int_t)x->completed));
		json_object_set_new(o, "rejected", json_integer(
		    (json_int_t)x->rejected));
		json_object_set_new(o, "retries", json_integer(
		    (json_int_t)x->retries));
		json_object_set_new(o, "input_tokens", json_integer(
		    (json_int_t)x->input_tokens));
		json_object_set_new(o, "reused_input_tokens", json_integer(
		    (json_int_t)x->reused_tokens));
		json_object_set_new(o, "took_prefix_tokens", json_integer(
		    (json_int_t)x->took_prefix));
		json_object_set_new(o, "best_prefix_tokens", json_integer(
		    (json_int_t)x->best_prefix));
		json_object_set_new(o, "kv_reuse", rounded(x->kv_reuse, 1e6));
		json_object_set_new(o, "ttft_p50_ms", rounded(x->ttft_p50_ms,
		    1e3));
		json_object_set_new(o, "ttft_p99_ms", rounded(x->ttft_p99_ms,
		    1e3));
		json_object_set_new(o, "good", json_integer(
		    (json_int_t)x->good));
		json_object_set_new(o, "goodput_rps", rounded(x->goodput_rps,
		    1e4));
		json_object_set_new(o, "returning", json_integer(
		    (json_int_t)x->returning));
		json_object_set_new(o, "left_last_cluster", json_integer(
		    (json_int_t)x->left));
		json_object_set_new(o, "left_last_cluster_share",
		    rounded(x->left_share, 1e6));
		json_object_set_new(o, "mean_routing_wait_ms",
		    rounded(x->mean_wait_ms, 1e3));
		json_object_set_new(o, "background_requests", json_integer(
		    (json_int_t)x->background));
		json_object_set_new(o, "kv_reuse_ratio", ratio(sc, res, i,
		    false, &q) ? rounded(q, 1e6) : json_null());
		json_object_set_new(o, "goodput_ratio", ratio(sc, res, i,
		    true, &q) ? rounded(q, 1e6) : json_null());
		json_array_append_new(rows, o);
	}
	rc = json_dumpf(doc, fp, JSON_COMPACT | JSON_REAL_PRECISION(12));
	json_decref(doc);
	if (rc != 0 || fputc('\n', fp) == EOF)
		return -1;
	return ferror(fp) ? -1 : 0;
}

int
report_csv(FILE *fp, const scenario *sc, const sim_result *res)
{
	size_t i;

	fprintf(fp, "row,algorithm,last_cluster_affinity,requests,completed,"
	    "rejected,retries,kv_reuse,ttft_p50_ms,ttft_p99_ms,goodput_rps,"
	    "returning,left_last_cluster,left_last_cluster_share,"
	    "mean_routing_wait_ms,kv_reuse_ratio,goodput_ratio\n");
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];
		double q;

		fprintf(fp, "%s,%s,%s,%llu,%llu,%llu,%llu,%.6f,%.3f,%.3f,%.4f,"
		    "%llu,%llu,%.6f,%.3f", r->name, alg_name(r),
		    r->lca < 0 ? "" : r->lca ? "true" : "false",
		    (unsigned long long)x->requests,
		    (unsigned long long)x->completed,
		    (unsigned long long)x->rejected,
		    (unsigned long long)x->retries, x->kv_reuse, x->ttft_p50_ms,
		    x->ttft_p99_ms, x->goodput_rps,
		    (unsigned long long)x->returning,
		    (unsigned long long)x->left, x->left_share, x->mean_wait_ms);
		if (ratio(sc, res, i, false, &q))
			fprintf(fp, ",%.6f", q);
		else
			fputc(',', fp);
		if (ratio(sc, res, i, true, &q))
			fprintf(fp, ",%.6f\n", q);
		else
			fputs(",\n", fp);
	}
	return ferror(fp) ? -1 : 0;
}

/* --- SVG ------------------------------------------------------------------- */

static void
xml_text(FILE *fp, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '&': fputs("&amp;", fp); break;
		case '<': fputs("&lt;", fp); break;
		case '>': fputs("&gt;", fp); break;
		case '"': fputs("&quot;", fp); break;
		default: fputc(*s, fp);
		}
	}
}

static const char *
row_color(int lca)
{
	return lca < 0 ? "#8c8c8c" : lca ? "#2e8b57" : "#d2691e";
}

#define LABEL_W		190
#define PANEL_W		250
#define GAP		24
#define NPANELS		4
#define SVG_W		(LABEL_W + NPANELS * (PANEL_W + GAP))
#define ROW_H		26
#define TOP		104
#define SPAN		(PANEL_W - 74)	/* bar length at the axis end */
#define MIN_TICK_PX	40		/* closest two tick labels may be */

enum { P_REUSE, P_TTFT, P_GOODPUT, P_LEFT };

static double
panel_value(int kind, const sim_result *x)
{
	switch (kind) {
	case P_REUSE:	return x->kv_reuse * 100.0;
	case P_TTFT:	return x->ttft_p99_ms;
	case P_GOODPUT:	return x->goodput_rps;
	default:	return x->left_share * 100.0;
	}
}

/* Tick label: 1, 10, 100, 1k, 10k, 100k, 1M, ... (log axis) or the value
 * with the unit. */
static void
tick_label(char *buf, size_t n, int kind, double v)
{
	if (kind == P_TTFT) {
		if (v >= 1e6)
			snprintf(buf, n, "%.0fM", v / 1e6);
		else if (v >= 1e3)
			snprintf(buf, n, "%.0fk", v / 1e3);
		else
			snprintf(buf, n, "%g", v);
	} else if (kind == P_GOODPUT)
		snprintf(buf, n, "%g", v);
	else
		snprintf(buf, n, "%.0f%%", v);
}

/* A "nice" linear tick step: 1, 2 or 5 times a power of ten, giving at
 * most 5 intervals up to hi. */
static double
nice_step(double hi)
{
	double raw = hi / 5, p = pow(10, floor(log10(raw))), f = raw / p;

	return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

typedef struct axis {
	bool	log;
	double	lo, hi;		/* log: powers of ten; linear: lo = 0 */
	double	step;		/* linear */
} axis;

static double
axis_x(const axis *a, double x0, double v)
{
	double f;

	if (a->log)
		f = v > a->lo ? log10(v / a->lo) / log10(a->hi / a->lo) : 0;
	else
		f = a->hi > 0 ? v / a->hi : 0;
	if (f > 1)
		f = 1;
	return x0 + (f > 0 ? f : 0) * SPAN;
}

static void
make_axis(int kind, const scenario *sc, const sim_result *res, axis *a)
{
	double lo = 1e300, hi = 0, v;
	size_t i;

	for (i = 0; i < sc->nrows; i++) {
		v = panel_value(kind, &res[i]);
		if (v > 0 && v < lo)
			lo = v;
		if (v > hi)
			hi = v;
	}
	memset(a, 0, sizeof(*a));
	if (kind == P_TTFT) {
		a->log = true;
		a->lo = hi > 0 ? pow(10, floor(log10(lo))) : 1;
		a->hi = hi > a->lo ? pow(10, ceil(log10(hi))) : a->lo * 10;
		return;
	}
	if (kind == P_REUSE) {
		a->hi = 100;
		a->step = 25;
		return;
	}
	if (!(hi > 0))
		hi = 1;
	a->step = nice_step(hi);
	a->hi = ceil(hi / a->step - 1e-9) * a->step;
}

static void
svg_ticks(FILE *fp, const axis *a, int kind, double x0, size_t y0, size_t y1)
{
	double p, last = -1e9;
	char lab[32];

	for (p = a->log ? a->lo : 0; p <= a->hi * 1.0000001;
	    p = a->log ? p * 10 : p + a->step) {
		double x = axis_x(a, x0, p);

		fprintf(fp, "  <line x1=\"%.1f\" y1=\"%zu\" x2=\"%.1f\" "
		    "y2=\"%zu\" stroke=\"#ddd\"/>\n", x, y0, x, y1);
		/* Labels never overlap: skip one too close to the last. */
		if (x - last < MIN_TICK_PX)
			continue;
		last = x;
		tick_label(lab, sizeof(lab), kind, p);
		fprintf(fp, "  <text x=\"%.1f\" y=\"%zu\" class=\"v\" "
		    "text-anchor=\"middle\">%s</text>\n", x, y0 - 4, lab);
	}
}

/*
 * One panel of horizontal bars, one per row.  TTFT spans orders of
 * magnitude between rows (a saturated queue against a cache hit), so its
 * axis is logarithmic; the others are linear from 0.  With a bound row,
 * the reuse and goodput panels draw its value as a dashed line through
 * every row, so each bar's gap to the bound shows.
 */
static void
svg_panel(FILE *fp, const scenario *sc, const sim_result *res, double x0,
    int kind, const char *title)
{
	size_t i, y0 = TOP - 4, y1 = (size_t)TOP + sc->nrows * ROW_H;
	int b = scenario_bound_row(sc);
	axis a;

	make_axis(kind, sc, res, &a);
	fprintf(fp, "  <text x=\"%.1f\" y=\"%d\" class=\"h\">", x0, TOP - 30);
	xml_text(fp, title);
	fprintf(fp, "</text>\n");
	svg_ticks(fp, &a, kind, x0, y0, y1);
	fprintf(fp, "  <line x1=\"%.1f\" y1=\"%zu\" x2=\"%.1f\" y2=\"%zu\" "
	    "stroke=\"#444\"/>\n", x0, y0, x0, y1);
	for (i = 0; i < sc->nrows; i++) {
		double v = panel_value(kind, &res[i]);
		double w = axis_x(&a, x0, v) - x0;
		size_t y = (size_t)TOP + i * ROW_H;

		fprintf(fp, "  <rect x=\"%.1f\" y=\"%zu\" width=\"%.1f\" "
		    "height=\"%d\" fill=\"%s\"/>\n", x0, y + 4, w, ROW_H - 8,
		    sc->rows[i].alg == SIM_ALG_PERFECT ? "#4169e1" :
		    row_color(sc->rows[i].lca));
		fprintf(fp, "  <text x=\"%.1f\" y=\"%zu\" class=\"v\">",
		    x0 + w + 4, y + ROW_H / 2 + 4);
		if (kind == P_TTFT)
			fprintf(fp, "%.0f ms", v);
		else if (kind == P_GOODPUT)
			fprintf(fp, "%.2f", v);
		else
			fprintf(fp, "%.1f%%", v);
		if (b >= 0 && (kind == P_REUSE || kind == P_GOODPUT) &&
		    (int)i != b) {
			double bv = panel_value(kind, &res[b]);

			if (kind == P_REUSE)
				fprintf(fp, " (%+.1f)", v - bv);
			else if (bv > 0)
				fprintf(fp, " (%.0f%%)", v / bv * 100.0);
		}
		fprintf(fp, "</text>\n");
	}
	if (b >= 0 && (kind == P_REUSE || kind == P_GOODPUT)) {
		double x = axis_x(&a, x0, panel_value(kind, &res[b]));

		fprintf(fp, "  <line x1=\"%.1f\" y1=\"%zu\" x2=\"%.1f\" "
		    "y2=\"%zu\" stroke=\"#4169e1\" stroke-dasharray=\"4 3\"/>\n",
		    x, y0, x, y1);
	}
}

int
report_svg(FILE *fp, const scenario *sc, const sim_result *res)
{
	static const struct {
		int		 kind;
		const char	*title;
	} panels[NPANELS] = {
		{ P_REUSE,	"KV-cache reuse (points vs bound)" },
		{ P_TTFT,	"TTFT p99 (ms, log scale)" },
		{ P_GOODPUT,	"goodput (req/s, % of bound)" },
		{ P_LEFT,	"left their last cluster" },
	};
	size_t i, h = (size_t)TOP + sc->nrows * ROW_H + 64;

	fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
	    "height=\"%zu\" viewBox=\"0 0 %d %zu\">\n", SVG_W, h, SVG_W, h);
	fprintf(fp, "  <style>text { font-family: sans-serif; font-size: 12px; "
	    "fill: #222; } .t { font-size: 16px; font-weight: bold; } "
	    ".h { font-size: 13px; font-weight: bold; } .v { font-size: 11px; "
	    "}</style>\n");
	fprintf(fp, "  <rect x=\"0\" y=\"0\" width=\"%d\" height=\"%zu\" "
	    "fill=\"#ffffff\"/>\n", SVG_W, h);
	fprintf(fp, "  <text x=\"10\" y=\"24\" class=\"t\">sg-sim: ");
	xml_text(fp, sc->name);
	fprintf(fp, " (seed %llu, %zu clusters, TTFT SLO %.0f ms)</text>\n",
	    (unsigned long long)sc->seed, sc->nclusters, sc->slo_ttft_ms);
	fprintf(fp, "  <text x=\"10\" y=\"44\">last_cluster_affinity: "
	    "<tspan fill=\"%s\">on</tspan>, <tspan fill=\"%s\">off</tspan>, "
	    "<tspan fill=\"%s\">not applicable</tspan>; "
	    "<tspan fill=\"#4169e1\">perfect knowledge (the bound, dashed)"
	    "</tspan></text>\n", row_color(1), row_color(0), row_color(-1));
	for (i = 0; i < sc->nrows; i++) {
		fprintf(fp, "  <text x=\"10\" y=\"%zu\">", (size_t)TOP +
		    i * ROW_H + ROW_H / 2 + 4);
		xml_text(fp, sc->rows[i].name);
		fprintf(fp, "</text>\n");
	}
	for (i = 0; i < NPANELS; i++)
		svg_panel(fp, sc, res, LABEL_W + (double)i * (PANEL_W + GAP),
		    panels[i].kind, panels[i].title);
	fprintf(fp, "  <text x=\"10\" y=\"%zu\" class=\"v\">window %.0f-%.0f s "
	    "of simulated time; reuse: reused / input tokens, (+/-) points "
	    "from the bound; goodput: TTFT within the SLO; left: returning "
	    "requests sent away from their last cluster</text>\n", h - 20,
	    sc->warmup_ms / 1000.0, sc->duration_ms / 1000.0);
	fprintf(fp, "</svg>\n");
	return ferror(fp) ? -1 : 0;
}

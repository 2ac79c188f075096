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

int
report_table(FILE *fp, const scenario *sc, const sim_result *res)
{
	size_t i;

	fprintf(fp, "# scenario %s, seed %llu, %zu clusters, window %.0f-%.0f s, "
	    "TTFT SLO %.0f ms\n", sc->name, (unsigned long long)sc->seed,
	    sc->nclusters, sc->warmup_ms / 1000.0, sc->duration_ms / 1000.0,
	    sc->slo_ttft_ms);
	fprintf(fp, "%-22s %-3s %9s %8s %11s %11s %11s %9s %9s %8s\n",
	    "algorithm", "lca", "requests", "kv_reuse", "ttft_p50_ms",
	    "ttft_p99_ms", "goodput_rps", "left_last", "wait_ms", "rejected");
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];

		fprintf(fp, "%-22s %-3s %9llu %8.3f %11.1f %11.1f %11.3f "
		    "%9.4f %9.1f %8llu\n", sg_algorithm_name(r->alg),
		    lca_name(r->lca), (unsigned long long)x->requests,
		    x->kv_reuse, x->ttft_p50_ms, x->ttft_p99_ms, x->goodput_rps,
		    x->left_share, x->mean_wait_ms,
		    (unsigned long long)x->rejected);
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
	json_object_set_new(doc, "rows", rows);
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];
		json_t *o = json_object();

		json_object_set_new(o, "row", json_string(r->name));
		json_object_set_new(o, "algorithm",
		    json_string(sg_algorithm_name(r->alg)));
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
	    "mean_routing_wait_ms\n");
	for (i = 0; i < sc->nrows; i++) {
		const sim_row *r = &sc->rows[i];
		const sim_result *x = &res[i];

		fprintf(fp, "%s,%s,%s,%llu,%llu,%llu,%llu,%.6f,%.3f,%.3f,%.4f,"
		    "%llu,%llu,%.6f,%.3f\n", r->name, sg_algorithm_name(r->alg),
		    r->lca < 0 ? "" : r->lca ? "true" : "false",
		    (unsigned long long)x->requests,
		    (unsigned long long)x->completed,
		    (unsigned long long)x->rejected,
		    (unsigned long long)x->retries, x->kv_reuse, x->ttft_p50_ms,
		    x->ttft_p99_ms, x->goodput_rps,
		    (unsigned long long)x->returning,
		    (unsigned long long)x->left, x->left_share, x->mean_wait_ms);
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

#define SVG_W		960
#define LABEL_W		250
#define PANEL_W		300
#define GAP		50
#define ROW_H		26
#define TOP		100

/*
 * One panel of horizontal bars.  TTFT spans orders of magnitude between
 * rows (a saturated cluster's queue against a cache hit), so its axis is
 * logarithmic, from the power of ten below the smallest value to the one
 * above the largest, with a tick at each power; reuse is linear, 0-100%.
 */
static void
svg_panel(FILE *fp, const scenario *sc, const sim_result *res, double x0,
    const char *title, bool reuse)
{
	double lo = 1e300, hi = 0, v, span = PANEL_W - 80, p;
	size_t i, y0 = TOP - 4, y1 = (size_t)TOP + sc->nrows * ROW_H;

	for (i = 0; i < sc->nrows; i++) {
		v = reuse ? res[i].kv_reuse * 100.0 : res[i].ttft_p99_ms;
		if (v > 0 && v < lo)
			lo = v;
		if (v > hi)
			hi = v;
	}
	if (reuse) {
		lo = 0;
		hi = 100;
	} else {
		lo = hi > 0 ? pow(10, floor(log10(lo))) : 1;
		hi = hi > lo ? pow(10, ceil(log10(hi))) : lo * 10;
	}
	fprintf(fp, "  <text x=\"%.1f\" y=\"%d\" class=\"h\">", x0, TOP - 30);
	xml_text(fp, title);
	fprintf(fp, "</text>\n");
	/* Axis ticks. */
	for (p = reuse ? 0 : lo; p <= hi * 1.0000001; p = reuse ? p + 25 :
	    p * 10) {
		double x = x0 + (reuse ? p / 100.0 : log10(p / lo) /
		    log10(hi / lo)) * span;

		fprintf(fp, "  <line x1=\"%.1f\" y1=\"%zu\" x2=\"%.1f\" "
		    "y2=\"%zu\" stroke=\"#ddd\"/>\n", x, y0, x, y1);
		fprintf(fp, "  <text x=\"%.1f\" y=\"%zu\" class=\"v\" "
		    "text-anchor=\"middle\">%.0f%s</text>\n", x, y0 - 4, p,
		    reuse ? "%" : "");
	}
	fprintf(fp, "  <line x1=\"%.1f\" y1=\"%zu\" x2=\"%.1f\" y2=\"%zu\" "
	    "stroke=\"#444\"/>\n", x0, y0, x0, y1);
	for (i = 0; i < sc->nrows; i++) {
		double w;
		size_t y = (size_t)TOP + i * ROW_H;

		v = reuse ? res[i].kv_reuse * 100.0 : res[i].ttft_p99_ms;
		if (reuse)
			w = v / 100.0 * span;
		else
			w = v > lo ? log10(v / lo) / log10(hi / lo) * span : 0;
		if (!(w > 0))
			w = 0;
		fprintf(fp, "  <rect x=\"%.1f\" y=\"%zu\" width=\"%.1f\" "
		    "height=\"%d\" fill=\"%s\"/>\n", x0, y + 4, w, ROW_H - 8,
		    row_color(sc->rows[i].lca));
		fprintf(fp, "  <text x=\"%.1f\" y=\"%zu\" class=\"v\">%.1f%s"
		    "</text>\n", x0 + w + 4, y + ROW_H / 2 + 4, v,
		    reuse ? "%" : " ms");
	}
}

int
report_svg(FILE *fp, const scenario *sc, const sim_result *res)
{
	size_t i, h = (size_t)TOP + sc->nrows * ROW_H + 48;
	double p1 = LABEL_W, p2 = LABEL_W + PANEL_W + GAP;

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
	    "<tspan fill=\"%s\">not applicable</tspan></text>\n",
	    row_color(1), row_color(0), row_color(-1));
	for (i = 0; i < sc->nrows; i++) {
		fprintf(fp, "  <text x=\"10\" y=\"%zu\">", (size_t)TOP +
		    i * ROW_H + ROW_H / 2 + 4);
		xml_text(fp, sc->rows[i].name);
		fprintf(fp, "</text>\n");
	}
	svg_panel(fp, sc, res, p1, "TTFT p99 (ms, log scale)", false);
	svg_panel(fp, sc, res, p2, "KV-cache reuse (reused / input tokens)",
	    true);
	fprintf(fp, "  <text x=\"10\" y=\"%zu\" class=\"v\">window %.0f-%.0f s "
	    "of simulated time; TTFT on a log scale, reuse from 0 to 100%%"
	    "</text>\n", h - 16, sc->warmup_ms / 1000.0,
	    sc->duration_ms / 1000.0);
	fprintf(fp, "</svg>\n");
	return ferror(fp) ? -1 : 0;
}

// test-plot.c - lib/verify/plot.c: the log10 axis rule (ticks cover the data,
// 1-2-5 ticks under a decade, at most a handful of decade ticks over a wide
// range) and layers.svg of the synthetic report (tests/tools/synthetic-report.h):
// title and caption with the settings, one series per method and panel where
// the metric exists, exact zeros and NaN gaps in the legend, every string
// escaped, the same bytes on a second write.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/synthetic-report.h"
#include "util/fs.h"
#include "verify/plot.h"

#define TEST_TMPDIR_NAME "plot"
#include "test-tmpdir.h"

static int count(const char * s, const char * pat) {
    int c = 0;
    for (const char * q = s; (q = strstr(q, pat)); q++) c++;
    return c;
}

// ---- log axis ------------------------------------------------------------------------
static void expect_ticks(double vmin, double vmax, const char * joined) {
    struct oscar_log_axis a;
    oscar_log_axis_fit(vmin, vmax, &a);
    char got[256] = "";
    size_t n = 0;
    for (int32_t t = 0; t < a.n_ticks; t++) n += (size_t) snprintf(got + n, sizeof got - n, "%s%s", t ? " " : "", a.labels[t]);
    printf("[%g, %g]: %s\n", vmin, vmax, got);
    assert_string_equal(got, joined);
    assert_true(a.lo == a.ticks[0] && a.hi == a.ticks[a.n_ticks - 1]);
}

static void test_axis_known(void ** state) {
    (void) state;
    expect_ticks(3e-3, 8e-3, "2e-3 5e-3 1e-2");                       // under a decade: 1-2-5 rungs
    expect_ticks(1e-2, 1e-2, "5e-3 1e-2 2e-2");                       // one value on a rung: one rung either side
    expect_ticks(0.031, 0.038, "2e-2 5e-2");                          // between two rungs
    expect_ticks(2e-3, 5e-3, "2e-3 5e-3");                            // on rungs: no wider
    expect_ticks(1.5e-5, 0.3, "1e-5 1e-4 1e-3 1e-2 1e-1 1e0");        // over two decades: decades
    expect_ticks(3.2e-14, 0.4, "1e-14 1e-11 1e-8 1e-5 1e-2 1e1");     // 15 decades: every third
    expect_ticks(4.0, 70.0, "2e0 5e0 1e1 2e1 5e1 1e2");               // positive exponents
}

// Any positive range: ticks increase, the ends cover the data, the count stays readable.
static void test_axis_sweep(void ** state) {
    (void) state;
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int it = 0; it < 20000; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double e0 = -300.0 + 600.0 * (double) (x >> 11) / 9007199254740992.0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double span = (it % 2 ? 0.01 : 4.0) * (double) (x % 1000) / 100.0;   // small and large spans
        if (e0 + span > 307) continue;
        double vmin = pow(10.0, e0), vmax = pow(10.0, e0 + span);
        struct oscar_log_axis a;
        oscar_log_axis_fit(vmin, vmax, &a);
        assert_true(a.n_ticks >= 2 && a.n_ticks <= 8);
        for (int32_t t = 1; t < a.n_ticks; t++) assert_true(a.ticks[t] > a.ticks[t - 1]);
        assert_true(a.lo <= log10(vmin) + 1e-9 && a.hi >= log10(vmax) - 1e-9);
        if (span < 1) {   // under a decade: 1-2-5 rungs, at most one rung beyond the data on each side
            assert_true(a.hi - a.lo < 1.0 + log10(5.0) + 1e-9);
            for (int32_t t = 0; t < a.n_ticks; t++) assert_true(strchr("125", a.labels[t][0]) && a.labels[t][1] == 'e');
        }
    }
}

// ---- the SVG -------------------------------------------------------------------------
static char * synth_svg(int32_t n_methods, int32_t n_layer, void (*edit)(struct synth_report *)) {
    struct synth_report s;
    assert_int_equal(synth_report_init(&s, n_methods, n_layer), 0);
    if (edit) edit(&s);
    char * svg = NULL;
    assert_int_equal(oscar_verify_svg_text(&s.r, &svg), OSCAR_OK);
    synth_report_free(&s);
    return svg;
}

// The opening tag of the series of method m in panel p, or NULL.
static const char * series(const char * svg, const char * m, const char * p) {
    char pat[128];
    snprintf(pat, sizeof pat, "data-method=\"%s\" data-panel=\"%s\"", m, p);
    return strstr(svg, pat);
}

// Attribute values (path data, circle centres) that hold anything but numbers
// and path commands, e.g. a printed nan or inf.
static int bad_coordinates(const char * svg) {
    static const char * const attrs[] = {" d=\"", " cx=\"", " cy=\"", " x1=\"", " y1=\"", " x2=\"", " y2=\""};
    int bad = 0;
    for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++)
        for (const char * q = svg; (q = strstr(q, attrs[k])); q++) {
            const char * v = q + strlen(attrs[k]);
            size_t n = strcspn(v, "\"");
            if (n == 0 || strspn(v, "ML0123456789., -") != n) bad++;
        }
    return bad;
}

static void test_svg_synthetic(void ** state) {
    (void) state;
    char * svg = synth_svg(3, 5, NULL);
    // the visible title and the caption with every setting, escaped
    assert_non_null(strstr(svg, "<text id=\"title\""));
    assert_non_null(strstr(svg, ">oscar-verify: per-layer error, Evil &amp; &lt;Model&gt; &quot;q&quot; &apos;a&apos;</text>"));
    static const char * const caption[] = {"corpus held&amp;out&lt;1&gt;.txt", "rotations rot&lt;&amp;&gt;", "ctx 64",
                                           "sink 4", "recent 8", "group size 16", "scale float16", "windows scored 2",
                                           "metric tokens 32", "5 layers"};
    const char * cap = strstr(svg, "<text id=\"caption\"");
    assert_non_null(cap);
    const char * cap_end = strstr(cap, "</text>");
    for (size_t k = 0; k < sizeof caption / sizeof caption[0]; k++) {
        const char * at = strstr(cap, caption[k]);
        if (!at || at > cap_end) fail_msg("caption lacks '%s'", caption[k]);
    }
    // nothing from the names unescaped
    assert_null(strstr(svg, "& <"));
    assert_null(strstr(svg, "<Model"));
    assert_null(strstr(svg, "<1>"));
    assert_null(strstr(svg, "rot<"));
    // one series per method and panel where it has values: oscar has no out_rel
    assert_int_equal(count(svg, "data-method="), 11);
    assert_int_equal(count(svg, "data-method=\"bf16\""), 4);
    assert_int_equal(count(svg, "data-method=\"naive\""), 4);
    assert_int_equal(count(svg, "data-method=\"oscar\""), 3);
    assert_null(series(svg, "oscar", "out_rel"));
    assert_int_equal(count(svg, "data-panel=\"out_rel\""), 2);
    assert_int_equal(count(svg, "data-panel=\"kl\""), 3);
    assert_int_equal(count(svg, "class=\"panel\""), 4);
    // naive's out_rel breaks at the NaN of layer 2: two subpaths, no garbage coordinates
    const char * nv = series(svg, "naive", "out_rel");
    assert_non_null(nv);
    const char * d = strstr(nv, " d=\""), * d_end = d ? strchr(d + 4, '"') : NULL;
    assert_non_null(d_end);
    int moves = 0;
    for (const char * q = d; q < d_end; q++) moves += *q == 'M';
    assert_int_equal(moves, 2);
    assert_int_equal(bad_coordinates(svg), 0);
    // bf16 is on the "0" row, dotted, and said to be exact; the legend lists each method once
    assert_non_null(strstr(series(svg, "bf16", "k_rel_mse"), "stroke-dasharray=\"0.1 4.5\""));
    assert_int_equal(count(svg, "data-legend="), 3);
    assert_non_null(strstr(svg, "bf16 (exact, 0)</text>"));
    assert_non_null(strstr(svg, "no values in: post-W_O"));
    assert_non_null(strstr(svg, "1 NaN/inf point skipped"));
    assert_int_equal(count(svg, "(exact, 0)"), 1);
    // deterministic: the same bytes again, and through the file writer
    char * again = synth_svg(3, 5, NULL);
    assert_string_equal(svg, again);
    char path[300];
    snprintf(path, sizeof path, "%s/layers.svg", tmpdir);
    struct synth_report s;
    assert_int_equal(synth_report_init(&s, 3, 5), 0);
    assert_int_equal(oscar_verify_write_svg(&s.r, path), OSCAR_OK);
    synth_report_free(&s);
    char * file = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(path, 1 << 22, &file, &n), OSCAR_OK);
    assert_int_equal(n, strlen(svg));
    assert_memory_equal(file, svg, n);
    free(file);
    free(again);
    free(svg);
}

static void no_oscar_values(struct synth_report * s) {
    for (int32_t l = 0; l < s->r.n_layer; l++) memset(&s->ms[2].layers[l], 0, sizeof s->ms[2].layers[l]);
}

static void bad_bytes_name(struct synth_report * s) {
    snprintf(s->r.model_name, sizeof s->r.model_name, "m\x01x\xff\xc3(");   // control, invalid, truncated UTF-8
}

static void test_svg_edge_cases(void ** state) {
    (void) state;
    // a method with no metric at all: no series, still in the legend, said so
    char * svg = synth_svg(3, 5, no_oscar_values);
    assert_int_equal(count(svg, "data-method=\"oscar\""), 0);
    assert_int_equal(count(svg, "data-legend=\"oscar\""), 1);
    assert_non_null(strstr(svg, "not drawn: no values"));
    free(svg);
    // bytes that XML cannot hold become U+FFFD
    svg = synth_svg(3, 5, bad_bytes_name);
    assert_non_null(strstr(svg, "per-layer error, m\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd(</text>"));
    assert_null(strchr(svg, '\x01'));
    assert_null(strchr(svg, '\xff'));
    free(svg);
    // one layer, and many methods and layers: every method drawn in every panel, labels bounded
    svg = synth_svg(2, 1, NULL);
    assert_int_equal(count(svg, "data-method="), 8);
    assert_int_equal(count(svg, "<circle"), 8);   // a path of one point draws nothing: every series is a dot
    free(svg);
    svg = synth_svg(OSCAR_VERIFY_MAX_METHODS, 200, NULL);
    assert_int_equal(count(svg, "data-method="), 4 * OSCAR_VERIFY_MAX_METHODS - 1);
    assert_int_equal(count(svg, "data-legend="), OSCAR_VERIFY_MAX_METHODS);
    assert_true(count(svg, "text-anchor=\"middle\" font-size=\"11\">") <= 4 * 10);   // layer labels: <= 10 a panel
    free(svg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_axis_known),
        cmocka_unit_test(test_axis_sweep),
        cmocka_unit_test(test_svg_synthetic),
        cmocka_unit_test(test_svg_edge_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

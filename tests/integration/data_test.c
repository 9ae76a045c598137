/*
 * data_test.c — the data-analysis profile (proxy/python/sandcell_startup.py)
 * end to end: DataFrames as `data`, matplotlib figures as `png` + `chart`,
 * lists and dicts as `json`, PIL images shown on save; never a stderr line.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--log-level", "info");

#define URL test_url()

/* Runs code and pins that it ran cleanly: no error, nothing on stderr. */
static json_t *
run_quiet(const char *ctx, const char *code)
{
	json_t *l = run(URL, ctx, code);
	json_t *err, *se;

	cr_assert_not_null(l, "no answer for:\n%s", code);
	err = line_of(l, "error", 0);
	cr_assert_null(err, "error %s: %s", json_string_value(json_object_get(err, "name")),
		       json_string_value(json_object_get(err, "value")));
	se = line_of(l, "stderr", 0);
	cr_assert_null(se, "stderr: %s", json_string_value(json_object_get(se, "text")));
	return l;
}

/* The first result line that carries key (png, chart, data, json). */
static json_t *
result_with(json_t *lines, const char *key)
{
	json_t *r;

	for (int i = 0; (r = line_of(lines, "result", i)); i++)
		if (json_object_get(r, key))
			return r;
	return NULL;
}

static json_t *
chart_of(json_t *lines)
{
	json_t *r = result_with(lines, "chart");

	cr_assert_not_null(r, "no result with a chart");
	cr_assert(json_is_object(json_object_get(r, "chart")));
	return json_object_get(r, "chart");
}

static const char *
str_at(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "(not a string)";
}

static double
num_at(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	cr_assert(json_is_number(v), "%s is not a number", key);
	return json_number_value(v);
}

static bool
near(double a, double b)
{
	return fabs(a - b) < 1e-6;
}

/* points[i] == [x, y] with numeric x and y */
static void
assert_point(json_t *points, size_t i, double x, double y)
{
	json_t *p = json_array_get(points, i);

	cr_assert(json_array_size(p) == 2, "point %zu is not a pair", i);
	cr_assert(near(json_number_value(json_array_get(p, 0)), x) &&
			  near(json_number_value(json_array_get(p, 1)), y),
		  "point %zu is (%g, %g), expected (%g, %g)", i,
		  json_number_value(json_array_get(p, 0)), json_number_value(json_array_get(p, 1)),
		  x, y);
}

Test(data, dataframe_gives_data_by_column_with_iso_timestamps, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import pandas as pd\n"
				    "pd.DataFrame({'city': ['Oslo', 'Rome'],\n"
				    "              'temp': [3.5, float('nan')],\n"
				    "              'n': [1, 2],\n"
				    "              'when': pd.to_datetime(['2024-01-02 03:04:05', "
				    "'2024-02-03'])})");
	json_t *r = result_with(l, "data");

	cr_assert_not_null(r, "no result with data");
	cr_assert(json_is_true(json_object_get(r, "is_main_result")));
	cr_assert_not_null(json_object_get(r, "html"), "the HTML table is still there");
	json_t *d = json_object_get(r, "data");
	cr_assert(json_is_object(d));
	cr_assert_eq(json_object_size(d), 4);
	json_t *city = json_object_get(d, "city"), *temp = json_object_get(d, "temp");
	json_t *n = json_object_get(d, "n"), *when = json_object_get(d, "when");
	cr_assert_str_eq(json_string_value(json_array_get(city, 0)), "Oslo");
	cr_assert_str_eq(json_string_value(json_array_get(city, 1)), "Rome");
	cr_assert(near(json_number_value(json_array_get(temp, 0)), 3.5));
	cr_assert(json_is_null(json_array_get(temp, 1)), "NaN is null");
	cr_assert(json_is_integer(json_array_get(n, 0)), "numpy ints are JSON integers");
	cr_assert_eq(json_integer_value(json_array_get(n, 1)), 2);
	cr_assert_str_eq(json_string_value(json_array_get(when, 0)), "2024-01-02T03:04:05");
	cr_assert_str_eq(json_string_value(json_array_get(when, 1)), "2024-02-03T00:00:00");
	json_decref(l);
}

Test(data, groupby_keys_lead_the_data, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import pandas as pd\n"
				    "pd.DataFrame({'k': ['a', 'b', 'a'], 'v': [1, 2, 3]})"
				    ".groupby('k').sum()");
	json_t *d = json_object_get(result_with(l, "data"), "data");

	cr_assert_not_null(d);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(d, "k"), 1)), "b");
	cr_assert_eq(json_integer_value(json_array_get(json_object_get(d, "v"), 0)), 4);
	json_decref(l);
}

Test(data, line_plot_gives_png_and_line_chart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.plot([1, 2, 3], [4, 1, 9], label='growth')\n"
				    "plt.title('Growth'); plt.xlabel('Day'); plt.ylabel('Mass (kg)')\n"
				    "plt.show()");
	json_t *r = result_with(l, "chart");

	cr_assert_not_null(r, "no result with a chart");
	const char *png = json_string_value(json_object_get(r, "png"));
	cr_assert(png && !strncmp(png, "iVBORw0KGgo", 11), "the same result has the png");
	json_t *c = json_object_get(r, "chart");
	cr_assert_str_eq(str_at(c, "type"), "line");
	cr_assert_str_eq(str_at(c, "title"), "Growth");
	cr_assert_str_eq(str_at(c, "x_label"), "Day");
	cr_assert_str_eq(str_at(c, "y_label"), "Mass (kg)");
	cr_assert(json_is_null(json_object_get(c, "x_unit")));
	cr_assert_str_eq(str_at(c, "y_unit"), "kg");
	cr_assert_str_eq(str_at(c, "x_scale"), "linear");
	cr_assert(json_array_size(json_object_get(c, "x_ticks")) > 0);
	cr_assert_eq(json_array_size(json_object_get(c, "x_ticks")),
		     json_array_size(json_object_get(c, "x_tick_labels")));
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 1);
	cr_assert_str_eq(str_at(json_array_get(els, 0), "label"), "growth");
	json_t *pts = json_object_get(json_array_get(els, 0), "points");
	cr_assert_eq(json_array_size(pts), 3);
	assert_point(pts, 0, 1, 4);
	assert_point(pts, 1, 2, 1);
	assert_point(pts, 2, 3, 9);
	json_decref(l);
}

Test(data, datetime_line_has_iso_x_values, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt, pandas as pd\n"
				    "plt.figure()\n"
				    "plt.plot(pd.date_range('2024-03-01', periods=2), [1, 2])\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "x_scale"), "datetime");
	json_t *pts = json_object_get(json_array_get(json_object_get(c, "elements"), 0), "points");
	cr_assert_str_eq(json_string_value(json_array_get(json_array_get(pts, 1), 0)),
			 "2024-03-02T00:00:00");
	json_decref(l);
}

Test(data, bar_plot_gives_bar_chart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.bar(['a', 'b', 'c'], [3, 5, 2], label='sales')\n"
				    "plt.show()");
	json_t *c = chart_of(l);
	const char *labels[] = {"a", "b", "c"};
	const double values[] = {3, 5, 2};

	cr_assert_str_eq(str_at(c, "type"), "bar");
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *e = json_array_get(els, i);
		cr_assert_str_eq(str_at(e, "label"), labels[i]);
		cr_assert(near(num_at(e, "value"), values[i]));
		cr_assert_str_eq(str_at(e, "group"), "sales");
	}
	json_decref(l);
}

Test(data, scatter_plot_gives_scatter_chart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.scatter([1, 2, 3], [4, 5, 6], label='obs')\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "scatter");
	json_t *el = json_array_get(json_object_get(c, "elements"), 0);
	cr_assert_str_eq(str_at(el, "label"), "obs");
	json_t *pts = json_object_get(el, "points");
	cr_assert_eq(json_array_size(pts), 3);
	assert_point(pts, 0, 1, 4);
	assert_point(pts, 2, 3, 6);
	json_decref(l);
}

Test(data, pie_plot_gives_pie_chart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.pie([1, 2, 1], labels=['x', 'y', 'z'])\n"
				    "plt.title('Share')\n"
				    "plt.show()");
	json_t *c = chart_of(l);
	const char *labels[] = {"x", "y", "z"};
	const double angles[] = {90, 180, 90};

	cr_assert_str_eq(str_at(c, "type"), "pie");
	cr_assert_str_eq(str_at(c, "title"), "Share");
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *e = json_array_get(els, i);
		cr_assert_str_eq(str_at(e, "label"), labels[i]);
		cr_assert(fabs(num_at(e, "angle") - angles[i]) < 1e-3, "angle %g",
			  num_at(e, "angle"));
		cr_assert(near(num_at(e, "radius"), 1));
	}
	json_decref(l);
}

Test(data, box_plot_gives_box_and_whisker_chart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['A', 'B'])\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "box_and_whisker");
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 2);
	json_t *a = json_array_get(els, 0);
	cr_assert_str_eq(str_at(a, "label"), "A");
	cr_assert(near(num_at(a, "min"), 1));
	cr_assert(near(num_at(a, "first_quartile"), 2.25));
	cr_assert(near(num_at(a, "median"), 3.5));
	cr_assert(near(num_at(a, "third_quartile"), 4.75));
	cr_assert(near(num_at(a, "max"), 5));
	json_t *out = json_object_get(a, "outliers");
	cr_assert_eq(json_array_size(out), 1);
	cr_assert(near(json_number_value(json_array_get(out, 0)), 20));
	cr_assert_str_eq(str_at(json_array_get(els, 1), "label"), "B");
	cr_assert_eq(json_array_size(json_object_get(json_array_get(els, 1), "outliers")), 0);
	json_decref(l);
}

Test(data, two_axes_give_a_superchart, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "fig, (a, b) = plt.subplots(1, 2)\n"
				    "a.plot([1, 2], [3, 4]); a.set_title('left')\n"
				    "b.bar(['u', 'v'], [1, 2])\n"
				    "fig.suptitle('Both')\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "superchart");
	cr_assert_str_eq(str_at(c, "title"), "Both");
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 2);
	cr_assert_str_eq(str_at(json_array_get(els, 0), "type"), "line");
	cr_assert_str_eq(str_at(json_array_get(els, 0), "title"), "left");
	cr_assert_str_eq(str_at(json_array_get(els, 1), "type"), "bar");
	json_decref(l);
}

Test(data, image_without_a_chart_kind_is_unknown, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "plt.figure()\n"
				    "plt.imshow([[0, 1], [1, 0]]); plt.title('img')\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "unknown");
	cr_assert_str_eq(str_at(c, "title"), "img");
	cr_assert_eq(json_array_size(json_object_get(c, "elements")), 0);
	json_decref(l);
}

/* key is there and null (E2B sends no empty title or axis label). */
static void
assert_null_at(json_t *o, const char *what, const char *key)
{
	json_t *v = json_object_get(o, key);

	cr_assert(v, "%s has no %s", what, key);
	cr_assert(json_is_null(v), "%s %s is %s, expected null", what, key,
		  json_is_string(v) ? json_string_value(v) : "not a string");
}

Test(data, empty_titles_and_axis_labels_are_null, .timeout = 90)
{
	static const char *const kinds[][2] = {
		{"plt.scatter([1, 2], [3, 4])", "scatter"},
		{"plt.plot([1, 2], [3, 4])", "line"},
		{"plt.bar(['u', 'v'], [1, 2])", "bar"},
		{"plt.boxplot([[1, 2, 3], [2, 3, 4]])", "box_and_whisker"},
		{"plt.pie([1, 2])", "pie"},
		{"plt.imshow([[0, 1], [1, 0]])", "unknown"},
	};
	char code[256];

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		snprintf(code, sizeof(code),
			 "import matplotlib.pyplot as plt\nplt.figure()\n%s\nplt.show()",
			 kinds[i][0]);
		json_t *l = run_quiet(NULL, code);
		json_t *c = chart_of(l);

		cr_assert_str_eq(str_at(c, "type"), kinds[i][1]);
		assert_null_at(c, kinds[i][1], "title");
		if (strcmp(kinds[i][1], "pie") && strcmp(kinds[i][1], "unknown")) {
			assert_null_at(c, kinds[i][1], "x_label");
			assert_null_at(c, kinds[i][1], "y_label");
			assert_null_at(c, kinds[i][1], "x_unit");
			assert_null_at(c, kinds[i][1], "y_unit");
		}
		json_decref(l);
	}
}

/* A superchart's title is the suptitle as it is ("" without one), as in E2B;
 * its charts' empty titles are null. */
Test(data, superchart_without_titles_has_empty_title_and_null_chart_titles, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "import matplotlib.pyplot as plt\n"
				    "fig, (a, b) = plt.subplots(1, 2)\n"
				    "a.plot([1, 2], [3, 4]); b.scatter([1], [2])\n"
				    "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "superchart");
	cr_assert_str_eq(str_at(c, "title"), "");
	json_t *els = json_object_get(c, "elements");
	cr_assert_eq(json_array_size(els), 2);
	for (size_t i = 0; i < 2; i++) {
		assert_null_at(json_array_get(els, i), "element", "title");
		assert_null_at(json_array_get(els, i), "element", "x_label");
	}
	json_decref(l);
}

Test(data, list_gives_json, .timeout = 30)
{
	json_t *l = run_quiet(NULL, "[1, 2, {\"a\": 3}]");
	json_t *r = result_with(l, "json");

	cr_assert_not_null(r, "no result with json");
	cr_assert_str_eq(json_string_value(json_object_get(r, "text")), "[1, 2, {'a': 3}]");
	json_t *want = json_loads("[1, 2, {\"a\": 3}]", 0, NULL);
	cr_assert(json_equal(json_object_get(r, "json"), want), "json is the list itself");
	json_decref(want);
	json_decref(l);
}

Test(data, unserialisable_dict_gives_no_json, .timeout = 30)
{
	json_t *l = run_quiet(NULL, "{'x': float('nan'), 'y': object}");
	json_t *r = line_of(l, "result", 0);

	cr_assert_not_null(r);
	cr_assert_null(json_object_get(r, "json"));
	json_decref(l);
}

Test(data, pil_save_writes_the_file_and_displays_it, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL), *ws, path[512], code[1024];

	cr_assert_not_null(id);
	cr_assert_not_null(ws = context_host_cwd(URL, id));
	/* a relative path: in the workspace, seen from here too */
	snprintf(path, sizeof(path), "%s/sandcell-data-test-%d.png", ws, (int)getpid());
	unlink(path);
	snprintf(code, sizeof(code),
		 "from PIL import Image\nImage.new('RGB', (8, 8), 'red').save('%s')",
		 strrchr(path, '/') + 1);
	json_t *l = run_quiet(id, code);
	json_t *r = result_with(l, "png");

	cr_assert_not_null(r, "no result with a png");
	cr_assert(!strncmp(json_string_value(json_object_get(r, "png")), "iVBORw0KGgo", 11));
	cr_assert_eq(access(path, F_OK), 0, "%s was not written", path);
	unlink(path);
	json_decref(l);
	cr_assert_eq(context_delete(URL, id), 0);
	free(ws);
	free(id);
}

Test(data, pil_show_displays_instead_of_a_viewer, .timeout = 90)
{
	json_t *l = run_quiet(NULL, "from PIL import Image\nImage.new('L', (4, 4)).show()");

	cr_assert_not_null(result_with(l, "png"), "no result with a png");
	json_decref(l);
}

Test(data, first_plot_in_a_fresh_context_is_quiet, .timeout = 120)
{
	char pattern[256];
	glob_t g;

	/* a cold font cache: this kernel builds it */
	snprintf(pattern, sizeof(pattern), "%s/cache/matplotlib/fontlist-*.json", test_run_dir());
	if (glob(pattern, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
		globfree(&g);
	}
	char *id = context_new(URL, "python", NULL);
	cr_assert_not_null(id);
	json_t *l = run_quiet(id, "import matplotlib.pyplot as plt\n"
				  "plt.plot([1, 2, 3])\n"
				  "plt.show()");
	cr_assert_not_null(result_with(l, "png"));
	json_decref(l);
	/* the one notice matplotlib prints while building it never reaches the
	 * user; its other messages still do */
	l = run(URL, id, "import logging\n"
			 "log = logging.getLogger('matplotlib.font_manager')\n"
			 "log.warning('Matplotlib is building the font cache; this may take a "
			 "moment.')\n"
			 "log.warning('something else')");
	json_t *se = line_of(l, "stderr", 0);
	cr_assert_not_null(se);
	const char *text = str_at(se, "text");
	cr_assert(strstr(text, "something else") && !strstr(text, "font cache"), "stderr: %s",
		  text);
	cr_assert_eq(count_of(l, "stderr"), 1);
	json_decref(l);
	free(id);
}

static struct broker cold;
static bool cold_up;

static void
cold_stop(void)
{
	if (cold_up)
		cr_assert_eq(broker_stop(&cold), 0, "a sanitizer report in its log");
	cold_up = false;
}

/*
 * The start-up profile imports nothing heavy: a cold kernel (--no-template)
 * has none of the data stack. A kernel forked from the template has pandas
 * and numpy on purpose (imported once, shared), but not matplotlib or PIL.
 */
Test(data, startup_leaves_the_namespace_clean, .fini = cold_stop, .timeout = 180)
{
	const char *args[] = {"--no-template", "--no-default-context", "--pool", "python=0", NULL};
	char *id = context_new(URL, "python", NULL);
	json_t *l = run_quiet(id, "sorted(k for k in globals() if not k.startswith('_') or "
				  "'sandcell' in k.lower())");

	cr_assert_str_eq(result_text(l), "['In', 'Out', 'exit', 'get_ipython', 'quit']");
	json_decref(l);
	l = run_quiet(id, "import sys\n"
			  "[m for m in ('matplotlib', 'PIL') if m in sys.modules]");
	cr_assert_str_eq(result_text(l), "[]", "nothing heavy is imported at start-up");
	json_decref(l);
	free(id);

	cr_assert_eq(broker_start(&cold, args), 0);
	cold_up = true;
	id = context_new(cold.b_url, "python", NULL);
	cr_assert_not_null(id);
	/* a cold kernel imports nothing heavy at start-up */
	expect_stdout(cold.b_url, id, "import sys\n"
				"print([m for m in ('pandas', 'matplotlib', 'PIL') if m in sys.modules])", "[]\n");
	free(id);
}

/* Characters of all stdout lines (NUL included). */
static size_t
stdout_chars(json_t *l)
{
	size_t n = 0;
	json_t *o;

	for (int i = 0; (o = line_of(l, "stdout", i)); i++)
		n += json_string_length(json_object_get(o, "text"));
	return n;
}

/*
 * ipykernel's fd-capture thread died on the first byte that is not UTF-8:
 * fd output (os.write, subprocesses) was lost from then on, and a writer of
 * more than a pipe's worth blocked for good.
 */
Test(data, invalid_utf8_on_fd_1_arrives_replaced_and_fd_output_goes_on, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run_quiet(id, "import os, subprocess\nos.write(1, b'bad:\\xff\\xfe\\n')");
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "bad:\xef\xbf\xbd\xef\xbf\xbd\n", "undecodable bytes as U+FFFD");
	free(out);
	json_decref(l);
	l = run_quiet(id, "os.system('echo sys')\nsubprocess.run(['echo', 'sub'])\n"
			  "os.write(1, b'w\\n')");
	out = stdout_of(l);
	cr_assert_str_eq(out, "sys\nsub\nw\n");
	free(out);
	json_decref(l);
	/* a character cut between two writes is joined, not replaced */
	l = run(URL, id, "os.write(2, b'e\\xc3'); os.write(2, b'\\xa9\\n'); None");
	char err[64] = "";
	json_t *se;
	for (int i = 0; (se = line_of(l, "stderr", i)); i++)
		strncat(err, str_at(se, "text"), sizeof(err) - strlen(err) - 1);
	cr_assert_str_eq(err, "e\xc3\xa9\n");
	json_decref(l);
	l = run(URL, id, "subprocess.run(['head', '-c', '300000', '/dev/zero']).returncode");
	cr_assert_str_eq(result_text(l), "0", "more than a pipe's worth is drained");
	cr_assert_eq(stdout_chars(l), 300000);
	json_decref(l);
	free(id);
}

/*
 * ipykernel's own fd readers end once the profile's own read fds 1 and 2: an
 * idle kernel keeps no thread blocked on a pipe nobody writes (each held a
 * stack and a malloc arena). fd output still arrives (the test above).
 */
Test(data, ipykernel_fd_readers_end_once_the_profile_reads_the_fds, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run_quiet(id, "import threading, time\n"
				  "t0 = time.monotonic()\n"
				  "while time.monotonic() - t0 < 10 and any(\n"
				  "        '_watch_pipe_fd' in t.name for t in threading.enumerate()):\n"
				  "    time.sleep(0.05)\n"
				  "print(sorted(t.name for t in threading.enumerate()\n"
				  "             if '_watch_pipe_fd' in t.name or t.name.startswith('sandcell-fd')))");
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "['sandcell-fd1', 'sandcell-fd2']\n");
	free(out);
	json_decref(l);
	l = run_quiet(id, "import os\nos.write(1, b'fd\\n')");
	out = stdout_of(l);
	cr_assert_str_eq(out, "fd\n");
	free(out);
	json_decref(l);
	free(id);
}

/*
 * The kernel keeps no sqlite history (HistoryManager.enabled = False: a
 * database in memory cost every idle kernel ~0.6 MB); the session's inputs
 * are still there for In, _i and %history.
 */
Test(data, session_history_works_without_a_history_database, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run_quiet(id, "a = 6 * 7");
	char *out;

	json_decref(l);
	l = run_quiet(id, "print(_i)\nprint(In[-2])\n"
			  "print(type(get_ipython().history_manager.db).__name__)");
	out = stdout_of(l);
	cr_assert_str_eq(out, "a = 6 * 7\na = 6 * 7\nDummyDB\n");
	free(out);
	json_decref(l);
	l = run_quiet(id, "%history -n 1");
	out = stdout_of(l);
	cr_assert(strstr(out, "a = 6 * 7"), "%%history: %s", out);
	free(out);
	json_decref(l);
	free(id);
}

/* A str the stream cannot encode fails at the print, as on a UTF-8 terminal. */
Test(data, lone_surrogate_is_a_short_encoding_error, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run(URL, id, "print('\\ud800')");
	json_t *e = line_of(l, "error", 0);

	cr_assert_not_null(e, "no error");
	cr_assert_str_eq(str_at(e, "name"), "UnicodeEncodeError");
	cr_assert(strstr(str_at(e, "value"), "surrogates not allowed"), "%s", str_at(e, "value"));
	cr_assert(strlen(str_at(e, "traceback")) < 2000, "a %zu-byte traceback",
		  strlen(str_at(e, "traceback")));
	cr_assert_null(line_of(l, "stderr", 0), "stderr: %s",
		       str_at(line_of(l, "stderr", 0), "text"));
	json_decref(l);
	l = run_quiet(id, "print('ok')");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "ok\n");
	free(out);
	json_decref(l);
	free(id);
}

Test(data, user_rebinding_builtins_does_not_break_charts, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run_quiet(id, "max = 1; len = 2; list = 3; type = 4; str = 5; round = 6\n"
				  "import matplotlib.pyplot as plt\n"
				  "plt.bar(['a', 'b'], [1, 2])\n"
				  "plt.show()");
	json_t *c = chart_of(l);

	cr_assert_str_eq(str_at(c, "type"), "bar");
	cr_assert_eq(json_array_size(json_object_get(c, "elements")), 2);
	json_decref(l);
	free(id);
}

#!/usr/bin/python3
"""The monitoring files under deploy/monitoring/ (make test-deploy).

promtool checks the alerting rules (sandcell-rules.yml) and runs their unit
tests (tests/deploy/rules_test.yml). Then a real broker is started from
$SANDCELL_BIN (default bin/) and scraped: every metric each Grafana dashboard
query and each alert expression names must be one that broker exports, and the
dashboard must show each thing operators watch (contexts, executions by
outcome, queue waits, kernel restarts, proxy respawns, pool depth, start-gate
waits, dropped output, the sandbox).
Prints one line per check, then "N passed, M failed, K skipped"; exits 1 if
anything failed.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api"))
from broker import ROOT, Broker, metric_names  # noqa: E402

RULES = os.path.join(ROOT, "deploy", "monitoring", "sandcell-rules.yml")
RULES_TEST = os.path.join(ROOT, "tests", "deploy", "rules_test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "monitoring", "grafana-dashboard.json")
# what the dashboard must show, by the metric that shows it
WATCHED = {
    "contexts": "sandcell_contexts",
    "executions by outcome": "sandcell_executions_total",
    "queue waits": "sandcell_execution_queue_wait_seconds_bucket",
    "kernel restarts": "sandcell_kernel_restarts_total",
    "proxy respawns": "sandcell_proxy_restarts_total",
    "pool depth": "sandcell_pool_ready",
    "start-gate waits": "sandcell_kernel_starts_waiting",
    "dropped output": "sandcell_output_dropped_total",
    "the sandbox": "sandcell_sandbox_enabled",
}
results = {"passed": 0, "failed": 0, "skipped": 0}


def check(name, ok, why=""):
    results["passed" if ok else "failed"] += 1
    print(f"ok - {name}" if ok else f"not ok - {name}: {why}")


KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
            "or", "unless", "offset", "inf", "nan"}


def metrics_in(expr):
    """The metric names a PromQL expression (Grafana's variables allowed) names:
    identifiers that are not functions, keywords, label names or durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)         # strings
    e = re.sub(r"\{[^}]*\}", " ", e)                       # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                      # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)                     # $__rate_interval, ${x}
    names = []
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        before = e[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":
            continue  # 5m, 1e3
        if e[m.end():].lstrip().startswith("(") or m.group(0) in KEYWORDS:
            continue
        names.append(m.group(0))
    return names


def dashboard_queries(dash):
    """(where, PromQL) of every panel target (rows' panels too) and template variable."""
    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))
    for p in panels(dash.get("panels", [])):
        for t in p.get("targets", []):
            yield f"panel '{p['title']}' {t.get('refId')}", t["expr"]
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q or "")
        if v.get("type") == "query":
            yield f"variable ${v['name']}", m.group(1) if m else q


def promtool(*args):
    r = subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=ROOT)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    rc, out = promtool("check", "rules", RULES)
    print("\n".join("# " + line for line in out.splitlines()))
    check("promtool check rules deploy/monitoring/sandcell-rules.yml", rc == 0, out)
    rc, out = promtool("test", "rules", RULES_TEST)
    check("promtool test rules tests/deploy/rules_test.yml", rc == 0, out)

    with open(DASHBOARD) as f:
        dash = json.load(f)
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    queries = list(dashboard_queries(dash))
    queries += [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]
    check("the dashboard has queries", len(queries) > 20, len(queries))
    check("the name check rejects a misspelt metric and reads a histogram query",
          metrics_in('sum(rate(sandcel_contexts{state="idle"}[5m])) by (le) > 1e3') ==
          ["sandcel_contexts"] and
          metrics_in("histogram_quantile(0.9, sum by (le) (rate(x_bucket[$__rate_interval])))")
          == ["x_bucket"])

    with Broker("--no-default-context") as b:
        req = urllib.request.Request(b.url + "/metrics")
        with urllib.request.urlopen(req, timeout=10) as r:
            exported = metric_names(r.read().decode())
    check("a live broker exports its metrics", "sandcell_build_info" in exported, sorted(exported))
    for where, expr in queries:
        names = metrics_in(expr)
        unknown = sorted(set(names) - exported)
        check(f"{where} names only exported metrics", names and not unknown,
              f"{unknown or 'no metric'} in {expr}")
    shown = {n for w, e in queries if w.startswith("panel") for n in metrics_in(e)}
    for what, metric in WATCHED.items():
        check(f"the dashboard shows {what} ({metric})", metric in shown)


if __name__ == "__main__":
    main()
    print(f"{results['passed']} passed, {results['failed']} failed, {results['skipped']} skipped")
    sys.exit(1 if results["failed"] else 0)

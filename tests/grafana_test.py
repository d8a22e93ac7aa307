#!/usr/bin/env python3
"""The Grafana dashboard (deploy/grafana/tierserve.json) against a real scrape.

A real `tierserve serve` (stories260K) behind a real `tierserve gateway`, which also runs a
local worker of its own (with the
response cache and API keys on both, so that cache hits, route decisions and degradations
at both levels happen), a few requests through the gateway, then both /metrics scraped.
Every panel's PromQL is parsed (promql-parser, pinned) and every metric it selects must be
a family in one of the scrapes, every label it matches or groups by one those samples
carry (`le` only on a histogram's buckets); the tier variable's label_values() too. The
layout is checked as Grafana loads it: unique panel ids, grid positions in 24 columns
without overlaps, every target on the datasource variable with a refId.

Run by CTest: grafana_test.py --bin build/bin/tierserve --model stories260K.gguf --root SRC --work DIR
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

from procs import Proc, http

try:
    import promql_parser
except ImportError as e:  # pragma: no cover
    print(f"promql-parser not installed ({e}); run scripts/python-env.sh", file=sys.stderr)
    sys.exit(1)

ARGS = None
SCRAPES = {}   # "worker" / "gateway" -> {family: {"type": str, "labels": set, "samples": int}}


def parse_scrape(text):
    fams = {}
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            fams.setdefault(name, {"type": typ, "labels": set(), "samples": 0})
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            raise AssertionError(f"unparsable sample line: {line!r}")
        name, labels = m.group(1), m.group(3) or ""
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                fam = name[: -len(suffix)]
        f = fams.setdefault(fam, {"type": types.get(fam, "untyped"), "labels": set(), "samples": 0})
        f["samples"] += 1
        for k in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', labels):
            if k != "le":
                f["labels"].add(k)
    return fams


def resolve(name):
    """A selected series name -> (scrape, family, is_bucket), or None."""
    for src, fams in SCRAPES.items():
        if name in fams:
            return src, fams[name], False
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and base in fams and fams[base]["type"] == "histogram":
                return src, fams[base], suffix == "_bucket"
    return None


def selectors_and_groupings(expr):
    """[(metric name, {labels matched})], {labels grouped by}, from a parsed expression."""
    sels, groups = [], set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            labels = {m.name for m in node.matchers.matchers} if node.matchers else set()
            sels.append((node.name, labels - {"__name__"}))
            return
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            groups.update(node.modifier.labels)
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if child is not None and isinstance(child, promql_parser.Expr):
                visit(child)
        for child in getattr(node, "args", None) or []:
            if isinstance(child, promql_parser.Expr):
                visit(child)

    visit(expr)
    return sels, groups


def substitute(expr):
    """Grafana's variables as Prometheus would see them after interpolation."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", ".*", expr)


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ARGS.root, "deploy", "grafana", "tierserve.json")) as f:
            cls.dash = json.load(f)

    def panels(self):
        return [p for p in self.dash["panels"] if p["type"] != "row"]

    def test_layout_loads_as_grafana_reads_it(self):
        d = self.dash
        self.assertEqual(d["uid"], "tierserve")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        cells = set()
        for p in d["panels"]:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for cx in range(g["x"], g["x"] + g["w"]):
                for cy in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((cx, cy), cells, f"panel {p['title']!r} overlaps another")
                    cells.add((cx, cy))
        names = {v["name"] for v in d["templating"]["list"]}
        for p in self.panels():
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p["targets"], p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                for var in re.findall(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)", t["expr"]):
                    self.assertTrue(var.startswith("__") or var in names, f"{p['title']}: unknown variable ${var}")
        # What the issue asks the dashboard to show, by metric.
        used = " ".join(t["expr"] for p in self.panels() for t in p["targets"])
        for m in ("tierserve_time_to_first_token_seconds", "tierserve_time_per_output_token_seconds",
                  "tierserve_queue_time_seconds", "tierserve_degradations_total", "tierserve_fast_standard_latency_correlation",
                  "tierserve_kv_cache_usage_ratio", "tierserve_gateway_cache_requests_total", "tierserve_route_decisions_total",
                  "tierserve_gateway_worker_up"):
            self.assertIn(m, used)

    def test_every_query_resolves_against_a_real_scrape(self):
        checked = 0
        queries = [(p["title"], t["expr"]) for p in self.panels() for t in p["targets"]]
        for v in self.dash["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["definition"])
                self.assertIsNotNone(m, v["definition"])
                r = resolve(m.group(1))
                self.assertIsNotNone(r, f"variable {v['name']}: {m.group(1)} is not scraped")
                self.assertIn(m.group(2), r[1]["labels"], f"variable {v['name']}")
        for title, expr in queries:
            try:
                ast = promql_parser.parse(substitute(expr))
            except Exception as e:  # the parser's own error type
                self.fail(f"{title}: {expr}: {e}")
            sels, groups = selectors_and_groupings(ast)
            self.assertTrue(sels, f"{title}: selects nothing")
            carried = set()
            for name, labels in sels:
                r = resolve(name)
                self.assertIsNotNone(r, f"{title}: {name} is in no scrape ({', '.join(SCRAPES)})")
                src, fam, bucket = r
                self.assertGreater(fam["samples"], 0, f"{title}: {name} has no samples in the {src}'s scrape")
                for label in labels:
                    self.assertIn(label, fam["labels"], f"{title}: {name} has no label {label} ({src})")
                carried |= fam["labels"] | ({"le"} if bucket else set())
                checked += 1
            for label in groups:
                self.assertIn(label, carried, f"{title}: grouped by {label}, which no selected series carries")
        self.assertGreater(checked, 15)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    hash_key = lambda k: subprocess.run([ARGS.bin, "serve", "--hash-key", k], capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(ARGS.work, exist_ok=True)
    wcfg = os.path.join(ARGS.work, "worker.yaml")
    with open(wcfg, "w") as f:  # the gateway's key on the worker has no fast tier: the worker degrades it
        f.write(f"keys:\n  - {{name: gw, sha256: {hash_key('sk-worker')}, tiers: [standard, batch]}}\n")
    worker = Proc(ARGS.bin, ["serve", "-c", wcfg, "-m", ARGS.model, "-t", "1", "--served-model-name", "m"], ARGS.work, "worker")
    wport = worker.port
    gateway = None
    try:
        gcfg = os.path.join(ARGS.work, "gateway.yaml")
        with open(gcfg, "w") as f:
            f.write(f"workers:\n  - {{name: w, kind: tierserve, model: m, url: 'http://127.0.0.1:{wport}', api_key: sk-worker}}\n"
                    f"  - {{name: local, kind: local, model: m2, path: '{ARGS.model}', threads: 1}}\n"
                    "cache: {max_bytes: 1000000}\n"
                    f"keys:\n  - {{name: all, sha256: {hash_key('sk-all')}}}\n"
                    f"  - {{name: slow, sha256: {hash_key('sk-slow')}, tiers: [standard, batch]}}\n")
        gateway = Proc(ARGS.bin, ["gateway", "-c", gcfg, "--work-dir", os.path.join(ARGS.work, "gw.d")], ARGS.work, "gateway")
        gport = gateway.port
        deadline = time.time() + 30
        while http(gport, "GET", "/health/ready")[0] != 200 and time.time() < deadline:
            time.sleep(0.05)
        body = {"model": "auto", "prompt": "Once upon", "max_tokens": 4, "temperature": 0}
        for _ in range(2):  # a miss, then a hit
            s, _, t = http(gport, "POST", "/v1/completions", body, key="sk-all")
            assert s == 200, t
        s, _, t = http(gport, "POST", "/v1/completions", {"model": "m", "prompt": "Once", "max_tokens": 4, "service_tier": "priority"}, key="sk-all")
        assert s == 200, t  # degraded by the worker (its key)
        s, _, t = http(gport, "POST", "/v1/completions", {"model": "m", "prompt": "Once", "max_tokens": 4, "stream": True, "service_tier": "priority"}, key="sk-slow")
        assert s == 200, t  # degraded by the gateway (this key)
        SCRAPES["worker"] = parse_scrape(http(wport, "GET", "/metrics", key="sk-worker")[2])
        SCRAPES["gateway"] = parse_scrape(http(gport, "GET", "/metrics", key="sk-all")[2])
        prog = unittest.main(argv=[sys.argv[0], *rest], verbosity=2, exit=False)
        ok = prog.result.wasSuccessful()
    finally:
        for p in (gateway, worker):
            if p is not None:
                p.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

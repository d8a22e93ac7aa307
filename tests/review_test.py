#!/usr/bin/env python3
"""Shadow traffic and the blind A/B review, end to end with real processes:

- two real workers on different models (stories260K and a 15M llama made by
  `tierserve make-model`) as two versions of one served model, behind a real gateway that
  mirrors every request (fraction 1.0) to the candidate: the clients get the stable
  version's answers only, the same as the stable worker gives directly, and every pair is
  recorded in SQLite with both answers, latencies, tokens and costs;
- `tierserve review --db` on that file, driven by a real headless Chromium over the
  DevTools protocol: a reviewer's name typed, then A, B or tie clicked for every pair
  shown, until the page says it is done; the verdicts and the report (JSON and HTML) agree
  with what was clicked;
- bad input: a verdict for a pair never shown, a choice that is not one, no reviewer name,
  a file that is not a database (review exits 2; the gateway's writer counts and logs).

Run by CTest: review_test.py --bin build/bin/tierserve --model stories260K.gguf --work DIR
Exits 77 without chromium unless TIERSERVE_REQUIRE_CHROMIUM=1.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import unittest
import urllib.request

import websocket

from procs import Proc, http

ARGS = None
PROCS = []


def start(name, argv):
    p = Proc(ARGS.bin, argv, ARGS.work, name)
    PROCS.append(p)
    return p, p.port


def metric(port, name):
    _, _, text = http(port, "GET", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Chromium:
    """Headless Chromium with the DevTools protocol on a port of its own choosing."""

    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        self.profile = os.path.join(ARGS.work, "chromium-profile")
        shutil.rmtree(self.profile, ignore_errors=True)
        self.proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(open(port_file).read().split("\n")[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30)
        self.seq = 0

    def call(self, method, **params):
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.seq:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, js):
        r = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{js}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, js, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.eval(js)
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {js}")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=20)


class ShadowAndReview(unittest.TestCase):
    N = 24

    @classmethod
    def setUpClass(cls):
        w = ARGS.work
        os.makedirs(w, exist_ok=True)
        cls.slow_model = os.path.join(w, "llama15m_q8_0.gguf")
        if not os.path.exists(cls.slow_model):
            subprocess.run([ARGS.bin, "make-model", "--arch", "llama", "--shape", "15m", "--type", "q8_0", "-o", cls.slow_model],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def cfg(name, path):
            out = os.path.join(w, name + ".yaml")
            with open(out, "w") as f:
                f.write(f"model: {{path: '{path}', threads: 1, served_name: chat}}\n")
            return out
        _, cls.v1 = start("v1", ["serve", "-c", cfg("v1", ARGS.model)])
        _, cls.v2 = start("v2", ["serve", "-c", cfg("v2", cls.slow_model)])
        cls.db = os.path.join(w, "pairs.db")
        for ext in ("", "-wal", "-shm"):
            if os.path.exists(cls.db + ext):
                os.unlink(cls.db + ext)
        gcfg = os.path.join(w, "gateway.yaml")
        with open(gcfg, "w") as f:
            f.write("workers:\n"
                    f"  - {{name: stable, kind: tierserve, model: chat, version: v1, url: 'http://127.0.0.1:{cls.v1}'}}\n"
                    f"  - {{name: candidate, kind: tierserve, model: chat, version: v2, url: 'http://127.0.0.1:{cls.v2}', cost_per_hour: 3}}\n"
                    "health: {interval_ms: 100, timeout_ms: 400}\n"
                    "models:\n  chat: {versions: {v1: 1, v2: 0}, stable: v1, shadow: {version: v2, fraction: 1.0}}\n"
                    f"shadow: {{db: '{cls.db}', max_wait_ms: 20000}}\n")
        cls.gproc, cls.g = start("gateway", ["gateway", "-c", gcfg, "--work-dir", os.path.join(w, "gw.d")])
        deadline = time.time() + 30
        while metric(cls.g, "tierserve_gateway_worker_up{") < 2 and time.time() < deadline:
            time.sleep(0.05)

    def test_1_clients_get_the_stable_answer_and_every_pair_is_recorded(self):
        prompts = [f"Once upon a time {i}" for i in range(self.N)]
        for p in prompts:
            body = {"model": "chat", "prompt": p, "max_tokens": 8, "temperature": 0}
            s, h, t = http(self.g, "POST", "/v1/completions", body)
            self.assertEqual(s, 200, t)
            self.assertEqual(h.get("x-tierserve-model-version"), "v1")
            # What the stable worker itself answers.
            s2, _, t2 = http(self.v1, "POST", "/v1/completions", body)
            self.assertEqual(json.loads(t)["choices"][0]["text"], json.loads(t2)["choices"][0]["text"])
        deadline = time.time() + 60
        while metric(self.g, 'tierserve_gateway_shadow_total{model="chat",outcome="recorded"}') < self.N and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(metric(self.g, 'tierserve_gateway_shadow_total{model="chat",outcome="recorded"}'), self.N)
        con = sqlite3.connect(self.db)
        rows = con.execute("SELECT request, stable_version, stable_status, stable_text, shadow_version, shadow_status, shadow_text,"
                           " stable_latency_ms, shadow_latency_ms, shadow_cost, stable_cost, shadow_completion_tokens FROM pairs").fetchall()
        con.close()
        self.assertEqual(len(rows), self.N)
        for r in rows:
            self.assertEqual((r[1], r[2], r[4], r[5]), ("v1", 200, "v2", 200), r)
            self.assertTrue(r[3] and r[6], r)
            self.assertGreater(r[7], 0)
            self.assertGreater(r[8], 0)
            self.assertGreater(r[9], 0)
            self.assertEqual(r[11], 8)
        self.assertEqual(sorted(json.loads(r[0])["prompt"] for r in rows), sorted(prompts))
        # The two models answer differently (so the review has something to judge).
        self.assertTrue(any(r[3] != r[6] for r in rows))
        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"[review] {self.N} pairs: median latency ms stable {med([r[7] for r in rows]):.1f}, shadow {med([r[8] for r in rows]):.1f} (not asserted)")

    def test_2_a_review_in_chromium_produces_the_report(self):
        _, rport = start("review", ["review", "--db", self.db])
        # Bad input first: nothing stored.
        s, _, t = http(rport, "POST", "/api/verdict", {"token": "nope", "reviewer": "ann", "choice": "a"})
        self.assertEqual((s, json.loads(t)["error"]["code"]), (404, "unknown_pair"))
        s, _, t = http(rport, "POST", "/api/verdict", {"token": "nope", "reviewer": "ann", "choice": "both"})
        self.assertEqual((s, json.loads(t)["error"]["code"]), (400, "invalid_choice"))
        s, _, t = http(rport, "POST", "/api/next", {"reviewer": ""})
        self.assertEqual((s, json.loads(t)["error"]["code"]), (400, "invalid_reviewer"))
        s, _, t = http(rport, "POST", "/api/next", raw=b"{not json")
        self.assertEqual(s, 400)
        # A token shown to one reviewer is not another's.
        s, _, t = http(rport, "POST", "/api/next", {"reviewer": "eve"})
        tok = json.loads(t)["token"]
        s, _, t = http(rport, "POST", "/api/verdict", {"token": tok, "reviewer": "mallory", "choice": "a"})
        self.assertEqual(s, 403, t)

        c = Chromium()
        clicks = {"a": 0, "b": 0, "tie": 0}
        seen_a = []
        try:
            c.call("Page.enable")
            c.call("Page.navigate", url=f"http://127.0.0.1:{rport}/")
            c.wait("document.readyState === 'complete' && !!document.getElementById('start')")
            # No network resources: nothing but the page itself was requested.
            self.assertEqual(c.eval("performance.getEntriesByType('resource').map(e => e.name)"), [])
            c.eval("document.getElementById('reviewer').value = 'ann'; document.getElementById('start').click(); true")
            order = ["a", "b", "tie", "a"]
            for i in range(self.N):
                # The page marks each pair it shows with the count judged before it (an
                # answer may be empty text).
                c.wait(f"!document.getElementById('pair').hidden && document.body.dataset.showing === '{i}'")
                seen_a.append(c.eval("document.getElementById('answer-a').textContent"))
                choice = order[i % len(order)]
                c.eval(f"document.getElementById('pick-{choice}').click(); true")
                clicks[choice] += 1
            c.wait("document.body.dataset.done === '1'")
            self.assertIn(f"{self.N} judged", c.eval("document.getElementById('status').textContent"))
            c.call("Page.navigate", url=f"http://127.0.0.1:{rport}/report")
            c.wait("!!document.querySelector('#report tr.comparison')")
            cells = c.eval("Array.from(document.querySelectorAll('#report tr.comparison td')).map(td => td.textContent)")
        finally:
            c.close()
        self.assertEqual(cells[:4], ["chat", "v1", "v2", str(self.N)])
        s, _, t = http(rport, "GET", "/report.json")
        self.assertEqual(s, 200)
        rep = json.loads(t)
        comp = rep["comparisons"][0]
        self.assertEqual(comp["verdicts"], self.N)
        self.assertEqual(comp["reviewers"], {"ann": self.N})
        self.assertEqual(comp["ties"], clicks["tie"])
        self.assertEqual(comp["shadow_wins"] + comp["stable_wins"], clicks["a"] + clicks["b"])
        lo, hi = comp["shadow_win_rate_ci95"]
        self.assertTrue(0 <= lo <= comp["shadow_win_rate"] <= hi <= 1, comp)
        self.assertGreater(comp["cost_per_1000"]["shadow"], 0)
        # The verdicts are the versions behind what was clicked: A was sometimes the shadow's
        # answer and sometimes the stable's (blind, in random order).
        con = sqlite3.connect(self.db)
        texts = dict(con.execute("SELECT stable_text, 'stable' FROM pairs").fetchall())
        con.close()
        sides = {"stable" if a in texts else "shadow" for a in seen_a}
        self.assertEqual(sides, {"stable", "shadow"}, "the order never changed")

    def test_3_a_file_that_is_not_a_database(self):
        junk = os.path.join(ARGS.work, "junk.db")
        with open(junk, "w") as f:
            f.write("not a database " * 20)
        r = subprocess.run([ARGS.bin, "review", "--db", junk, "--port", "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("junk.db", r.stderr)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("chromium not installed (scripts/deps.sh installs it)", file=sys.stderr)
        sys.exit(1 if os.environ.get("TIERSERVE_REQUIRE_CHROMIUM") == "1" else 77)
    try:
        prog = unittest.main(argv=[sys.argv[0], *rest], verbosity=2, exit=False)
        ok = prog.result.wasSuccessful()
    finally:
        for p in PROCS:
            p.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

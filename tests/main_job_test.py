#!/usr/bin/env python3
"""The README's main job as scripts/start.sh runs it, on port 0: `tierserve route-train` on
the shipped data (its report and the model file it writes), then `tierserve gateway -c
config/gateway.yaml` with local workers for both default models (SmolLM2 135M Instruct and
Gemma 3 270M) and that classifier. Requests for the router's model `auto` are routed by a
rule (code -> gemma3), by the classifier (a short factual question -> smollm2, the route
header naming the classifier and its score) and the answers come from the model named.
Run by CTest:  main_job_test.py --bin build/bin/tierserve --root . --work DIR
Exits 77 (skipped) when the default models are not installed, unless
TIERSERVE_REQUIRE_DEFAULT_MODEL=1 (scripts/test.sh sets it), which makes that a failure.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

ARGS = None


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())


def get_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


class MainJob(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ARGS.work, exist_ok=True)
        cls.classifier = os.path.join(ARGS.work, "route_classifier.json")
        if os.path.exists(cls.classifier):
            os.unlink(cls.classifier)
        data = os.path.join(ARGS.root, "data", "route")
        cls.train = subprocess.run([ARGS.bin, "route-train", "--data", os.path.join(data, "route_train.jsonl"),
                                    "--eval", os.path.join(data, "route_eval.jsonl"), "-o", cls.classifier],
                                   capture_output=True, text=True, timeout=300)
        env = dict(os.environ, TIERSERVE_MODEL_DIR=ARGS.model_dir, TIERSERVE_ROUTE_CLASSIFIER=cls.classifier)
        port_file = os.path.join(ARGS.work, "gateway.port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        cls.err = open(os.path.join(ARGS.work, "gateway.stderr"), "w")
        cls.gw = subprocess.Popen([ARGS.bin, "gateway", "-c", os.path.join(ARGS.root, "config", "gateway.yaml"),
                                   "--port", "0", "--port-file", port_file, "--work-dir", os.path.join(ARGS.work, "gw")],
                                  env=env, stdout=subprocess.DEVNULL, stderr=cls.err)
        deadline = time.time() + 180
        cls.port = None
        while time.time() < deadline and cls.gw.poll() is None:
            try:
                if cls.port is None and os.path.exists(port_file):
                    text = open(port_file).read()
                    if text.endswith("\n"):
                        cls.port = int(text)
                if cls.port is not None:
                    workers = get_json(cls.port, "/admin/stats")["workers"]
                    if workers and all(w["up"] for w in workers):
                        return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError("the gateway of config/gateway.yaml did not come up; see " + cls.err.name)

    @classmethod
    def tearDownClass(cls):
        if cls.gw.poll() is None:
            cls.gw.send_signal(signal.SIGTERM)
            cls.gw.wait(timeout=60)
        cls.err.close()

    def test_route_train_reports_and_writes_its_model(self):
        self.assertEqual(self.train.returncode, 0, self.train.stderr)
        m = re.search(r"accuracy ([0-9.]+) on the training set, ([0-9.]+) held out", self.train.stdout)
        self.assertIsNotNone(m, self.train.stdout)
        self.assertGreaterEqual(float(m.group(2)), 0.8, self.train.stdout)
        with open(self.classifier) as f:
            model = json.load(f)
        self.assertIsInstance(model, dict)

    def test_both_default_models_are_served(self):
        ids = {m["id"] for m in get_json(self.port, "/v1/models")["data"]}
        self.assertEqual(ids, {"smollm2", "gemma3", "auto"})
        self.assertEqual(get_json(self.port, "/admin/stats")["workers"][0]["up"], True)

    def test_a_rule_routes_code_to_the_full_model(self):
        st, h, body = post(self.port, "/v1/chat/completions", {
            "model": "auto", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Write a Python function that reverses a list."}]})
        self.assertEqual(st, 200)
        self.assertEqual(h.get("x-tierserve-route"), "rule:code")
        self.assertEqual(h.get("x-tierserve-model-served"), "gemma3")
        self.assertEqual(body["model"], "gemma3")
        self.assertTrue(body["choices"][0]["message"]["content"])

    def test_the_classifier_routes_what_no_rule_decides(self):
        st, h, body = post(self.port, "/v1/chat/completions", {
            "model": "auto", "max_tokens": 12, "temperature": 0,  # greedy: the answer is fixed
            "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        self.assertEqual(st, 200)
        route = h.get("x-tierserve-route", "")
        m = re.fullmatch(r"classifier:(small|full):([0-9.]+)", route)
        self.assertIsNotNone(m, route)
        self.assertGreaterEqual(float(m.group(2)), 0.7)  # config/gateway.yaml's threshold
        self.assertEqual(m.group(1), "small", route)
        self.assertEqual(h.get("x-tierserve-model-served"), "smollm2")
        self.assertIn("Paris", body["choices"][0]["message"]["content"])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--model-dir", default=os.environ.get("TIERSERVE_MODEL_DIR",
                                                         os.path.expanduser("~/.cache/tierserve/models")))
    ARGS, rest = p.parse_known_args()
    needed = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
    missing = [n for n in needed if not os.path.exists(os.path.join(ARGS.model_dir, n))]
    if missing:
        print(f"default models missing in {ARGS.model_dir}: {missing}; run scripts/setup-model.sh", file=sys.stderr)
        sys.exit(1 if os.environ.get("TIERSERVE_REQUIRE_DEFAULT_MODEL") == "1" else 77)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()

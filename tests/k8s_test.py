#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/k8s, checked offline as CI can:

- the base and every overlay render with `kubectl kustomize` (no cluster involved);
- every rendered object validates strictly: Kubernetes' own kinds against the API schemas
  kubernetes-validate ships (the oldest and the newest release it knows), the CRDs
  (InferencePool, InferenceObjective, PodMonitor, HTTPRoute) against deploy/k8s/schemas;
- what the objects say of each other holds: Services, the disruption budget, the
  autoscaler, the PodMonitor and the InferencePool select pods that exist and name ports
  those pods have; the gateway's grace period covers its pre-stop pause and its drain;
- what they say of tierserve holds, checked with the real binary: the gateway's ConfigMap
  passes `tierserve gateway --check-config` (with the rendered key Secret as its
  keys_file), every worker URL is a rendered Service's, every worker's arguments pass
  `tierserve serve --print-config` with the image's config and environment (from the
  Dockerfile), listen on the port the pod declares and serve the model the gateway asks
  for; each InferenceObjective's priority lands on its tier through the workers'
  request_priorities; the metric names the Endpoint Picker is told are in a real worker's
  /metrics;
- and the checks can fail: broken copies of the manifests are refused.

Run by CTest: k8s_test.py --root SRC --bin build/bin/tierserve --model stories260K.gguf --work DIR
Exits 77 (skipped) without kubectl unless TIERSERVE_REQUIRE_KUBECTL=1.
"""
import argparse
import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import yaml

from procs import Proc, http

try:
    import jsonschema
    import kubernetes_validate
except ImportError as e:  # pragma: no cover
    print(f"kubernetes-validate not installed ({e}); run scripts/python-env.sh", file=sys.stderr)
    sys.exit(1)

ARGS = None
DIRS = ["base", "overlays/cpu", "overlays/gpu", "overlays/gie"]
CRD_SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective"): "inferenceobjective-v1alpha2.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
}
# The oldest release the manifests need (the preStop sleep action is on by default from
# 1.30) and the newest kubernetes-validate knows.
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
RENDERED = {}


def k8s_dir(d):
    return os.path.join(ARGS.root, "deploy", "k8s", d)


def render(d):
    if d not in RENDERED:
        out = subprocess.run(["kubectl", "kustomize", k8s_dir(d)], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise AssertionError(f"kubectl kustomize {d}: {out.stderr}")
        RENDERED[d] = [x for x in yaml.safe_load_all(out.stdout) if x]
    return copy.deepcopy(RENDERED[d])


def schema_errors(doc):
    """Every validation error of one object, as strings (empty: valid)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRD_SCHEMAS:
        with open(os.path.join(ARGS.root, "deploy", "k8s", "schemas", CRD_SCHEMAS[key])) as f:
            schema = json.load(f)
        v = jsonschema.Draft202012Validator(schema)
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]
    errs = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errs.append(f"k8s {version}: {'/'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errs.append(f"k8s {version}: no schema for {key}: {e}")
    return errs


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def named(docs, kind, name):
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return hits[0] if hits else None


def pod_templates(docs):
    return [(d, d["spec"]["template"]) for d in of_kind(docs, "Deployment")]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def container_ports(template):
    return {p.get("name"): p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}


def image_env_and_files():
    """The runtime stage's ENV and COPY'd config files, from the Dockerfile."""
    from dockerfile_parse import DockerfileParser
    p = DockerfileParser(path=os.path.join(ARGS.root, "deploy", "docker", "Dockerfile"))
    env, files, stage = {}, {}, -1
    for ins in p.structure:
        if ins["instruction"] == "FROM":
            stage += 1
            env, files = {}, {}
        elif ins["instruction"] == "ENV":
            k, _, v = ins["value"].partition("=")
            env[k.strip()] = v.strip()
        elif ins["instruction"] == "COPY" and "--from" not in ins["value"]:
            src, dst = ins["value"].split()
            files[dst] = os.path.join(ARGS.root, src)
    return env, files


def run_bin(args, env=None, timeout=60):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([ARGS.bin, *args], capture_output=True, text=True, timeout=timeout, env=e)


class Manifests(unittest.TestCase):
    def test_every_object_validates(self):
        for d in DIRS:
            docs = render(d)
            self.assertGreater(len(docs), 5, d)
            for doc in docs:
                errs = schema_errors(doc)
                self.assertEqual(errs, [], f"{d}: {doc['kind']} {doc['metadata'].get('name')}")
                if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                    self.assertEqual(doc["metadata"].get("namespace"), "tierserve",
                                     f"{d}: {doc['kind']} {doc['metadata']['name']} outside the namespace")

    def test_references_between_objects_hold(self):
        for d in DIRS:
            docs = render(d)
            templates = pod_templates(docs)
            for svc in of_kind(docs, "Service"):
                sel = svc["spec"]["selector"]
                pods = [t for _, t in templates if matches(sel, t["metadata"]["labels"])]
                self.assertTrue(pods, f"{d}: Service {svc['metadata']['name']} selects no pods")
                for t in pods:
                    ports = container_ports(t)
                    for p in svc["spec"]["ports"]:
                        tp = p.get("targetPort", p["port"])
                        self.assertTrue(tp in ports or tp in ports.values(),
                                        f"{d}: Service {svc['metadata']['name']} targets port {tp}, the pod has {ports}")
            for pdb in of_kind(docs, "PodDisruptionBudget"):
                sel = pdb["spec"]["selector"]["matchLabels"]
                self.assertTrue(any(matches(sel, t["metadata"]["labels"]) for _, t in templates), f"{d}: PDB selects nothing")
            for hpa in of_kind(docs, "HorizontalPodAutoscaler"):
                ref = hpa["spec"]["scaleTargetRef"]
                self.assertIsNotNone(named(docs, ref["kind"], ref["name"]), f"{d}: HPA scales a missing {ref}")
            for pm in of_kind(docs, "PodMonitor"):
                sel = pm["spec"]["selector"]["matchLabels"]
                scraped = [(dep, t) for dep, t in templates if matches(sel, t["metadata"]["labels"])]
                names = {dep["metadata"]["name"] for dep, _ in scraped}
                for dep, t in templates:
                    if dep["metadata"]["name"].startswith("tierserve-") and dep["metadata"]["name"] != "tierserve-epp":
                        self.assertIn(dep["metadata"]["name"], names, f"{d}: the PodMonitor misses {dep['metadata']['name']}")
                for dep, t in scraped:
                    for ep in pm["spec"]["podMetricsEndpoints"]:
                        self.assertIn(ep["port"], container_ports(t), f"{d}: {dep['metadata']['name']} has no port {ep['port']}")
            # Volumes name ConfigMaps, Secrets and claims that are rendered.
            for dep, t in templates:
                for v in t["spec"].get("volumes", []):
                    for kind, field, key in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName"),
                                             ("PersistentVolumeClaim", "persistentVolumeClaim", "claimName")):
                        if field in v:
                            self.assertIsNotNone(named(docs, kind, v[field][key]),
                                                 f"{d}: {dep['metadata']['name']} mounts a missing {kind} {v[field][key]}")

    def test_the_gateway_drains_within_its_grace_period_and_has_probes(self):
        for d in DIRS:
            docs = render(d)
            dep = named(docs, "Deployment", "tierserve-gateway")
            spec = dep["spec"]["template"]["spec"]
            cm = named(docs, "ConfigMap", spec["volumes"][0]["configMap"]["name"])
            cfg = yaml.safe_load(cm["data"]["gateway.yaml"])
            c = spec["containers"][0]
            pause = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            self.assertGreater(spec["terminationGracePeriodSeconds"], pause + cfg.get("drain_timeout_ms", 30000) / 1000, d)
            self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/health/ready")
            self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/health/live")
            self.assertGreaterEqual(dep["spec"]["replicas"], 2, f"{d}: one gateway replica is a single point of failure")

    def test_the_gateway_config_is_valid_and_its_workers_are_services(self):
        for d in DIRS:
            docs = render(d)
            dep = named(docs, "Deployment", "tierserve-gateway")
            spec = dep["spec"]["template"]["spec"]
            vols = {v["name"]: v for v in spec["volumes"]}
            cm = named(docs, "ConfigMap", vols["config"]["configMap"]["name"])
            secret = named(docs, "Secret", vols["keys"]["secret"]["secretName"])
            work = os.path.join(ARGS.work, d.replace("/", "_"))
            os.makedirs(work, exist_ok=True)
            keys = os.path.join(work, "keys.yaml")
            with open(keys, "wb") as f:
                f.write(base64.b64decode(secret["data"]["keys.yaml"]))
            mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
            text = cm["data"]["gateway.yaml"].replace(mounts["keys"] + "/keys.yaml", keys)
            cfg_path = os.path.join(work, "gateway.yaml")
            with open(cfg_path, "w") as f:
                f.write(text)
            r = run_bin(["gateway", "-c", cfg_path, "--check-config"])
            self.assertEqual(r.returncode, 0, f"{d}: {r.stderr}")
            cfg = yaml.safe_load(text)
            self.assertIn(cfg["listen"]["port"], container_ports(dep["spec"]["template"]).values())
            for w in cfg["workers"]:
                m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/?", w["url"])
                self.assertIsNotNone(m, w["url"])
                svc = named(docs, "Service", m.group(1))
                self.assertIsNotNone(svc, f"{d}: worker {w['name']} calls a missing Service {m.group(1)}")
                self.assertIn(int(m.group(2)), [p["port"] for p in svc["spec"]["ports"]], w["url"])
                # The pods behind it serve the model the gateway asks them for.
                pods = [t for _, t in pod_templates(docs) if matches(svc["spec"]["selector"], t["metadata"]["labels"])]
                for t in pods:
                    args = t["spec"]["containers"][0]["args"]
                    flag = "--served-model-name"
                    served = args[args.index(flag) + 1] if flag in args else None
                    self.assertEqual(served, w.get("upstream_model", w["model"]), f"{d}: {w['name']}: {args}")

    def test_workers_arguments_are_valid_with_the_image_config(self):
        env, files = image_env_and_files()
        for d in DIRS:
            for dep, t in pod_templates(render(d)):
                c = t["spec"]["containers"][0]
                if c["image"].split(":")[0] != "tierserve" or c["args"][0] != "serve":
                    continue
                args = [files.get(a, a) for a in c["args"]]
                r = run_bin([*args, "--print-config"], env=env)
                self.assertEqual(r.returncode, 0, f"{d}: {dep['metadata']['name']}: {r.stderr}")
                eff = yaml.safe_load(r.stdout)
                self.assertEqual(eff["listen"]["host"], "0.0.0.0", "a pod must listen beyond loopback")
                self.assertIn(eff["listen"]["port"], container_ports(t).values())
                limit = c["resources"]["limits"]["cpu"]
                self.assertEqual(eff["model"]["threads"], int(limit), f"{dep['metadata']['name']}: engine threads vs CPU limit")

    def test_gie_pool_objectives_and_picker(self):
        docs = render("overlays/gie")
        env, files = image_env_and_files()
        pool = named(docs, "InferencePool", "tierserve")
        members = [(dep, t) for dep, t in pod_templates(docs) if matches(pool["spec"]["selector"]["matchLabels"], t["metadata"]["labels"])]
        self.assertEqual({dep["metadata"]["name"] for dep, _ in members}, {"tierserve-worker-dedicated", "tierserve-worker-shared"})
        for dep, t in members:
            self.assertIn(pool["spec"]["targetPorts"][0]["number"], container_ports(t).values())
            # An EPP that writes the priority into the body negates it for pods labelled as
            # vLLM (lower first there); tierserve's is higher first.
            self.assertNotEqual(t["metadata"]["labels"].get("llm-d.ai/engine-type"), "vllm")
        ref = pool["spec"]["endpointPickerRef"]
        svc = named(docs, "Service", ref["name"])
        self.assertIsNotNone(svc)
        self.assertIn(ref["port"]["number"], [p["port"] for p in svc["spec"]["ports"]])
        # Each objective's priority lands on its tier in the workers' effective config.
        c = members[0][1]["spec"]["containers"][0]
        eff = yaml.safe_load(run_bin([*[files.get(a, a) for a in c["args"]], "--print-config"], env=env).stdout)
        thresholds = eff["request_priorities"]
        objectives = of_kind(docs, "InferenceObjective")
        self.assertEqual(len(objectives), len(eff["tiers"]))
        for o in objectives:
            self.assertEqual(o["spec"]["poolRef"]["name"], pool["metadata"]["name"])
            tier = o["metadata"]["name"].removeprefix("tierserve-")
            p = o["spec"].get("priority", 0)
            best = max((v, t) for t, v in thresholds.items() if v <= p)[1] if any(v <= p for v in thresholds.values()) \
                else min((v, t) for t, v in thresholds.items())[1]
            self.assertEqual(best, tier, f"objective {o['metadata']['name']} priority {p}")
        # The metric names the picker is given are a real worker's.
        epp = named(docs, "Deployment", "tierserve-epp")
        flags = dict(a.split("=", 1) for a in epp["spec"]["template"]["spec"]["containers"][0]["args"] if "=" in a)
        w = Proc(ARGS.bin, ["serve", "-c", os.path.join(ARGS.root, "config", "tierserve.yaml"), "-m", ARGS.model, "-t", "1"],
                 ARGS.work, "worker")
        try:
            status, _, text = http(w.port, "GET", "/metrics")
            self.assertEqual(status, 200)
        finally:
            self.assertEqual(w.stop(), 0)
        present = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
        for flag in ("--total-queued-requests-metric", "--kv-cache-usage-percentage-metric"):
            self.assertIn(flags[flag], present, f"{flag}={flags[flag]} is not in a worker's /metrics")
        # The picker's config names plugins its profiles use, and nothing else.
        cm = named(docs, "ConfigMap", epp["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"])
        epc = yaml.safe_load(cm["data"]["epp.yaml"])
        self.assertEqual(epc["kind"], "EndpointPickerConfig")
        declared = {p.get("name", p["type"]) for p in epc["plugins"]}
        used = {r["pluginRef"] for prof in epc["schedulingProfiles"] for r in prof["plugins"]}
        self.assertEqual(used, declared)
        self.assertTrue(flags["--config-file"].startswith(epp["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]))

    def test_broken_manifests_are_refused(self):
        docs = render("overlays/gie")
        dep = named(docs, "Deployment", "tierserve-gateway")
        pool = named(docs, "InferencePool", "tierserve")
        obj = named(docs, "InferenceObjective", "tierserve-ultrafast")
        pm = of_kind(docs, "PodMonitor")[0]
        route = of_kind(docs, "HTTPRoute")[0]
        broken = []
        d = copy.deepcopy(dep); d["spec"]["replicas"] = "two"; broken.append(("replicas a string", d))
        d = copy.deepcopy(dep); d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8080"
        broken.append(("container port a string", d))
        d = copy.deepcopy(dep); del d["spec"]["template"]["spec"]["containers"][0]["name"]
        broken.append(("a container without a name", d))
        d = copy.deepcopy(dep); d["spec"]["replica"] = 2; broken.append(("a misspelt field", d))
        d = copy.deepcopy(pool); d["spec"]["targetPorts"] = [{"number": 70000}]; broken.append(("pool port 70000", d))
        d = copy.deepcopy(pool); d["spec"]["targetPorts"] = []; broken.append(("no pool port", d))
        d = copy.deepcopy(pool); del d["spec"]["endpointPickerRef"]["port"]; broken.append(("picker Service without port", d))
        d = copy.deepcopy(pool); d["spec"]["endpointPickerRef"]["failureMode"] = "Open"; broken.append(("failure mode", d))
        d = copy.deepcopy(obj); d["spec"]["priority"] = "high"; broken.append(("priority a string", d))
        d = copy.deepcopy(obj); del d["spec"]["poolRef"]; broken.append(("objective without pool", d))
        d = copy.deepcopy(pm); d["spec"]["podMetricsEndpoints"][0]["path"] = "metrics"; broken.append(("relative path", d))
        d = copy.deepcopy(route); d["spec"]["rules"][0]["backendRefs"][0]["weight"] = -1; broken.append(("weight -1", d))
        for what, doc in broken:
            self.assertNotEqual(schema_errors(doc), [], what)
        # A kustomization that does not render is an error, not an empty render.
        bad = os.path.join(ARGS.work, "bad-overlay")
        shutil.rmtree(bad, ignore_errors=True)
        os.makedirs(bad)
        with open(os.path.join(bad, "kustomization.yaml"), "w") as f:
            f.write(f"resources: [{k8s_dir('base')}]\npatches:\n  - target: {{kind: Deployment, name: nope}}\n"
                    "    patch: '[{\"op\": \"replace\", \"path\": \"/spec/nope/x\", \"value\": 1}]'\n"
                    "  - path: missing.yaml\n")
        r = subprocess.run(["kubectl", "kustomize", bad], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        # A gateway config the binary refuses is exit 2 naming the key.
        cfg = os.path.join(ARGS.work, "bad-gateway.yaml")
        with open(cfg, "w") as f:
            f.write("workers:\n  - {name: a, kind: tierserve, model: m, url: 'http://x:1', pool: nowhere}\n")
        r = run_bin(["gateway", "-c", cfg, "--check-config"])
        self.assertEqual(r.returncode, 2, r.stderr)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    if shutil.which("kubectl") is None:
        print("kubectl not found (it renders the manifests offline: kubectl kustomize)", file=sys.stderr)
        sys.exit(1 if os.environ.get("TIERSERVE_REQUIRE_KUBECTL") == "1" else 77)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()

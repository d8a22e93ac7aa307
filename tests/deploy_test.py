#!/usr/bin/env python3
"""The deployment files, checked offline (no image can be built here, no systemd runs):

- deploy/docker/Dockerfile: parsed (dockerfile-parse, pinned); two stages on debian:12-slim,
  the runtime stage without a compiler, a non-root USER, the model as a VOLUME, a
  HEALTHCHECK on /health/ready; every RUN linted with shellcheck (as sh).
- deploy/systemd/tierserve.service: `systemd-analyze verify` (with ExecStart pointed at the
  built binary, which it must find), Type=notify, and a TimeoutStopSec above the drain
  timeout of the config it starts with.

Usage: deploy_test.py --root REPO --bin build/bin/tierserve
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


class Dockerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from dockerfile_parse import DockerfileParser
        cls.df = DockerfileParser(path=os.path.join(ARGS.root, "deploy/docker/Dockerfile"))
        cls.cmds = cls.df.structure

    def stages(self):
        out, cur = [], None
        for c in self.cmds:
            if c["instruction"] == "FROM":
                cur = {"from": c["value"], "cmds": []}
                out.append(cur)
            elif cur is not None:
                cur["cmds"].append(c)
        return out

    def test_two_slim_stages_and_a_runtime_without_a_toolchain(self):
        st = self.stages()
        self.assertEqual(len(st), 2)
        for s in st:
            self.assertTrue(s["from"].startswith("debian:12-slim"), s["from"])
        runtime = " ".join(c["value"] for c in st[1]["cmds"] if c["instruction"] == "RUN")
        for tool in ("build-essential", "cmake", "-dev "):
            self.assertNotIn(tool, runtime + " ")
        self.assertIn("--from=build", " ".join(c["value"] for c in st[1]["cmds"] if c["instruction"] == "COPY"))

    def test_non_root_volume_healthcheck(self):
        runtime = self.stages()[1]["cmds"]
        user = [c["value"] for c in runtime if c["instruction"] == "USER"]
        self.assertTrue(user and user[-1] not in ("root", "0"), user)
        self.assertTrue(any(c["instruction"] == "VOLUME" and "/models" in c["value"] for c in runtime))
        hc = [c["value"] for c in runtime if c["instruction"] == "HEALTHCHECK"]
        self.assertTrue(hc and "/health/ready" in hc[0], hc)

    def test_the_runtime_stage_installs_every_library_the_binary_links(self):
        # ldd of the built binary, each library's Debian package (dpkg -S); those of
        # debian:12-slim itself excepted. A library the build links but the image lacks
        # would make the container fail at start.
        base = {"libc6", "libgcc-s1", "libstdc++6"}
        out = subprocess.run(["ldd", ARGS.bin], capture_output=True, text=True, check=True).stdout
        runtime = " ".join(c["value"] for c in self.stages()[1]["cmds"] if c["instruction"] == "RUN").split()
        build = " ".join(c["value"] for c in self.stages()[0]["cmds"] if c["instruction"] == "RUN").split()
        needed = set()
        for line in out.splitlines():
            parts = line.split()
            if "=>" not in parts or len(parts) < 3 or not parts[2].startswith("/"):
                continue
            real = os.path.realpath(parts[2])
            for cand in (real, "/usr" + real, real[4:] if real.startswith("/usr/") else real):
                r = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
                if r.returncode == 0:
                    needed.add(r.stdout.split(":")[0])
                    break
            else:
                self.fail("no Debian package owns " + real)
        for pkg in sorted(needed - base):
            self.assertIn(pkg, runtime, "the runtime stage lacks " + pkg)
            stem = pkg.rstrip("0123456789.-")  # libhiredis0.14 -> libhiredis, libpcre2-8-0 -> libpcre
            self.assertTrue(any(b.startswith(stem) and b.endswith("-dev") for b in build),
                            "the build stage lacks the -dev package of " + pkg)

    def test_every_run_passes_shellcheck(self):
        if not shutil.which("shellcheck"):
            self.fail("shellcheck is not installed (scripts/deps.sh installs it)")
        for c in self.cmds:
            if c["instruction"] != "RUN":
                continue
            with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
                f.write("#!/bin/sh\n" + c["value"] + "\n")
            try:
                r = subprocess.run(["shellcheck", "-s", "sh", f.name], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, f"line {c['startline'] + 1}: {r.stdout}")
            finally:
                os.unlink(f.name)


class SystemdUnit(unittest.TestCase):
    def test_verify_notify_and_stop_timeout(self):
        src = open(os.path.join(ARGS.root, "deploy/systemd/tierserve.service")).read()
        self.assertRegex(src, r"(?m)^Type=notify$")
        stop = int(re.search(r"(?m)^TimeoutStopSec=(\d+)$", src).group(1))
        cfg = open(os.path.join(ARGS.root, "config/tierserve.yaml")).read()
        drain_ms = int(re.search(r"(?m)^drain_timeout_ms: (\d+)", cfg).group(1))
        self.assertGreater(stop * 1000, drain_ms + 5000, "the stop timeout must leave the drain time to finish")
        if not shutil.which("systemd-analyze"):
            self.fail("systemd-analyze is not installed (scripts/deps.sh installs systemd)")
        with tempfile.TemporaryDirectory() as d:
            unit = os.path.join(d, "tierserve.service")
            with open(unit, "w") as f:
                f.write(src.replace("/usr/local/bin/tierserve", os.path.abspath(ARGS.bin)))
            r = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True, text=True)
            # A container may lack the targets the unit orders itself after; the unit's own
            # lines must give no complaint.
            own = [l for l in (r.stdout + r.stderr).splitlines() if "tierserve.service" in l]
            self.assertEqual(own, [], "\n".join(own))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--bin", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

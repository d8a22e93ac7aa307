#!/usr/bin/env python3
"""bench/throttle.sh against the kernel's real CPU cgroup controller (the slow machine of
the isolation experiment, docs/BENCHMARKS.md): the command runs in a cgroup of its own
with the quota asked for, and the kernel throttles it (its cpu.stat counts the periods);
the command is the process that was started (same PID, gets SIGTERM itself, its exit
status comes back); the cgroups of ended runs are removed at the next start and a live
one is kept; a quota below the kernel's 1 ms minimum is a usage error.

Exit 77 (skipped): not root, or no writable CPU cgroup controller.

Usage: throttle_test.py --root REPO
"""
import argparse
import os
import signal
import subprocess
import sys
import time
import unittest

ARGS = None

# Busy until it has used 0.2 s of CPU time (however long other load on the machine makes
# that take), then prints its cpu cgroup's quota, period and throttled periods as "quota
# period nr_throttled path" (cgroup v2: cpu.max; v1: the cpu controller).
PROBE = r"""
import time
while time.process_time() < 0.2:
    pass
rel = None
for line in open("/proc/self/cgroup"):
    n, ctrl, path = line.rstrip("\n").split(":", 2)
    if n == "0" and ctrl == "" and rel is None:
        rel = ("/sys/fs/cgroup" + path, "v2")
    if "cpu" in ctrl.split(","):
        rel = ("/sys/fs/cgroup/cpu" + path, "v1")
d, kind = rel
if kind == "v2":
    quota, period = open(d + "/cpu.max").read().split()
else:
    quota = open(d + "/cpu.cfs_quota_us").read().strip()
    period = open(d + "/cpu.cfs_period_us").read().strip()
stat = dict(l.split() for l in open(d + "/cpu.stat"))
print(quota, period, stat["nr_throttled"], d)
"""


def base():
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        return "/sys/fs/cgroup"
    return "/sys/fs/cgroup/cpu"


def throttle(*args, **kw):
    return subprocess.run(["bash", os.path.join(ARGS.root, "bench/throttle.sh"), *args],
                          capture_output=True, text=True, timeout=60, **kw)


class Throttle(unittest.TestCase):
    def test_the_command_runs_in_its_own_cgroup_with_the_quota_and_is_throttled(self):
        r = throttle("0.5", sys.executable, "-c", PROBE)
        self.assertEqual(r.returncode, 0, r.stderr)
        quota, period, throttled, d = r.stdout.split()
        self.assertEqual((int(quota), int(period)), (1000, 2000))  # 0.5 cores: 1 ms of every 2 ms
        self.assertTrue(os.path.basename(d).startswith("tierserve-throttle-"), d)
        # 0.2 s of CPU at 1 ms per 2 ms period: it ran out of quota in about 200 periods
        # (by construction: other load only spreads them out).
        self.assertGreater(int(throttled), 50)

    def test_exit_status_pid_and_signals_are_the_commands(self):
        r = throttle("1", "sh", "-c", "exit 3")
        self.assertEqual(r.returncode, 3, r.stderr)
        p = subprocess.Popen(["bash", os.path.join(ARGS.root, "bench/throttle.sh"), "1", "sh", "-c",
                              'trap "exit 7" TERM; echo $$; while :; do sleep 0.05; done'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline())  # printed once the trap is set: SIGTERM cannot come first
        self.assertEqual(pid, p.pid)  # exec: no wrapper between the caller and the command
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=10), 7)
        p.stdout.close()
        p.stderr.close()

    def test_ended_runs_cgroups_are_removed_and_a_live_one_is_kept(self):
        r = throttle("1", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        ended = os.path.join(base(), "tierserve-throttle-%d" % int(r.stderr.split("tierserve-throttle-")[1].split(")")[0]))
        self.assertTrue(os.path.isdir(ended))  # nothing is left to remove it when its command ends
        live = subprocess.Popen(["bash", os.path.join(ARGS.root, "bench/throttle.sh"), "1", "sleep", "30"],
                                stderr=subprocess.DEVNULL)
        live_dir = os.path.join(base(), "tierserve-throttle-%d" % live.pid)
        try:
            for _ in range(100):
                if os.path.isdir(live_dir):
                    break
                time.sleep(0.05)
            r = throttle("1", "true")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.isdir(ended))  # the next start removed it
            self.assertTrue(os.path.isdir(live_dir))  # a running command's is kept
        finally:
            live.terminate()
            live.wait(timeout=10)
            throttle("1", "true")  # removes the live one's, now ended
        left = [d for d in os.listdir(base()) if d.startswith("tierserve-throttle-")]
        self.assertLessEqual(len(left), 1, left)  # at most the last run's own

    def test_a_quota_below_the_kernels_minimum_is_a_usage_error(self):
        for cpus in ("0", "-1", "abc"):
            r = throttle(cpus, "true")
            self.assertEqual(r.returncode, 2, (cpus, r.stderr))
        r = subprocess.run(["bash", os.path.join(ARGS.root, "bench/throttle.sh"), "0.8", "true"],
                           env=dict(os.environ, PERIOD_US="1000"), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)  # 0.8 ms of every 1 ms: below 1 ms
        self.assertIn("at least 1000 us", r.stderr)


def writable_cpu_cgroup():
    if os.geteuid() != 0:
        return False
    b = base()
    if not os.path.isdir(b):
        return False
    probe = os.path.join(b, "tierserve-throttle-test-probe")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ARGS, rest = ap.parse_known_args()
    if not writable_cpu_cgroup():
        print("throttle_test: skipped (needs root and a writable CPU cgroup controller)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

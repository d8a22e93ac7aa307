#!/usr/bin/env bash
# Runs a command with its CPU time capped, as on a slower machine: a CPU cgroup of its own
# whose CFS quota is CPUS cores' worth of every PERIOD_US (by default the shortest period
# whose quota is the kernel's least, 1 ms: 1.25 ms for 0.8 cores), so the cap slows every
# engine step evenly instead of stopping it for a long stretch. Root only; cgroup v1 (cpu
# controller) or v2 (cpu.max).
#
#   bash bench/throttle.sh 0.8 build/bin/tierserve serve ...   # 2 threads on 0.8 cores
#   SERVE_WRAP="bash bench/throttle.sh 0.8" bash bench/isolation.sh
#
# It emulates slower cores, not a slower memory system: a bandwidth-bound step slows less
# than its cap. The cgroup is removed when the command ends.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: throttle.sh CPUS COMMAND [ARGS...]" >&2; exit 2; }
CPUS=$1
shift
PERIOD_US=${PERIOD_US:-$(awk -v c="$CPUS" 'BEGIN { p = c > 0 ? int(1000 / c + 0.999) : 1000; print p < 1000 ? 1000 : p }')}
QUOTA_US=$(awk -v c="$CPUS" -v p="$PERIOD_US" 'BEGIN { q = int(c * p + 0.5); if (c <= 0 || q < 1000) exit 1; print q }') ||
  { echo "throttle.sh: CPUS must give a quota of at least 1000 us per period (got $CPUS x $PERIOD_US us)" >&2; exit 2; }
NAME=tierserve-throttle-$$
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
  DIR=/sys/fs/cgroup/$NAME
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
  mkdir "$DIR"
  echo "$QUOTA_US $PERIOD_US" > "$DIR/cpu.max"
elif [ -d /sys/fs/cgroup/cpu ]; then  # cgroup v1
  DIR=/sys/fs/cgroup/cpu/$NAME
  mkdir "$DIR"
  echo "$PERIOD_US" > "$DIR/cpu.cfs_period_us"
  echo "$QUOTA_US" > "$DIR/cpu.cfs_quota_us"
else
  echo "throttle.sh: no CPU cgroup controller mounted under /sys/fs/cgroup" >&2
  exit 1
fi
echo "[throttle] $CPUS cores ($QUOTA_US us of every $PERIOD_US us): $*" >&2
# The command runs as a child in the cgroup (this shell stays outside it); a signal to
# this script is passed on, and the cgroup is removed once the command has ended.
cleanup() { rmdir "$DIR" 2> /dev/null || true; }
trap cleanup EXIT
sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' throttle "$DIR" "$@" &
CHILD=$!
trap 'kill -TERM "$CHILD" 2> /dev/null' TERM INT
set +e
wait "$CHILD"
RC=$?
# wait returns early on a trapped signal: wait again for the command's own exit status.
while kill -0 "$CHILD" 2> /dev/null; do wait "$CHILD"; RC=$?; done
exit $RC

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
# than its cap.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: throttle.sh CPUS COMMAND [ARGS...]" >&2; exit 2; }
CPUS=$1
shift
[[ $CPUS =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "throttle.sh: CPUS must be a number of cores, such as 0.8 (got '$CPUS')" >&2; exit 2; }
PERIOD_US=${PERIOD_US:-$(awk -v c="$CPUS" 'BEGIN { p = c > 0 ? int(1000 / c + 0.999) : 1000; print p < 1000 ? 1000 : p }')}
QUOTA_US=$(awk -v c="$CPUS" -v p="$PERIOD_US" 'BEGIN { q = int(c * p + 0.5); if (c <= 0 || q < 1000) exit 1; print q }') ||
  { echo "throttle.sh: CPUS must give a quota of at least 1000 us per period (got $CPUS x $PERIOD_US us)" >&2; exit 2; }
# The script moves itself into a cgroup of its own, named for its PID, and becomes the
# command (exec): the command keeps this PID, gets its signals and gives its exit status.
# Nothing is left to remove the cgroup when it ends, so each start first removes those of
# earlier runs whose PID has ended (rmdir also fails on one that still has processes).
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
  BASE=/sys/fs/cgroup
  grep -qw cpu "$BASE/cgroup.subtree_control" || echo +cpu > "$BASE/cgroup.subtree_control"
elif [ -d /sys/fs/cgroup/cpu ]; then  # cgroup v1
  BASE=/sys/fs/cgroup/cpu
else
  echo "throttle.sh: no CPU cgroup controller mounted under /sys/fs/cgroup" >&2
  exit 1
fi
for old in "$BASE"/tierserve-throttle-*; do
  [ -d "$old" ] && ! kill -0 "${old##*-}" 2> /dev/null && { rmdir "$old" 2> /dev/null || true; }
done
DIR=$BASE/tierserve-throttle-$$
mkdir "$DIR"
if [ "$BASE" = /sys/fs/cgroup ]; then
  echo "$QUOTA_US $PERIOD_US" > "$DIR/cpu.max" || { rmdir "$DIR"; exit 1; }
else
  { echo "$PERIOD_US" > "$DIR/cpu.cfs_period_us" && echo "$QUOTA_US" > "$DIR/cpu.cfs_quota_us"; } ||
    { rmdir "$DIR"; exit 1; }
fi
echo "[throttle] $CPUS cores ($QUOTA_US us of every $PERIOD_US us, cgroup $DIR): $*" >&2
echo $$ > "$DIR/cgroup.procs"
exec "$@"

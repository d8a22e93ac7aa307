# shellcheck shell=bash
# Shell helpers shared by the bench scripts that start tierserve processes (source it after
# defining die and OUT_DIR): PIDS and a cleanup on exit, and waiting for a port file.

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT

# wait_port FILE PID: until the process wrote its port file (60 s), or die if it exited.
wait_port() {
  for _ in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2> /dev/null || die "a process exited before listening (see $OUT_DIR)"
    sleep 0.1
  done
  die "nothing listened within 60 s"
}

# start_worker MODEL THREADS NAME: a `tierserve serve` on port 0 serving MODEL as NAME;
# sets WORKER to its URL.
start_worker() {
  "$BIN" serve -m "$1" -t "$2" -p 0 --port-file "$OUT_DIR/worker.port" --served-model-name "$3" \
    > "$OUT_DIR/worker.out" 2> "$OUT_DIR/worker.err" &
  PIDS+=($!)
  wait_port "$OUT_DIR/worker.port" "${PIDS[-1]}"
  WORKER=http://127.0.0.1:$(head -1 "$OUT_DIR/worker.port")
  export WORKER
}

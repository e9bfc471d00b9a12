#!/usr/bin/env bash
# What traces cost the gateway, one sample ratio at a time, without the rest of scripts/bench:
#
#   bench/trace_cost.sh RATIO [EVENTS]     RATIO: off, or a sample_ratio (1.0, 0.1, 0.01)
#
# Starts the release gateway (2 workers, 4 connections) on a database of its own on
# DATABASE_URL's server (scripts/dev-db's when unset), exporting to bench/otlp_sink.py unless
# RATIO is off; warms up with 2,000 first deliveries; then sends EVENTS (default 20,000) at 64
# clients and prints the load generator's summary and the gateway's CPU per event. PERF=1 also
# records a cpu-clock profile into target/trace-cost-RATIO.data (perf report -i ...).
# Build first: cargo build --release --bins.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
ratio=${1:?usage: bench/trace_cost.sh RATIO [EVENTS]}
events=${2:-20000}
url=${DATABASE_URL:-$(scripts/dev-db start)}
server="${url%/*}"
db="cg_trace_cost_$$"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
otlp=$(free_port)
config="target/trace-cost-$$.toml"
gateway="" sink="" perf=""
cleanup() {
    for pid in $perf $gateway $sink; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    rm -f "$config"
}
trap cleanup EXIT
psql "$server/postgres" -qc "CREATE DATABASE $db"
telemetry=""
if [ "$ratio" != off ]; then
    python3 bench/otlp_sink.py "$otlp" &
    sink=$!
    telemetry="[telemetry]
otlp_endpoint = \"http://127.0.0.1:$otlp\"
sample_ratio = $ratio"
fi
cat > "$config" <<TOML
[server]
bind = "127.0.0.1:$port"
workers = 2
[database]
url = "$server/$db"
pool_size = 4
[[providers]]
name = "acme"
scheme = "standard-webhooks"
merchant_id = 42
secrets = ["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]
$telemetry
TOML
DATABASE_URL="$server/$db" RUST_LOG=warn target/release/callback-gateway --config "$config" serve >"target/trace-cost-$$.log" 2>&1 &
gateway=$!
until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    kill -0 "$gateway" 2>/dev/null || { echo "the gateway exited; see target/trace-cost-$$.log" >&2; exit 1; }
    sleep 0.1
done
psql "$server/$db" -qc "INSERT INTO orders (user_id, amount_minor, currency) SELECT 42, 1000 + g % 1000, 'USD' FROM generate_series(1, $(( events + 2000 ))) g; ANALYZE orders;"
load() { target/release/loadgen --config "$config" --provider acme --url "http://127.0.0.1:$port" "$@"; }
load --mode first --first-order $(( events + 1 )) --count 2000 --concurrency 64 --tag warmup >/dev/null
before=$(python3 bench/cpu_ticks.py process "$gateway")
if [ "${PERF:-0}" = 1 ]; then
    perf record -e cpu-clock -F 2000 -g -p "$gateway" -o "target/trace-cost-$ratio.data" 2>/dev/null &
    perf=$!
fi
out=$(load --mode first --first-order 1 --count "$events" --concurrency 64 --tag measured)
if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; perf=""; fi
after=$(python3 bench/cpu_ticks.py process "$gateway")
echo "sample_ratio=$ratio $out"
python3 -c 'import sys; print("gateway CPU us/event", round((int(sys.argv[2]) - int(sys.argv[1])) / float(sys.argv[3]), 1))' "$before" "$after" "$events"

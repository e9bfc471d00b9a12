# scripts/bench --endpoints [--events N]: what a merchant's second and third endpoint cost the
# notification phase (issue 56). Sourced by scripts/bench, which has built the binaries and
# defined server, bin, log, field, gateway_config, start_gateway, pg_cpu, per_event,
# cpu_per_event, median, median_or_null, CLIENTS, RUNS and EVENTS.
#
# On a database of its own (cg_endpoints_<pid>, dropped at the end) and a gateway of its own,
# merchant 43 (provider "notified") has no endpoint in the file, only endpoints made by API
# (POST /v1/webhook-endpoints with a token of its own; no filter, no rate limit), all on the
# load generator's receiver, one path each (/e1, /e2, /e3), each notification verified with the
# secret of the endpoint it was sent to. Two cases, ONE endpoint (/e1) and THREE, each EVENTS
# first deliveries of captures for merchant 43, measured from the first delivery to the last
# notification recorded as delivered:
#   notify_eps_1ep, _3ep                  notifications delivered per second, all endpoints;
#   notify_first_rps_1ep, _3ep            the first deliveries' rate;
#   pg_cpu_us_notify_first_1ep, _3ep      PostgreSQL's CPU per first delivery, its
#                                         notifications' drain included;
#   gw_cpu_us_notify_first_1ep, _3ep      the gateway's;
#   notify_3ep_vs_1ep_pg_cpu              3ep over 1ep, of the medians.
# Runs are paired: ONE then THREE in odd runs, THREE then ONE in even ones (the endpoints /e2
# and /e3 are made or deleted between, and the gateway has loaded the change, its
# gateway_webhook_endpoints_revision equal to the database's, before the next case starts).
# An unmeasured warm-up of WARMUP first deliveries (default 2,000) with one endpoint comes first.
# A case stops the bench when a first delivery fails or a notification is missing or fails
# verification after NOTIFY_WAIT seconds (default 300) from the last ack.

edb="cg_endpoints_$$"
eurl="$server/$edb"
econfig=target/bench-endpoints-gateway.toml
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
eport=$(free_port)
notify_port=$(free_port)
endpoints_cleanup() {
    [ -n "${gateway:-}" ] && kill "$gateway" 2>/dev/null && wait "$gateway" 2>/dev/null || true
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $edb WITH (FORCE)" >/dev/null 2>&1 || true
}
trap endpoints_cleanup EXIT
psql "$server/postgres" -qc "CREATE DATABASE $edb" >/dev/null
# Endpoints made by API need a key to seal their secrets, plain http and, for 127.0.0.1, the
# merchant's exemption for the receiver's origin.
gateway_config "$econfig" "$eport" "$eurl" 86400 "" "[[providers]]
name = \"notified\"
scheme = \"standard-webhooks\"
merchant_id = 43
secrets = [\"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]
[[merchants]]
id = 43
allow_hosts = [\"http://127.0.0.1:$notify_port\"]
[notifications]
allow_http = true
[secrets]
key = \"$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')\""
start_gateway "$econfig" "$eport" "$eurl" target/bench-endpoints-gateway.log

WARMUP=${WARMUP:-2000}
NOTIFY_WAIT=${NOTIFY_WAIT:-300}
# Merchant 43's orders: the warm-up's, then EVENTS for each case of each run.
orders=$(( WARMUP + RUNS * 2 * EVENTS ))
psql "$eurl" -qc "INSERT INTO orders (id, user_id, amount_minor, currency) SELECT g, 43, 1000 + g % 1000, 'USD' FROM generate_series(1, $orders) g; SELECT setval('orders_id_seq', $orders); ANALYZE orders;" >/dev/null
psql "$server/postgres" -qc "CHECKPOINT"
token=$(DATABASE_URL="$eurl" "$bin" --config "$econfig" token issue --user-id 43)

declare -A ep_id ep_secret
endpoints_api() { curl -sS --fail-with-body -H "Authorization: Bearer $token" "$@"; }
endpoint_add() {
    local out
    out=$(endpoints_api -X POST -H 'Content-Type: application/json' \
        -d "{\"url\": \"http://127.0.0.1:$notify_port/$1\", \"filter_types\": [], \"rate_limit_per_sec\": null}" \
        "http://127.0.0.1:$eport/v1/webhook-endpoints") || { log "making endpoint /$1 failed: $out"; exit 1; }
    ep_id[$1]=$(field "$out" id)
    ep_secret[$1]=$(field "$out" secret)
}
endpoint_delete() {
    local out
    out=$(endpoints_api -X DELETE "http://127.0.0.1:$eport/v1/webhook-endpoints/${ep_id[$1]}") \
        || { log "deleting endpoint /$1 failed: $out"; exit 1; }
    unset "ep_id[$1]" "ep_secret[$1]"
}
# Merchant 43 has the endpoints /e1 .. /e$1 (the others deleted), and the gateway has loaded them.
use_endpoints() {
    local i want have
    for i in 1 2 3; do
        if (( i <= $1 )) && [ -z "${ep_id[e$i]:-}" ]; then endpoint_add "e$i"; fi
        if (( i > $1 )) && [ -n "${ep_id[e$i]:-}" ]; then endpoint_delete "e$i"; fi
    done
    want=$(psql "$eurl" -Atc "SELECT revision FROM webhook_endpoint_revision")
    for _ in $(seq 1 100); do
        have=$(curl -fs "http://127.0.0.1:$eport/metrics" | awk '$1 == "gateway_webhook_endpoints_revision" {print $2}')
        [ "$have" = "$want" ] && return 0
        sleep 0.1
    done
    log "the gateway did not load the endpoints' revision $want within 10 s (it holds ${have:-none})"
    exit 1
}
# No notification pending: the last ones' results are recorded (and the next case starts clean).
notifications_drained() {
    for _ in $(seq 1 100); do
        [ "$(psql "$eurl" -Atc "SELECT count(*) FROM merchant_notifications WHERE status = 'pending'")" = 0 ] && return 0
        sleep 0.1
    done
    log "notifications still pending 10 s after the load generator received them all"
    exit 1
}

# First deliveries of COUNT captures for merchant 43 from order FIRST, with the receiver
# verifying each endpoint's notifications with its secret and waiting for every one.
#   endpoints_load FIRST COUNT TAG
endpoints_load() {
    local path secrets=()
    for path in "${!ep_secret[@]}"; do secrets+=(--notify-secret "/$path=${ep_secret[$path]}"); done
    target/release/loadgen --config "$econfig" --provider notified --url "http://127.0.0.1:$eport" \
        --mode first --first-order "$1" --count "$2" --concurrency "$CLIENTS" --tag "$3" \
        --notify-listen "127.0.0.1:$notify_port" "${secrets[@]}" \
        --notify-expect $(( $2 * ${#ep_secret[@]} )) --notify-wait "$NOTIFY_WAIT"
}
gw_cpu() { python3 bench/cpu_ticks.py process "$gateway"; }

# Unmeasured warm-up with one endpoint: the pool's connections and statements, the sender's.
use_endpoints 1
out=$(endpoints_load 1 "$WARMUP" warmup)
[ "$(field "$out" notify_received)" = "$WARMUP" ] || { log "warm-up notifications missing: $out"; exit 1; }
notifications_drained

declare -A eps first_rps pg gw
phase=0
# One case: merchant 43 with N endpoints, EVENTS first deliveries and their notifications.
#   endpoints_case N
endpoints_case() {
    local n=$1 out pg_before gw_before expect=$(( EVENTS * $1 ))
    use_endpoints "$n"
    pg_before=$(pg_cpu); gw_before=$(gw_cpu)
    out=$(endpoints_load $(( WARMUP + phase * EVENTS + 1 )) "$EVENTS" "ep${n}run$run")
    [ "$(field "$out" ok)" = "$EVENTS" ] && [ "$(field "$out" notify_received)" = "$expect" ] \
        && [ "$(field "$out" notify_unverified)" = 0 ] \
        || { log "$n endpoint(s), run $run: expected $EVENTS first deliveries and $expect verified notifications: $out"; exit 1; }
    notifications_drained
    pg[$n]+=" $(per_event "$pg_before" "$(pg_cpu)" "$EVENTS")"
    gw[$n]+=" $(cpu_per_event "$gw_before" "$(gw_cpu)" "$EVENTS")"
    phase=$(( phase + 1 ))
    eps[$n]+=" $(field "$out" notify_eps)"
    first_rps[$n]+=" $(field "$out" rps)"
    log "$n endpoint(s), run $run: $out; CPU per first delivery with its notifications' drain: PostgreSQL ${pg[$n]##* } us, gateway ${gw[$n]##* } us"
}
for run in $(seq 1 "$RUNS"); do
    if (( run % 2 )); then endpoints_case 1; endpoints_case 3; else endpoints_case 3; endpoints_case 1; fi
done

# shellcheck disable=SC2086 # the lists split into their runs
python3 - "$EVENTS" "$RUNS" "$CLIENTS" \
    "$(median ${eps[1]})" "$(median ${eps[3]})" "$(median ${first_rps[1]})" "$(median ${first_rps[3]})" \
    "$(median_or_null ${pg[1]})" "$(median_or_null ${pg[3]})" "$(median ${gw[1]})" "$(median ${gw[3]})" <<'PY'
import json, sys
events, runs, clients = (int(x) for x in sys.argv[1:4])
eps1, eps3, rps1, rps3, pg1, pg3, gw1, gw3 = (None if x == "null" else float(x) for x in sys.argv[4:])
def ratio(a, b):
    return None if a is None or b is None or b == 0 else round(a / b, 3)
def us(x):
    return None if x is None else round(x, 1)
r = {
    "notify_endpoints_events": events, "runs": runs, "clients": clients,
    "notify_eps_1ep": round(eps1, 1), "notify_eps_3ep": round(eps3, 1),
    "notify_first_rps_1ep": round(rps1, 1), "notify_first_rps_3ep": round(rps3, 1),
    "pg_cpu_us_notify_first_1ep": us(pg1), "pg_cpu_us_notify_first_3ep": us(pg3),
    "gw_cpu_us_notify_first_1ep": us(gw1), "gw_cpu_us_notify_first_3ep": us(gw3),
    "notify_3ep_vs_1ep_pg_cpu": ratio(pg3, pg1),
}
print(f"{'merchant 43 endpoints':<32}{'one':>10}{'three':>10}")
print(f"{'notifications delivered /s':<32}{r['notify_eps_1ep']:>10}{r['notify_eps_3ep']:>10}")
print(f"{'first deliveries /s':<32}{r['notify_first_rps_1ep']:>10}{r['notify_first_rps_3ep']:>10}")
print(f"{'PostgreSQL CPU us/first':<32}{r['pg_cpu_us_notify_first_1ep']!s:>10}{r['pg_cpu_us_notify_first_3ep']!s:>10}"
      f"   (3 over 1: {r['notify_3ep_vs_1ep_pg_cpu']})")
print(f"{'gateway CPU us/first':<32}{r['gw_cpu_us_notify_first_1ep']!s:>10}{r['gw_cpu_us_notify_first_3ep']!s:>10}")
print("BENCH " + json.dumps(r))
PY

# scripts/bench --scale [--rows N]: the growth curve. Sourced by scripts/bench (see its header),
# which has built the binaries and defined CLIENTS, ROWS, DATABASE_URL, server, bin, log, field,
# gateway_config and start_gateway.

DURATION=${DURATION:-60}      # seconds of each measurement
RATE_CAP=${RATE_CAP:-12000}   # pending orders created per second of a first-delivery run
WARMUP=${WARMUP:-2000}        # first deliveries before each point's measurements (not measured)
CHUNK=${CHUNK:-1000000}       # history events per transaction
TTL_HOURS=${TTL_HOURS:-72}    # the provider's record retention in this config
EXPIRED_HOURS=${EXPIRED_HOURS:-4}  # how far the history reaches beyond the retention
READ_LOADS=${READ_LOADS:-40}  # loads of each console page and admin read at each point
READ_SECONDS=${READ_SECONDS:-45}  # first deliveries that run under the reads
EXPORT_EVENTS=${EXPORT_EVENTS:-1000000}  # events each export sends (fewer when fewer are stored)
RECONCILE_LINES=${RECONCILE_LINES:-1000000}  # lines of the provider report reconciled
admin_token="bench-scale-admin-token-0123456789"
span_secs=$(( (TTL_HOURS + EXPIRED_HOURS) * 3600 ))
ttl_secs=$(( TTL_HOURS * 3600 ))
case "$ROWS" in ''|*[!0-9]*) log "--rows takes a number, got '$ROWS'"; exit 2 ;; esac
if [ "$ROWS" -lt 10 ]; then log "--rows must be at least 10"; exit 2; fi

fsync=$(psql "$DATABASE_URL" -Atc "SHOW fsync")
sync_commit=$(psql "$DATABASE_URL" -Atc "SHOW synchronous_commit")
shared_buffers=$(psql "$DATABASE_URL" -Atc "SHOW shared_buffers")
log "scale: rows=$ROWS duration=${DURATION}s clients=$CLIENTS; PostgreSQL fsync=$fsync synchronous_commit=$sync_commit shared_buffers=$shared_buffers"
# About 4.6 KB per stored event (measured at 1,000,000), plus the measured events and WAL:
# 5.5 KiB per event of N is a margin.
data_dir=$(psql "$DATABASE_URL" -Atc "SHOW data_directory" 2>/dev/null || true)
if [ -n "$data_dir" ] && free_kib=$(df -Pk "$data_dir" 2>/dev/null | awk 'NR == 2 {print $4}') && [ -n "$free_kib" ]; then
    need_kib=$(( ROWS * 55 / 10 + 4 * 1024 * 1024 ))
    if [ "$free_kib" -lt "$need_kib" ]; then
        log "WARNING: $((free_kib / 1024 / 1024)) GiB free under $data_dir; $ROWS events need about $((need_kib / 1024 / 1024)) GiB"
    fi
fi

db="cg_scale_$$"
url="$server/$db"
gateway=
stop_gateway() {
    [ -n "$gateway" ] || return 0
    kill "$gateway" 2>/dev/null || true
    wait "$gateway" 2>/dev/null || true
    gateway=
}
scale_cleanup() {
    stop_gateway
    # Loading sessions still running after a failure (they are this script's own jobs).
    for job in $(jobs -p); do kill "$job" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "${KEEP_DB:-0}" = 1 ]; then
        log "kept the database $url"
    else
        # FORCE: a loading session killed mid-statement may still hold a connection.
        psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    fi
}
trap scale_cleanup EXIT
psql "$server/postgres" -qc "CREATE DATABASE $db" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
config=target/bench-scale-gateway.toml
gateway_config "$config" "$port" "$url" 5 "retry_window_hours = $((TTL_HOURS - 24))
ttl_hours = $TTL_HOURS
[admin]
token = \"$admin_token\""
DATABASE_URL="$url" "$bin" --config "$config" migrate >/dev/null

loadgen() { target/release/loadgen --config "$config" --provider acme "$@"; }
load() { loadgen --url "http://127.0.0.1:$port" --concurrency "$CLIENTS" "$@"; }
# The gateway's row values and the event template's SQL twin, for every loading session.
functions=target/bench-scale-functions.sql
loadgen --emit-sql > "$functions"
q() { psql "$url" -X -Atq -v ON_ERROR_STOP=1 -c "$1"; }
# A session that has the template's functions.
sqlf() { psql "$url" -X -Atq -v ON_ERROR_STOP=1 -f "$functions" "$@"; }
transfers() { q "SELECT count(*) FROM ledger_transfers"; }
stored() { q "SELECT count(*) FROM callback_deliveries"; }

# The SQL twin builds the load generator's bytes.
for n in 1 $(( (RANDOM * 32768 + RANDOM) % ROWS + 1 )) "$ROWS"; do
    sql_hash=$(sqlf -c "SELECT encode(sha256(pg_temp.scale_body($n, pg_temp.scale_hb($n))), 'hex')")
    rust_hash=$(loadgen --print-body "$n" | sha256sum | cut -d' ' -f1)
    if [ "$sql_hash" != "$rust_hash" ]; then
        log "event $n: the SQL body (sha256 $sql_hash) is not the load generator's ($rust_hash)"
        exit 1
    fi
done
log "the SQL and the load generator build the same bodies"

# Pending orders next .. end-1 for the events that will pay them (same amount and currency).
make_orders() {
    [ "$2" -ge "$1" ] || return 0
    sqlf -f - >/dev/null <<SQL
INSERT INTO orders (id, user_id, amount_minor, currency, reference, status, created_at)
SELECT n, :merchant_id, pg_temp.scale_amount(n, hb), pg_temp.scale_currency(n, hb),
       pg_temp.scale_reference(n, hb), :'order_pending', now() - make_interval(secs => 30 + n % 900)
FROM generate_series($1::bigint, $2::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h;
SQL
    # Only orders: an ANALYZE of still empty ledger tables would cache sequential-scan plans
    # (see the normal mode and docs/performance.md).
    q "ANALYZE orders"
}

# History: events $1..$2, received evenly over the span_secs before now, CHUNK events per
# transaction, in two sessions side by side (2 cores) that split the work by table:
# deliveries (bench/scale/history_deliveries.sql) in one; orders, payments and the ledger
# (history_ledger.sql), then the idempotency records read off the chunk's stored deliveries
# (history_records.sql), in the other. Every table is written by one session only, in ascending
# key order, as traffic appends. Each session vacuums what it loaded (as autovacuum would have
# under traffic), so no catch-up vacuum of millions of rows lands in a measurement.
run_sql() {  # FILE C0 C1 [more psql arguments]: one step of the history, for events C0..C1
    local file=$1 c0=$2 c1=$3
    shift 3
    sqlf -v a="$phase_a" -v b="$phase_b" -v c0="$c0" -v c1="$c1" -v epoch="$load_epoch" \
        -v span_secs="$span_secs" -v tid0="$tid0" -f "bench/scale/$file" "$@"
}
seconds_since() { python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$1"; }
load_deliveries() {
    local c0 c1 t
    for ((c0 = phase_a; c0 <= phase_b; c0 += CHUNK)); do
        c1=$(( c0 + CHUNK - 1 < phase_b ? c0 + CHUNK - 1 : phase_b ))
        t=$EPOCHREALTIME
        run_sql history_deliveries.sql "$c0" "$c1" -c "VACUUM callback_deliveries" >/dev/null
        touch "$markers/$c0"
        log "history $c0-$c1: deliveries stored in $(seconds_since "$t") s"
    done
}
load_ledger_and_records() {
    local c0 c1 records t
    for ((c0 = phase_a; c0 <= phase_b; c0 += CHUNK)); do
        c1=$(( c0 + CHUNK - 1 < phase_b ? c0 + CHUNK - 1 : phase_b ))
        t=$EPOCHREALTIME
        run_sql history_ledger.sql "$c0" "$c1" -c "VACUUM orders, payments, ledger_transfers, ledger_entries" >/dev/null
        log "history $c0-$c1: orders, payments and ledger stored in $(seconds_since "$t") s"
        until [ -e "$markers/$c0" ]; do
            kill -0 "$deliveries_job" 2>/dev/null || { log "the deliveries session failed"; exit 1; }
            sleep 0.2
        done
        t=$EPOCHREALTIME
        records=$(run_sql history_records.sql "$c0" "$c1")
        if [ "$records" != $((c1 - c0 + 1)) ]; then
            log "history $c0-$c1: $records idempotency records for $((c1 - c0 + 1)) deliveries"
            exit 1
        fi
        q "VACUUM idempotency_keys"
        log "history $c0-$c1: idempotency records stored in $(seconds_since "$t") s"
    done
}
load_history() {
    local t0 t1 finished
    phase_a=$1
    phase_b=$2
    t0=$(date +%s.%N)
    # Fresh statistics first: the sessions plan from them (the entries' foreign-key check among
    # their statements), and autovacuum may have last seen the ledger tables nearly empty.
    q "ANALYZE"
    load_epoch=$(date +%s)
    # The phase's transfer ids, reserved at once (the gateway is stopped while history loads).
    tid0=$(q "SELECT nextval('ledger_transfers_id_seq')")
    q "SELECT setval('ledger_transfers_id_seq', $tid0 + $phase_b - $phase_a)" >/dev/null
    markers=$(mktemp -d "${TMPDIR:-/tmp}/bench-scale.XXXXXX")
    load_deliveries &
    deliveries_job=$!
    load_ledger_and_records &
    ledger_job=$!
    # Either session failing stops the run at once (the EXIT trap ends the other).
    wait -n -p finished "$deliveries_job" "$ledger_job"
    if [ "$finished" = "$deliveries_job" ]; then wait "$ledger_job"; else wait "$deliveries_job"; fi
    rm -rf "$markers"
    q "ANALYZE"
    psql "$server/postgres" -qc "CHECKPOINT"
    t1=$(date +%s.%N)
    load_s=$(python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))' "$t0" "$t1")
    log "history $phase_a-$phase_b: $((phase_b - phase_a + 1)) events in $load_s s, $(python3 -c 'import sys; print(f"{int(sys.argv[1]) / float(sys.argv[2]):,.0f}")' $((phase_b - phase_a + 1)) "$load_s") events/s (vacuum, analyze and checkpoint included)"
}

# The stored events a redelivery may pick while a measurement ending at unix time $1 runs: the
# events delivered through HTTP given in $2, and each history phase's events whose records
# outlive $1 (the cleaner deletes the others; a provider never redelivers past its retry window,
# which is shorter than the retention).
live_history() {
    python3 - "$1" "$ttl_secs" "$span_secs" "$phases" "$2" <<'PY'
import math, sys
t_end, ttl, span = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
ranges = []
for phase in sys.argv[4].split():
    a, b, epoch = (float(x) for x in phase.split(":"))
    # created(n) = epoch - span * (b - n) / (b - a + 1); live while created(n) + ttl > t_end.
    reach = (epoch + ttl - t_end) * (b - a + 1) / span
    low = max(int(a), math.floor(b - reach) + 2)  # one event of margin
    if low <= b:
        ranges.append(f"{low}-{int(b)}")
ranges += [r for r in sys.argv[5].split(",") if r]
print(",".join(ranges))
PY
}

# A history event's rows have the shape of a gateway-written event's.
check_shapes() {
    local gateway_shape history_shape
    gateway_shape=$(sqlf -v n="$1" -f bench/scale/shape.sql)
    history_shape=$(sqlf -v n="$2" -f bench/scale/shape.sql)
    if [ -z "$gateway_shape" ] || [ "$gateway_shape" != "$history_shape" ]; then
        log "history event $2 is not stored as the gateway stored event $1:"
        diff <(echo "$gateway_shape") <(echo "$history_shape") >&2 || true
        exit 1
    fi
    log "history event $2 is stored as the gateway stored event $1"
}

# Replays of old history events come back as replays, and post nothing.
check_replays() {
    local before after out
    before=$(transfers)
    out=$(load --mode cold-replay --history "$1" --count 500)
    after=$(transfers)
    if [ "$(field "$out" replayed)" != 500 ] || [ "$(field "$out" ok)" != 500 ] || [ "$before" != "$after" ]; then
        log "replays of history events: $out; transfers $before -> $after"
        exit 1
    fi
    log "500 replays of random history events: all answered 200 with Idempotent-Replayed: true; transfers unchanged ($after)"
}

# The read phase's inputs: stored event ids of acme picked uniformly over the id range (one
# primary-key probe each, so picking them reads no history), and a one-hour window around the
# middle of the history for the time filter.
utc='YYYY-MM-DD"T"HH24:MI:SS.US"Z"'
pick_read_inputs() {
    local lo hi
    IFS='|' read -r lo hi < <(q "SELECT min(id), max(id) FROM callback_deliveries")
    q "SELECT d.event_id FROM generate_series(1, $((READ_LOADS * 3))) AS g,
       LATERAL (SELECT event_id FROM callback_deliveries
                WHERE id >= $lo + floor(random() * ($hi - $lo + 1))::bigint + 0 * g AND provider = 'acme'
                ORDER BY id LIMIT 1) AS d" > target/bench-scale-ids.txt
    IFS='|' read -r window_since window_until < <(q "
        SELECT to_char((received_at - interval '30 minutes') AT TIME ZONE 'UTC', '$utc'),
               to_char((received_at + interval '30 minutes') AT TIME ZONE 'UTC', '$utc')
        FROM callback_deliveries WHERE id >= ($lo + $hi) / 2 ORDER BY id LIMIT 1")
}

# Where the newest EXPORT_EVENTS events of acme begin (the oldest event when fewer are stored).
export_since() {
    local since
    since=$(q "SELECT to_char(received_at AT TIME ZONE 'UTC', '$utc') FROM callback_deliveries
               WHERE provider = 'acme' ORDER BY received_at DESC, id DESC
               OFFSET $((EXPORT_EVENTS - 1)) LIMIT 1")
    echo "${since:-1970-01-01T00:00:00Z}"
}

# GET /admin/events.jsonl from export_since on: events/s, and that the trailer counts every line.
export_over_http() {
    python3 - "127.0.0.1:$port" "$admin_token" "$(export_since)" <<'PY'
import http.client, json, sys, time, urllib.parse
host, token, since = sys.argv[1:]
conn = http.client.HTTPConnection(host, timeout=600)
started = time.perf_counter()
conn.request("GET", "/admin/events.jsonl?provider=acme&since=" + urllib.parse.quote(since),
             headers={"Authorization": "Bearer " + token})
response = conn.getresponse()
lines, size, tail = 0, 0, b""
while chunk := response.read(1 << 20):
    lines, size, tail = lines + chunk.count(b"\n"), size + len(chunk), (tail + chunk)[-4096:]
seconds = time.perf_counter() - started
trailer = json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])["trailer"]
if response.status != 200 or trailer["events"] != lines - 1:
    sys.exit(f"HTTP export: status {response.status}, {lines} lines, trailer {trailer}")
print(json.dumps({"events": trailer["events"], "seconds": round(seconds, 2),
                  "eps": round(trailer["events"] / seconds), "mib": round(size / 2**20)}))
PY
}

# `callback-gateway export` of the same events: events/s and the process's peak RSS.
export_with_cli() {
    local out
    out=$(DATABASE_URL="$url" python3 bench/scale/timed.py "$bin" --config "$config" export \
        --provider acme --since "$(export_since)")
    python3 -c 'import json, sys; r = json.loads(sys.argv[1])
print(json.dumps({"events": r["lines"], "seconds": r["seconds"], "eps": round(r["lines"] / r["seconds"]),
                  "rss_mib": r["rss_mib"]}))' "$out"
}

# `callback-gateway reconcile` of a report of the newest RECONCILE_LINES movements of acme (and
# those at the same time as the oldest of them: a capture batch's transfers share their time),
# as the provider would send it, so every line matches (exit 0), against the whole ledger.
reconcile_report() {
    local report=target/bench-scale-report.jsonl since until out lines
    IFS='|' read -r since until < <(q "
        SELECT to_char(min(created_at) AT TIME ZONE 'UTC', '$utc'),
               to_char((max(created_at) + interval '1 second') AT TIME ZONE 'UTC', '$utc')
        FROM (SELECT created_at FROM ledger_transfers WHERE merchant_id = 42 AND provider = 'acme'
              ORDER BY created_at DESC LIMIT $RECONCILE_LINES) AS t")
    psql "$url" -X -Atq -v ON_ERROR_STOP=1 -c "COPY (
        SELECT json_build_object('payment_id', t.payment_id, 'kind', t.kind,
                                 'amount_minor', abs(e.amount_minor), 'currency', e.currency,
                                 'at', to_char(t.created_at AT TIME ZONE 'UTC', '$utc'),
                                 'reference', t.event_id)::text
        FROM ledger_transfers t
        JOIN ledger_entries e ON e.transfer_id = t.id AND e.account = 'psp_clearing:acme'
        WHERE t.merchant_id = 42 AND t.provider = 'acme' AND t.created_at >= '$since'
        ORDER BY t.created_at) TO STDOUT" > "$report"
    out=$(DATABASE_URL="$url" python3 bench/scale/timed.py "$bin" --config "$config" reconcile \
        --provider acme "$report" --since "$since" --until "$until")
    lines=$(wc -l < "$report")
    rm -f "$report"
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); lines = int(sys.argv[2])
if r["code"] != 0:
    sys.exit("reconcile found differences in a report of the ledger itself:\n" + r["head"])
print(json.dumps({"lines": lines, "seconds": r["seconds"], "lps": round(lines / r["seconds"]),
                  "rss_mib": r["rss_mib"]}))' "$out" "$lines"
}

cleaned() { curl -fs "http://127.0.0.1:$port/metrics" | awk '/^gateway_cleanup_deleted_total/ {print $2}'; }

next=1          # the next unused event number, which is also its order's id
measured=""     # event ranges delivered through HTTP: a-b,c-d
phases=""       # history phases: a:b:epoch ...
first_gateway_event=""
points=target/bench-scale-points.jsonl
: > "$points"
load_total=0
loaded_rows=0
for target_rows in 0 $((ROWS / 10)) "$ROWS"; do
    have=$(stored)
    load_s=0
    if [ "$target_rows" -gt "$have" ]; then
        a=$next
        b=$((next + target_rows - have - 1))
        load_history "$a" "$b"
        phases="$phases $a:$b:$load_epoch"
        next=$((b + 1))
        load_total=$(python3 -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]))' "$load_total" "$load_s")
        loaded_rows=$((loaded_rows + b - a + 1))
        if [ -n "$first_gateway_event" ]; then check_shapes "$first_gateway_event" "$b"; fi
    fi
    rows=$(stored)
    read -r total_bytes body_raw body_stored < <(q "
        SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
                JOIN pg_namespace s ON s.oid = c.relnamespace
                WHERE s.nspname = 'public' AND c.relkind = 'r'),
               coalesce(round(avg(octet_length(body))), 0), coalesce(round(avg(pg_column_size(body))), 0)
        FROM callback_deliveries TABLESAMPLE SYSTEM ($([ "$rows" -gt 1000000 ] && echo 1 || echo 100))" | tr '|' ' ')
    table_bytes=$(q "SELECT json_object_agg(c.relname, pg_total_relation_size(c.oid)) FROM pg_class c
                     JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'r'")
    index_bytes=$(q "SELECT json_object_agg(c.relname, pg_relation_size(c.oid)) FROM pg_class c
                     JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'i'")
    log "point $target_rows: $rows stored events, $total_bytes bytes in all tables, body ${body_raw} B raw / ${body_stored} B stored"

    pending_end=$((next + WARMUP + RATE_CAP * DURATION))
    make_orders "$next" $((pending_end - 1))
    psql "$server/postgres" -qc "CHECKPOINT"
    start_gateway "$config" "$port" "$url" target/bench-scale-gateway.log
    # Unmeasured warm-up: the pool's connections and their prepared statements.
    out=$(load --mode first --body realistic --first-order "$next" --count "$WARMUP")
    [ "$(field "$out" ok)" = "$WARMUP" ] || { log "warm-up deliveries failed: $out"; exit 1; }
    [ -n "$first_gateway_event" ] || first_gateway_event=$next
    measured="$measured,$next-$((next + WARMUP - 1))"
    next=$((next + WARMUP))
    if [ -n "$phases" ]; then
        check_replays "$(live_history $(( $(date +%s) + 60 )) "")"
    fi

    # a. First deliveries.
    psql "$server/postgres" -qc "CHECKPOINT"
    first=$(load --mode first --body realistic --duration "$DURATION" --first-order "$next" --orders $((pending_end - next)))
    log "point $rows, first deliveries: $first"
    [ "$(field "$first" ok)" = "$(field "$first" requests)" ] || log "WARNING: not every first delivery succeeded"
    [ "$(field "$first" exhausted)" = False ] || log "WARNING: the first deliveries ran out of pending orders (raise RATE_CAP)"
    new_next=$(field "$first" next_order)
    measured="$measured,$next-$((new_next - 1))"
    next=$new_next

    # b. Cold replays over the whole live history.
    history=$(live_history $(( $(date +%s) + DURATION + 120 )) "$measured")
    psql "$server/postgres" -qc "CHECKPOINT"
    before=$(transfers)
    cold=$(load --mode cold-replay --duration "$DURATION" --history "$history")
    after=$(transfers)
    log "point $rows, cold replays: $cold"
    if [ "$before" != "$after" ]; then log "replays posted transfers: $before -> $after"; exit 1; fi
    [ "$(field "$cold" replayed)" = "$(field "$cold" requests)" ] || log "WARNING: not every cold replay was a replay"

    # c. 95% first deliveries, 5% redeliveries of stored events.
    mix_end=$((next + RATE_CAP * DURATION))
    make_orders "$pending_end" $((mix_end - 1))
    [ "$mix_end" -ge "$pending_end" ] || mix_end=$pending_end
    psql "$server/postgres" -qc "CHECKPOINT"
    mix=$(load --mode mix --duration "$DURATION" --first-order "$next" --orders $((mix_end - next)) \
        --history "$history" --redelivery-percent 5)
    log "point $rows, mix: $mix"
    [ "$(field "$mix" ok)" = "$(field "$mix" requests)" ] || log "WARNING: not every mixed request succeeded"
    [ "$(field "$mix" exhausted)" = False ] || log "WARNING: the mix ran out of pending orders (raise RATE_CAP)"
    new_next=$(field "$mix" next_order)
    measured="$measured,$next-$((new_next - 1))"
    next=$new_next

    # d. Reads: every console page and admin read, READ_LOADS times each, while first
    # deliveries run (bench/scale/reads.py).
    reads_end=$((next + RATE_CAP * READ_SECONDS))
    make_orders "$mix_end" $((reads_end - 1))
    [ "$reads_end" -ge "$mix_end" ] || reads_end=$mix_end
    pick_read_inputs
    load --mode first --body realistic --duration "$READ_SECONDS" --first-order "$next" \
        --orders $((reads_end - next)) > target/bench-scale-read-load.json &
    read_load=$!
    # The load's first seconds are its ramp-up (connections, the pool's first batches): reads
    # start once it runs at its rate.
    sleep 5
    reads=$(python3 bench/scale/reads.py "127.0.0.1:$port" "$admin_token" 42 acme "$READ_LOADS" \
        target/bench-scale-ids.txt "$window_since" "$window_until" $((READ_SECONDS - 15)))
    kill -0 "$read_load" 2>/dev/null || log "WARNING: the reads outlasted the first deliveries under them (raise READ_SECONDS)"
    wait "$read_load"
    under=$(cat target/bench-scale-read-load.json)
    log "point $rows, reads: $reads"
    log "point $rows, first deliveries under the reads: $under"
    new_next=$(field "$under" next_order)
    measured="$measured,$next-$((new_next - 1))"
    next=$new_next

    # e. The same export over HTTP (/admin/events.jsonl), with nothing else running: the
    # gateway's peak RSS before and after says whether it streams at bounded memory.
    hwm_before=$(awk '/VmHWM/ {print $2}' "/proc/$gateway/status")
    http_export=$(export_over_http)
    hwm_after=$(awk '/VmHWM/ {print $2}' "/proc/$gateway/status")
    log "point $rows, HTTP export: $http_export; gateway peak RSS $((hwm_before / 1024)) -> $((hwm_after / 1024)) MiB"

    deleted=$(cleaned)
    rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$gateway/status")
    stop_gateway

    # f. `export` of EXPORT_EVENTS events and `reconcile` of a RECONCILE_LINES-line report,
    # as finance runs them (the gateway stopped: they are separate processes).
    cli_export=$(export_with_cli)
    log "point $rows, export: $cli_export"
    reconcile=$(reconcile_report)
    log "point $rows, reconcile: $reconcile"
    # The orders nobody paid go, so the next history continues the numbering without a gap.
    q "DELETE FROM orders WHERE id >= $next AND status = 'pending_payment'" >/dev/null
    q "VACUUM orders"
    python3 - "$target_rows" "$rows" "$first" "$cold" "$mix" "$total_bytes" "$body_raw" "$body_stored" \
        "$rss_kib" "$deleted" "$load_s" "$table_bytes" "$index_bytes" "$reads" "$under" \
        "$http_export" "$hwm_before" "$hwm_after" "$cli_export" "$reconcile" >> "$points" <<'PY'
import json, sys
(target, rows, first, cold, mix, total_bytes, body_raw, body_stored, rss_kib, deleted, load_s,
 table_bytes, index_bytes, reads, under, http_export, hwm_before, hwm_after, cli_export,
 reconcile) = sys.argv[1:]
first, cold, mix = json.loads(first), json.loads(cold), json.loads(mix)
reads, under = json.loads(reads), json.loads(under)
http_export, cli_export, reconcile = json.loads(http_export), json.loads(cli_export), json.loads(reconcile)
slowest = lambda key: max(reads["reads"].items(), key=lambda kv: kv[1][key])
rows = int(rows)
print(json.dumps({
    "target_rows": int(target), "rows": rows,
    "first_rps": round(first["rps"], 1), "cold_replay_rps": round(cold["rps"], 1), "mix_rps": round(mix["rps"], 1),
    "first_p99_ms": round(first["p99_ms"], 2), "cold_replay_p99_ms": round(cold["p99_ms"], 2),
    "mix_p99_ms": round(mix["p99_ms"], 2),
    "first_p50_ms": round(first["p50_ms"], 2), "cold_replay_p50_ms": round(cold["p50_ms"], 2),
    "mix_p50_ms": round(mix["p50_ms"], 2),
    "bytes_per_event": round(int(total_bytes) / rows) if rows else None,
    "total_bytes": int(total_bytes),
    "raw_body_bytes_per_event": int(float(body_raw)) if rows else None,
    "stored_body_bytes_per_event": int(float(body_stored)) if rows else None,
    "cold_replay_replayed": cold["replayed"], "cold_replay_requests": cold["requests"],
    "mix_redeliveries": mix["redeliveries"], "mix_replayed": mix["replayed"],
    "failed": sum(r["requests"] - r["ok"] for r in (first, cold, mix)),
    "cleaner_deleted": int(float(deleted or 0)),
    "rss_mib": round(int(rss_kib) / 1024, 1),
    "load_seconds": round(float(load_s), 1),
    "table_bytes": json.loads(table_bytes), "index_bytes": json.loads(index_bytes),
    "reads": reads["reads"], "reads_seconds": reads["seconds"],
    "read_p50_ms": slowest("p50_ms")[1]["p50_ms"], "read_p50_slowest": slowest("p50_ms")[0],
    "read_p99_ms": slowest("p99_ms")[1]["p99_ms"], "read_p99_slowest": slowest("p99_ms")[0],
    "balances_p50_ms": reads["reads"]["admin_balances"]["p50_ms"],
    "first_rps_under_reads": round(under["rps"], 1),
    "http_export": http_export,
    "http_export_rss_growth_mib": round((int(hwm_after) - int(hwm_before)) / 1024, 1),
    "export": cli_export, "export_eps": cli_export["eps"], "export_rss_mib": cli_export["rss_mib"],
    "reconcile": reconcile, "reconcile_lps": reconcile["lps"],
}))
PY
done

# Retention at the largest point (bench/history/drop.sh: archive-and-drop of a month of ROWS
# events against their row-by-row delete), on a database of its own.
stop_gateway
rm -f target/bench-history.json
DATABASE_URL="$DATABASE_URL" scripts/bench --history --rows "$ROWS" >&2

# A backup and a point-in-time restore at the largest point (bench/backup/backup.sh), on a
# cluster of its own; the measured database goes first, so the disk holds one copy at a time.
if [ "${KEEP_DB:-0}" != 1 ]; then
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
fi
rm -f target/bench-backup.json
scripts/bench --backup --rows "$ROWS" >&2

python3 - "$points" "$ROWS" "$load_total" "$loaded_rows" "$DURATION" "$CLIENTS" "$fsync" "$shared_buffers" <<'PY'
import json, os, sys
points_file, rows, load_total, loaded_rows, duration, clients, fsync, shared_buffers = sys.argv[1:]
curve = [json.loads(line) for line in open(points_file)]
zero, top = curve[0], curve[-1]
ratio = lambda key: round(top[key] / zero[key], 3) if zero[key] else None
load_total, loaded_rows = float(load_total), int(loaded_rows)
r = {
    "scale_rows": int(rows), "scale_rows_measured": top["rows"],
    "scale_first_rps": top["first_rps"], "scale_cold_replay_rps": top["cold_replay_rps"],
    "scale_mix_rps": top["mix_rps"],
    "scale_p99_ms": max(top["first_p99_ms"], top["cold_replay_p99_ms"], top["mix_p99_ms"]),
    "scale_first_ratio": ratio("first_rps"), "scale_cold_replay_ratio": ratio("cold_replay_rps"),
    "scale_mix_ratio": ratio("mix_rps"),
    "bytes_per_event": top["bytes_per_event"], "raw_body_bytes_per_event": top["raw_body_bytes_per_event"],
    "stored_body_bytes_per_event": top["stored_body_bytes_per_event"],
    "rss_mib": top["rss_mib"], "load_seconds": round(load_total, 1), "load_rows": loaded_rows,
    "load_rows_per_s": round(loaded_rows / load_total) if load_total else None,
    "duration_s": int(duration), "clients": int(clients), "fsync": fsync, "shared_buffers": shared_buffers,
    "scale_read_p50_ms": top["read_p50_ms"], "scale_read_p99_ms": top["read_p99_ms"],
    "scale_read_p50_slowest": top["read_p50_slowest"], "scale_read_p99_slowest": top["read_p99_slowest"],
    "scale_balances_p50_ms": top["balances_p50_ms"],
    # The most any read's median grew from the previous point (N/10) to N.
    "scale_read_growth": round(max(top["reads"][k]["p50_ms"] / max(curve[-2]["reads"][k]["p50_ms"], 0.01)
                                   for k in top["reads"]), 2) if len(curve) > 1 else None,
    "scale_first_rps_under_reads": top["first_rps_under_reads"],
    "export_eps": top["export_eps"], "export_rss_mib": top["export_rss_mib"],
    "export_events": top["export"]["events"], "export_http_eps": top["http_export"]["eps"],
    "export_http_rss_growth_mib": top["http_export_rss_growth_mib"],
    "reconcile_lps": top["reconcile_lps"], "reconcile_lines": top["reconcile"]["lines"],
    "reconcile_rss_mib": top["reconcile"]["rss_mib"],
    "curve": [{k: p[k] for k in ("rows", "first_rps", "cold_replay_rps", "mix_rps", "first_p99_ms",
                                  "cold_replay_p99_ms", "mix_p99_ms", "bytes_per_event", "read_p50_ms",
                                  "read_p99_ms", "balances_p50_ms", "export_eps", "reconcile_lps")}
              for p in curve],
}
if os.path.exists("target/bench-history.json"):
    r.update(json.load(open("target/bench-history.json")))
if os.path.exists("target/bench-backup.json"):
    r.update(json.load(open("target/bench-backup.json")))
with open("target/bench-scale.json", "w") as out:
    json.dump({**r, "points": curve}, out, indent=2)
print("NOTE: the load generator, the gateway and PostgreSQL share this machine's cores.")
print(f"{'stored events':>14}{'first/s':>10}{'p99':>8}{'cold replay/s':>15}{'p99':>8}{'mix/s':>10}{'p99':>8}{'bytes/event':>13}")
for p in curve:
    print(f"{p['rows']:>14,}{p['first_rps']:>10,.0f}{p['first_p99_ms']:>8.1f}{p['cold_replay_rps']:>15,.0f}"
          f"{p['cold_replay_p99_ms']:>8.1f}{p['mix_rps']:>10,.0f}{p['mix_p99_ms']:>8.1f}{p['bytes_per_event'] or 0:>13,}")
print(f"{'read (median / p99 ms)':<32}" + "".join(f"{p['rows']:>20,}" for p in curve))
for name in top["reads"]:
    print(f"{name:<32}" + "".join(f"{p['reads'][name]['p50_ms']:>11.1f} /{p['reads'][name]['p99_ms']:>7.1f}" for p in curve))
for p in curve:
    print(f"at {p['rows']:,}: export {p['export']['events']:,} events at {p['export_eps']:,}/s (peak RSS "
          f"{p['export_rss_mib']} MiB; over HTTP {p['http_export']['eps']:,}/s, gateway peak RSS "
          f"+{p['http_export_rss_growth_mib']} MiB), reconcile {p['reconcile']['lines']:,} lines at "
          f"{p['reconcile_lps']:,}/s")
print(f"at {top['rows']:,} vs 0: first {r['scale_first_ratio']}, cold replay {r['scale_cold_replay_ratio']}, mix {r['scale_mix_ratio']}")
if loaded_rows:
    print(f"history: {loaded_rows:,} events loaded in {load_total:.0f} s ({r['load_rows_per_s']:,}/s)")
print("curve written to target/bench-scale.json (scripts/plot-scale draws it)")
print("BENCH " + json.dumps(r))
PY

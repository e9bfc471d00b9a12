# scripts/bench --history [--rows N], and the end of scripts/bench --scale at its largest point:
# what retention costs (issue 40). Sourced by scripts/bench, which has built the binaries and
# defined server, bin, log, field, gateway_config, start_gateway and CLIENTS.
#
# On a database of its own (cg_history_<pid>, dropped at the end), one month (January 2025) of
# HISTORY_ROWS events (default --rows) with the load generator's realistic bodies, then:
#   history_delete_ms     DELETE of the month's rows, row by row, on a copy of its partition
#                         (what retention would cost without partitions), and
#                         history_delete_vacuum_ms, the VACUUM that makes that space reusable;
#   history_drop_ms       `callback-gateway history archive` for the month: archive (gzip JSONL),
#                         read back and verified, detached concurrently, dropped; of which
#                         history_archive_ms (the archive and its read-back) and
#                         history_detach_drop_ms (what replaces the delete), and
#                         history_detach_drop_vs_delete, their ratio to history_delete_ms;
#   history_pass_p99_ms   the p99 of first deliveries (CLIENTS at once) over HISTORY_LOAD_SECONDS
#                         (default 60) whose third second starts the pass, and
#                         history_pass_rps their rate; history_baseline_p99_ms and
#                         history_baseline_rps, the same load just before, without a pass, for
#                         HISTORY_BASELINE_SECONDS (default 20);
#   bytes_per_event_kept  the event log's bytes (partition, indexes, TOAST) per event while a
#                         month is kept; archive_bytes_per_event, the archive's once dropped.
# HISTORY_TABLESPACE_DIR=DIR puts that database in a tablespace at DIR (an empty directory the
# server's user owns, on the file system to measure); history_fs says which file system held it.
# The month retention removes is keep_days old: on a serving host its pages left the page cache
# long ago. As root, the bench evicts the page cache (drop_caches) before the delete and before
# the pass's orders are made, so both read the month as the host would find it
# (history_cold: true); HISTORY_COLD=0, or not root, measures it just written and still cached
# (history_cold: false).
# Prints `BENCH {json}` and writes target/bench-history.json.

HISTORY_ROWS=${HISTORY_ROWS:-$ROWS}
HISTORY_LOAD_SECONDS=${HISTORY_LOAD_SECONDS:-60}  # first deliveries measured; the pass starts 2 s in
HISTORY_BASELINE_SECONDS=${HISTORY_BASELINE_SECONDS:-20}  # the same load before the pass, for its p99
hdb="cg_history_$$"
hurl="$server/$hdb"
harchive=$(mktemp -d "${TMPDIR:-/tmp}/bench-history.XXXXXX")
hgateway=
history_cleanup() {
    [ -z "$hgateway" ] || { kill "$hgateway" 2>/dev/null || true; wait "$hgateway" 2>/dev/null || true; }
    rm -rf "$harchive"
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $hdb WITH (FORCE)" >/dev/null 2>&1 || true
    [ -z "${HISTORY_TABLESPACE_DIR:-}" ] || psql "$server/postgres" -qc "DROP TABLESPACE IF EXISTS $hdb" >/dev/null 2>&1 || true
}
trap history_cleanup EXIT
hq() { psql "$hurl" -X -Atq -v ON_ERROR_STOP=1 -c "$1"; }
history_cold=false
[ "${HISTORY_COLD:-1}" = 0 ] || [ ! -w /proc/sys/vm/drop_caches ] || history_cold=true
# What the host's page cache holds of the month decides what its DROP costs: pages written 8 KB
# at a time stay small in the cache and the kernel frees each one when the file is truncated
# (about 150 ms per cached GB); read back by the archive's sequential reads they come in large
# folios, freed at once (docs/history.md, "Measured").
evict_page_cache() { ! $history_cold || { sync; echo 3 >/proc/sys/vm/drop_caches; }; }
ms_since() { python3 -c 'import sys, time; print(round((time.time() - float(sys.argv[1])) * 1000))' "$1"; }

if [ -n "${HISTORY_TABLESPACE_DIR:-}" ]; then
    # The drop's cost is the file system's (docs/history.md): a directory on another one, owned
    # by the server's user, measures it there (the WAL stays where the cluster has it).
    psql "$server/postgres" -qc "CREATE TABLESPACE $hdb LOCATION '$HISTORY_TABLESPACE_DIR'" >/dev/null
    psql "$server/postgres" -qc "CREATE DATABASE $hdb TABLESPACE $hdb" >/dev/null
    log "history: database on $HISTORY_TABLESPACE_DIR ($(findmnt -no FSTYPE,OPTIONS -T "$HISTORY_TABLESPACE_DIR" 2>/dev/null))"
else
    psql "$server/postgres" -qc "CREATE DATABASE $hdb" >/dev/null
fi
hport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# serve without an archive directory (its own pass must not take the month first); the pass
# measured is the command line's, with one.
hserve=target/bench-history-serve.toml
hpass=target/bench-history-pass.toml
gateway_config "$hserve" "$hport" "$hurl" 3600 "" "[admin]
token = \"bench-history-admin-token-0123456789\""
gateway_config "$hpass" "$hport" "$hurl" 3600 "" "[admin]
token = \"bench-history-admin-token-0123456789\"
[history]
keep_days = 120
archive_dir = \"$harchive\""
DATABASE_URL="$hurl" "$bin" --config "$hserve" migrate >/dev/null
hfunctions=target/bench-history-functions.sql
target/release/loadgen --config "$hserve" --provider acme --emit-sql > "$hfunctions"

# The log as a database partitioned since 2025 has it: monthly partitions from January 2025.
hq "ALTER TABLE callback_deliveries DETACH PARTITION callback_deliveries_legacy;
    DROP TABLE callback_deliveries_legacy;
    SELECT count(*) FROM (SELECT callback_deliveries_add_month(m) FROM generate_series(
        timestamptz '2025-01-01', now() + interval '1 month', interval '1 month') m) t" >/dev/null
january_end=$(date -d 2025-01-31T00:00:00Z +%s)
t=$EPOCHREALTIME
for ((c0 = 1; c0 <= HISTORY_ROWS; c0 += 1000000)); do
    c1=$(( c0 + 999999 < HISTORY_ROWS ? c0 + 999999 : HISTORY_ROWS ))
    psql "$hurl" -X -Atq -v ON_ERROR_STOP=1 -f "$hfunctions" -v a=1 -v b="$HISTORY_ROWS" \
        -v c0="$c0" -v c1="$c1" -v epoch="$january_end" -v span_secs=$((29 * 86400)) -v tid0=1 \
        -f bench/scale/history_deliveries.sql >/dev/null
done
hq "VACUUM ANALYZE callback_deliveries" >/dev/null
psql "$server/postgres" -qc "CHECKPOINT"
log "history: $HISTORY_ROWS events of January 2025 loaded in $(( $(ms_since "${t/,/.}") / 1000 )) s"
month=callback_deliveries_y2025m01
[ "$(hq "SELECT count(*) FROM $month")" = "$HISTORY_ROWS" ] || { log "history: the month does not hold $HISTORY_ROWS rows"; exit 1; }
month_bytes=$(hq "SELECT pg_total_relation_size('$month')")
month_file="$(hq "SHOW data_directory")/$(hq "SELECT pg_relation_filepath('$month')")"
history_fs=$(findmnt -no FSTYPE,OPTIONS -T "$(dirname "$month_file")" 2>/dev/null || echo unknown)

# Without partitions: the same rows deleted from a copy of the month (its indexes and TOAST).
hq "CREATE TABLE delete_copy (LIKE $month INCLUDING ALL); INSERT INTO delete_copy SELECT * FROM $month" >/dev/null
hq "VACUUM ANALYZE delete_copy" >/dev/null
psql "$server/postgres" -qc "CHECKPOINT"
evict_page_cache
t=$EPOCHREALTIME; hq "DELETE FROM delete_copy" >/dev/null; delete_ms=$(ms_since "${t/,/.}")
t=$EPOCHREALTIME; hq "VACUUM delete_copy" >/dev/null; vacuum_ms=$(ms_since "${t/,/.}")
hq "DROP TABLE delete_copy"
psql "$server/postgres" -qc "CHECKPOINT"
log "history: DELETE of $HISTORY_ROWS rows in $delete_ms ms, its VACUUM in $vacuum_ms ms"

# The pass, under first deliveries.
first_order=$((HISTORY_ROWS + 1))
# The month leaves the page cache (checkpointed just above) before the orders are made: what
# first deliveries read stays warm, as it is on a serving host.
evict_page_cache
# Enough pending orders for either load at up to 6,000 first deliveries a second (a run that
# runs out of orders ends early): the baseline's first, then the pass's.
baseline_orders=$((HISTORY_BASELINE_SECONDS * 6000))
orders=$((baseline_orders + HISTORY_LOAD_SECONDS * 6000))
psql "$hurl" -X -Atq -v ON_ERROR_STOP=1 -f "$hfunctions" -f - >/dev/null <<SQL
INSERT INTO orders (id, user_id, amount_minor, currency, reference, status, created_at)
SELECT n, :merchant_id, pg_temp.scale_amount(n, hb), pg_temp.scale_currency(n, hb),
       pg_temp.scale_reference(n, hb), :'order_pending', now()
FROM generate_series($first_order::bigint, $((first_order + orders - 1))::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h;
ANALYZE orders;
SQL
RUST_LOG=warn DATABASE_URL="$hurl" "$bin" --config "$hserve" serve >target/bench-history-gateway.log 2>&1 &
hgateway=$!
until curl -fs "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1; do
    kill -0 "$hgateway" 2>/dev/null || { log "history: the gateway exited; see target/bench-history-gateway.log"; exit 1; }
    sleep 0.1
done
# The same load without a pass first: the p99 the pass is measured against.
baseline_json=$(target/release/loadgen --config "$hserve" --provider acme --url "http://127.0.0.1:$hport" \
    --concurrency "$CLIENTS" --mode first --body realistic --first-order "$first_order" \
    --orders "$baseline_orders" --duration "$HISTORY_BASELINE_SECONDS" | grep '^{' | tail -1)
loadout=$(mktemp)
target/release/loadgen --config "$hserve" --provider acme --url "http://127.0.0.1:$hport" \
    --concurrency "$CLIENTS" --mode first --body realistic --first-order $((first_order + baseline_orders)) \
    --orders $((orders - baseline_orders)) --duration "$HISTORY_LOAD_SECONDS" >"$loadout" &
load_job=$!
sleep 2
t=$EPOCHREALTIME
pass_out=$(DATABASE_URL="$hurl" "$bin" --config "$hpass" history archive 2>/dev/null)
drop_ms=$(ms_since "${t/,/.}")
wait "$load_job"
[ "$drop_ms" -lt $(( (HISTORY_LOAD_SECONDS - 2) * 1000 )) ] ||
    log "history: the pass outlasted the first deliveries measured (HISTORY_LOAD_SECONDS=$HISTORY_LOAD_SECONDS): their p99 covers only its start"
echo "$pass_out" | grep -q "archived $month.jsonl.gz ($HISTORY_ROWS rows" || { log "history: the pass did not archive the month: $pass_out"; exit 1; }
[ "$(hq "SELECT to_regclass('$month') IS NULL")" = t ] || { log "history: the month is still there"; exit 1; }
archive_bytes=$(stat -c %s "$harchive/$month.jsonl.gz")
detach_drop_ms=$(echo "$pass_out" | sed -n "s/^archived $month.jsonl.gz .*detach and drop \([0-9]*\) ms)$/\1/p")
archive_ms=$(echo "$pass_out" | sed -n "s/^archived $month.jsonl.gz .*archive and read-back \([0-9]*\) ms.*$/\1/p")
load_json=$(grep '^{' "$loadout" | tail -1)
rm -f "$loadout"
log "history: the pass archived and dropped the month in $drop_ms ms; first deliveries meanwhile: $load_json"
python3 - "$HISTORY_ROWS" "$delete_ms" "$vacuum_ms" "$drop_ms" "$month_bytes" "$archive_bytes" "$archive_ms" "$detach_drop_ms" "$load_json" "$baseline_json" "$history_fs" "$history_cold" <<'PY'
import json, sys
rows, delete_ms, vacuum_ms, drop_ms, month_bytes, archive_bytes, archive_ms, detach_drop_ms = (int(x) for x in sys.argv[1:9])
load = json.loads(sys.argv[9]) if sys.argv[9] else {}
baseline = json.loads(sys.argv[10]) if sys.argv[10] else {}
r = {
    "history_rows": rows, "history_delete_ms": delete_ms, "history_delete_vacuum_ms": vacuum_ms,
    "history_drop_ms": drop_ms,
    "history_archive_ms": archive_ms, "history_detach_drop_ms": detach_drop_ms,
    # The part that replaces the row-by-row delete (the archive is work the delete skips).
    "history_detach_drop_vs_delete": round(delete_ms / max(detach_drop_ms, 1), 1),
    "history_pass_p99_ms": load.get("p99_ms"), "history_pass_rps": load.get("rps"),
    "history_baseline_p99_ms": baseline.get("p99_ms"), "history_baseline_rps": baseline.get("rps"),
    "history_fs": sys.argv[11], "history_cold": sys.argv[12] == "true",
    "bytes_per_event_kept": round(month_bytes / rows), "archive_bytes_per_event": round(archive_bytes / rows),
}
json.dump(r, open("target/bench-history.json", "w"), indent=2)
print("BENCH " + json.dumps(r))
PY

# scripts/bench --backup [--rows N], and the end of scripts/bench --scale at its largest point:
# what a backup and a point-in-time restore cost at N stored events (issue 54). Sourced by
# scripts/bench, which has built the binaries and defined bin, log, gateway_config and
# start_gateway.
#
# On a cluster of its own (target/bench-backup, removed at the end; KEEP_BACKUP_CLUSTER=1 keeps
# it), archiving with pgBackRest as deploy/pgbackrest/ configures it (its paths and port
# replaced, the repository in the same folder), N events as the gateway stores them (the order,
# the payment, the transfer and its entries, the delivery with its raw body, the idempotency
# record with its ack: bench/scale/history_*.sql, the load generator's bodies), then:
#   backup_full_s   `pgbackrest --type=full backup` of the cluster;
#   backup_bytes    the repository's size after it (compressed backup and WAL);
#   then BACKUP_AFTER_EVENTS more events (default N/100, at least 1,000), the restore target,
#   and a bad operation (every idempotency record deleted), its WAL archived;
#   restore_s       `pgbackrest --type=time --target=... restore` of the backup into an empty
#                   data directory (a lost disk: every file copied back);
#   recovery_s      from starting the restored server to its promotion (WAL replayed from the
#                   archive up to the target);
#   pitr_rto_s      from stopping PostgreSQL to the gateway answering /readyz again on the
#                   restored cluster: restore, recovery, `after-restore`, `serve` start;
#   and checks that the target's events are all there and the bad operation is not.
# WAL of the load itself is not archived (archive_command is `true` until the load ends), so
# the repository holds the backup and what follows it. Needs about (4.6 KB + the backup's share)
# per event of disk: about 7 GB at 1,000,000. Prints `BENCH {json}` and writes
# target/bench-backup.json.

BACKUP_ROWS=${BACKUP_ROWS:-$ROWS}
BACKUP_AFTER_EVENTS=${BACKUP_AFTER_EVENTS:-$(( BACKUP_ROWS / 100 > 1000 ? BACKUP_ROWS / 100 : 1000 ))}
bdir="$repo/target/bench-backup"
pg_bin=/usr/lib/postgresql/15/bin
bport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
burl="postgres://postgres@127.0.0.1:$bport/gateway"
bgateway=
as_postgres() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
bpg_ctl() { as_postgres "$pg_bin/pg_ctl" -D "$bdir/data" -l "$bdir/server.log" -w -t 3600 "$@"; }
pgbr() { as_postgres pgbackrest --config="$bdir/pgbackrest.conf" --stanza="$bstanza" "$@"; }
bq() { psql "$burl" -X -Atq -v ON_ERROR_STOP=1 -c "$1"; }
now_s() { date +%s.%N; }
secs() { python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))' "$1" "$2"; }
backup_cleanup() {
    [ -z "$bgateway" ] || { kill "$bgateway" 2>/dev/null || true; wait "$bgateway" 2>/dev/null || true; }
    if [ -f "$bdir/data/postmaster.pid" ]; then bpg_ctl -m immediate stop >/dev/null 2>&1 || true; fi
    if [ "${KEEP_BACKUP_CLUSTER:-0}" = 1 ]; then log "backup: kept $bdir"; else rm -rf "$bdir"; fi
}
trap backup_cleanup EXIT
command -v pgbackrest >/dev/null 2>&1 || { log "backup: pgbackrest is missing (sudo apt-get install -y pgbackrest)"; exit 1; }

rm -rf "$bdir"
mkdir -p "$bdir/repo" "$bdir/log" "$bdir/lock"
[ "$(id -u)" != 0 ] || chown -R postgres "$bdir"
as_postgres "$pg_bin/initdb" -D "$bdir/data" -U postgres -A trust -E UTF8 --no-locale --no-instructions >/dev/null
bstanza=$(sed -n 's/^\[\(.*\)\]$/\1/p' deploy/pgbackrest/pgbackrest.conf | grep -vx global | head -n 1)
sed -e "s|^repo1-path=.*|repo1-path=$bdir/repo|" -e "s|^log-path=.*|log-path=$bdir/log|" \
    -e "s|^lock-path=.*|lock-path=$bdir/lock|" -e "s|^pg1-path=.*|pg1-path=$bdir/data|" \
    -e "s|^pg1-port=.*|pg1-port=$bport|" -e "s|^pg1-socket-path=.*|pg1-socket-path=$bdir|" \
    deploy/pgbackrest/pgbackrest.conf >"$bdir/pgbackrest.conf"
# The archiving settings as deployed, with `true` for archive_command while the history loads.
{
    echo
    sed -e "s|'pgbackrest |'pgbackrest --config=$bdir/pgbackrest.conf |" deploy/pgbackrest/postgresql.conf
    echo "port = $bport"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$bdir'"
    echo "max_connections = 200"
    echo "shared_buffers = '${BACKUP_SHARED_BUFFERS:-1GB}'"
    echo "max_wal_size = '8GB'"
} >>"$bdir/data/postgresql.conf"
archive_command=$(sed -n "s/^archive_command = '\(.*\)'$/\1/p" "$bdir/data/postgresql.conf")
echo "archive_command = 'true'" >>"$bdir/data/postgresql.conf"
[ "$(id -u)" != 0 ] || chown -R postgres "$bdir"
bpg_ctl start >/dev/null
psql "postgres://postgres@127.0.0.1:$bport/postgres" -X -q -v owner=gateway_owner -v runtime=gateway \
    -v database=gateway -f deploy/roles.sql >/dev/null
bport_gw=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bconfig="$bdir/gateway.toml"
gateway_config "$bconfig" "$bport_gw" "postgres://gateway@127.0.0.1:$bport/gateway" 60
# The two roles: the owner migrates and fences, the runtime role serves.
export DATABASE_URL="postgres://gateway@127.0.0.1:$bport/gateway"
export DATABASE_MIGRATE_URL="postgres://gateway_owner@127.0.0.1:$bport/gateway"
"$bin" --config "$bconfig" migrate >/dev/null
bfunctions="$bdir/functions.sql"
target/release/loadgen --config "$bconfig" --provider acme --emit-sql >"$bfunctions"

# Events a..b as the gateway stores them, a million per transaction.
bload() {
    local a=$1 b=$2 c0 c1 tid0 records
    tid0=$(bq "SELECT nextval('ledger_transfers_id_seq')")
    bq "SELECT setval('ledger_transfers_id_seq', $tid0 + $b - $a)" >/dev/null
    for ((c0 = a; c0 <= b; c0 += 1000000)); do
        c1=$(( c0 + 999999 < b ? c0 + 999999 : b ))
        for file in history_ledger.sql history_deliveries.sql history_records.sql; do
            records=$(psql "$burl" -X -Atq -v ON_ERROR_STOP=1 -f "$bfunctions" -v a="$a" -v b="$b" \
                -v c0="$c0" -v c1="$c1" -v epoch="$(date +%s)" -v span_secs=3600 -v tid0="$tid0" \
                -f "bench/scale/$file" | tail -n 1)
        done
        [ "$records" = $((c1 - c0 + 1)) ] || { log "backup: $records records for events $c0-$c1"; exit 1; }
    done
}
t=$(now_s)
bload 1 "$BACKUP_ROWS"
bq "VACUUM ANALYZE" >/dev/null
bq "CHECKPOINT"
log "backup: $BACKUP_ROWS events loaded in $(secs "$t" "$(now_s)") s; database $(bq "SELECT pg_size_pretty(pg_database_size('gateway'))")"

# Archiving on, as deployed.
bq "ALTER SYSTEM SET archive_command = '$archive_command'"
bq "SELECT pg_reload_conf()" >/dev/null
pgbr stanza-create >/dev/null
pgbr check >/dev/null
t=$(now_s)
pgbr --type=full backup >/dev/null
backup_full_s=$(secs "$t" "$(now_s)")
backup_bytes=$(du -sb "$bdir/repo" | cut -f1)
log "backup: full backup in $backup_full_s s; repository $(( backup_bytes / 1048576 )) MiB"

# After the backup: more events, the target, the bad operation.
bload $((BACKUP_ROWS + 1)) $((BACKUP_ROWS + BACKUP_AFTER_EVENTS))
target=$(bq "SELECT clock_timestamp()")
expected=$(bq "SELECT count(*) FROM idempotency_keys")
bq "DELETE FROM idempotency_keys" >/dev/null
pgbr check >/dev/null
log "backup: $BACKUP_AFTER_EVENTS events after it, target $target ($expected records), then every record deleted"

# The restore: PostgreSQL stopped, its data directory gone (a lost disk), restored to the
# target, started, promoted; ids fenced off; the gateway started.
t_rto=$(now_s)
bpg_ctl -m fast stop >/dev/null
rm -rf "$bdir/data"
as_postgres mkdir -m 700 "$bdir/data"
t=$(now_s)
pgbr --type=time "--target=$target" --target-action=promote restore >/dev/null
restore_s=$(secs "$t" "$(now_s)")
t=$(now_s)
bpg_ctl start >/dev/null
until [ "$(bq "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ]; do sleep 0.1; done
recovery_s=$(secs "$t" "$(now_s)")
"$bin" --config "$bconfig" after-restore >/dev/null
RUST_LOG=warn "$bin" --config "$bconfig" serve --no-migrate >"$bdir/gateway.log" 2>&1 &
bgateway=$!
until curl -fs "http://127.0.0.1:$bport_gw/readyz" >/dev/null 2>&1; do
    kill -0 "$bgateway" 2>/dev/null || { log "backup: the gateway exited; see $bdir/gateway.log"; exit 1; }
    sleep 0.05
done
pitr_rto_s=$(secs "$t_rto" "$(now_s)")
restored=$(bq "SELECT count(*) FROM idempotency_keys")
[ "$restored" = "$expected" ] || { log "backup: $restored records after the restore, $expected expected"; exit 1; }
log "backup: restore $restore_s s, recovery $recovery_s s, stop to /readyz $pitr_rto_s s; all $restored records back"

python3 - "$BACKUP_ROWS" "$BACKUP_AFTER_EVENTS" "$backup_full_s" "$backup_bytes" "$restore_s" "$recovery_s" "$pitr_rto_s" <<'PY'
import json, sys
rows, after, full, size, restore, recovery, rto = sys.argv[1:]
r = {"backup_rows": int(rows), "backup_after_events": int(after), "backup_full_s": float(full),
     "backup_bytes": int(size), "backup_bytes_per_event": round(int(size) / int(rows)),
     "restore_s": float(restore), "recovery_s": float(recovery), "pitr_rto_s": float(rto)}
json.dump(r, open("target/bench-backup.json", "w"), indent=2)
print("BENCH " + json.dumps(r))
PY

# scripts/bench --audit: what the audit log's hash chain (migration 000061) costs an audited
# action's write. Sourced by scripts/bench, which has built the binaries and defined server,
# bin, log and pgbin.
#
# On a database of its own (cg_audit_<pid>, dropped at the end), pgbench inserts audit rows as
# `audit::record` does, one a transaction, for AUDIT_SECONDS (default 10) each:
#   audit_rows_per_s_1 and audit_rows_per_s_8   with the chain, at 1 and 8 clients;
#   audit_unchained_rows_per_s_1 and _8         the same with the chain's trigger disabled (the
#                                               id from its sequence again), in the same run;
#   audit_chain_ratio_1 and _8                  chained over unchained.
# Audit writers queue on the chain's head row from their audit row to their commit, so the
# 8-client rate is the chain's ceiling; provider callbacks write no audit row.

AUDIT_SECONDS=${AUDIT_SECONDS:-10}
adb="cg_audit_$$"
aurl="$server/$adb"
audit_cleanup() { psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $adb WITH (FORCE)" >/dev/null 2>&1 || true; }
trap audit_cleanup EXIT
psql "$server/postgres" -qc "CREATE DATABASE $adb" >/dev/null
DATABASE_URL="$aurl" DATABASE_MIGRATE_URL="$aurl" "$bin" migrate >/dev/null
ascript=$(mktemp)
cat >"$ascript" <<'SQL'
\set merchant random(1, 100000)
INSERT INTO audit_log (actor, role, action, target, request_id, outcome, changes)
VALUES ('alice', 'admin', 'endpoint.disable', 'merchant:' || :merchant, 'req-' || :merchant,
        'disabled', jsonb_build_object('was_disabled', false, 'reason', 'bench'));
SQL
audit_rate() {
    "$pgbin/pgbench" -n -M prepared -f "$ascript" -c "$1" -j "$1" -T "$AUDIT_SECONDS" "$aurl" 2>/dev/null |
        awk '/^tps = / {print $3; exit}'
}
declare -A audit
for clients in 1 8; do
    audit[chained_$clients]=$(audit_rate "$clients")
done
# The same inserts without the chain: its trigger off, ids from the sequence as before 000061.
psql "$aurl" -qc "ALTER TABLE audit_log DISABLE TRIGGER audit_log_chain;
    ALTER TABLE audit_log ALTER COLUMN id SET DEFAULT nextval('audit_log_id_seq'),
        ALTER COLUMN prev_hash DROP NOT NULL, ALTER COLUMN row_hash DROP NOT NULL" >/dev/null
for clients in 1 8; do
    audit[unchained_$clients]=$(audit_rate "$clients")
done
rm -f "$ascript"
log "audit rows/s with the chain: ${audit[chained_1]} (1 client), ${audit[chained_8]} (8); without: ${audit[unchained_1]}, ${audit[unchained_8]}"
python3 - "${audit[chained_1]}" "${audit[chained_8]}" "${audit[unchained_1]}" "${audit[unchained_8]}" <<'PY'
import json, sys
c1, c8, u1, u8 = (float(x) for x in sys.argv[1:])
print("BENCH " + json.dumps({
    "audit_rows_per_s_1": round(c1), "audit_rows_per_s_8": round(c8),
    "audit_unchained_rows_per_s_1": round(u1), "audit_unchained_rows_per_s_8": round(u8),
    "audit_chain_ratio_1": round(c1 / u1, 3), "audit_chain_ratio_8": round(c8 / u8, 3)}))
PY

# scripts/bench --settle [--rows N]: what `callback-gateway settle` costs on a Stripe itemized
# payout reconciliation report of N lines (default 1,000,000). Sourced by scripts/bench, which
# has built the binaries and defined server, bin and log.
#
# On a database of its own (cg_settle_<pid>, dropped at the end): bench/settle/ledger.sql books
# N captured payments and the payouts that paid them (pure SQL, as the callback path books them),
# and bench/settle/report.sql writes the report Stripe would send for them: one `charge` line per
# payment with its fee, 10,000 lines per payout. Then two runs of settle, each timed with its
# peak RSS (bench/scale/timed.py):
#   settle_lines_per_s, settle_rss_mib          the first, which books every fee (N fees);
#   settle_rerun_lines_per_s, settle_rerun_rss_mib  the second, which books none.
# Each run must settle every item (exit 0) and the first must book N fees, the second none.

settle_db="cg_settle_$$"
settle_url="$server/$settle_db"
settle_dir=$(mktemp -d)
settle_cleanup() {
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $settle_db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$settle_dir"
}
trap settle_cleanup EXIT
psql "$server/postgres" -qc "CREATE DATABASE $settle_db" >/dev/null
DATABASE_URL="$settle_url" DATABASE_MIGRATE_URL="$settle_url" "$bin" migrate >/dev/null
cat >"$settle_dir/gateway.toml" <<TOML
[database]
url = "$settle_url"
[[providers]]
name = "stripe"
scheme = "stripe"
payload = "stripe"
merchant_id = 42
secrets = ["whsec_settle_bench"]
TOML
log "settle: booking $ROWS payments and their payouts"
psql "$settle_url" -q -v ON_ERROR_STOP=1 -v rows="$ROWS" -f bench/settle/ledger.sql >/dev/null
log "settle: writing the report"
psql "$settle_url" -q -v ON_ERROR_STOP=1 -v rows="$ROWS" -f bench/settle/report.sql >"$settle_dir/report.csv"
settle_run() {
    DATABASE_URL="$settle_url" python3 bench/scale/timed.py \
        "$bin" --config "$settle_dir/gateway.toml" settle --provider stripe "$settle_dir/report.csv"
}
first_run=$(settle_run)
rerun=$(settle_run)
python3 - "$ROWS" "$first_run" "$rerun" <<'PY'
import json, re, sys
rows, first, again = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
def summary(run, booked_now):
    out = run["head"]
    m = re.search(r"(\d+) report lines, (\d+) fees of which (\d+) booked now", out)
    if run["code"] != 0 or not m or int(m[1]) != rows or int(m[3]) != booked_now:
        sys.exit(f"bench settle: expected exit 0, {rows} lines and {booked_now} fees booked; got exit {run['code']}:\n{out}")
summary(first, rows)
summary(again, 0)
print(f"settle: {rows} lines in {first['seconds']} s booking every fee, {again['seconds']} s again; "
      f"peak RSS {first['rss_mib']} / {again['rss_mib']} MiB", file=sys.stderr)
print("BENCH " + json.dumps({
    "settle_lines": rows,
    "settle_lines_per_s": round(rows / first["seconds"], 1), "settle_rss_mib": first["rss_mib"],
    "settle_rerun_lines_per_s": round(rows / again["seconds"], 1), "settle_rerun_rss_mib": again["rss_mib"]}))
PY

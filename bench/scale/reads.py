# The read phase of `scripts/bench --scale`: every console page and admin read, loaded LOADS
# times each (round robin, so every read sees the same load), one request at a time on a
# kept-alive connection, the whole body read. Prints one JSON object:
#   {"reads": {name: {"p50_ms", "p99_ms", "max_ms", "n", "bytes"}}, "seconds": ...}
#
#   python3 bench/scale/reads.py HOST:PORT ADMIN_TOKEN MERCHANT PROVIDER LOADS IDS_FILE SINCE UNTIL [SPREAD]
#
# SPREAD (seconds, default 0): the rounds are spaced evenly over it, so the reads sample the
# whole load under them rather than its first second.
# IDS_FILE: stored event ids of PROVIDER, one a line; the detail reads and the event-id search
# take a different one at every load (cold rows at random places of the history, as finance
# looks events up). SINCE/UNTIL: an RFC 3339 window inside the history for the time filter.
import http.client
import json
import math
import sys
import time
import urllib.parse

host, token, merchant, provider, loads, ids_file, since, until = sys.argv[1:9]
spread = float(sys.argv[9]) if len(sys.argv) > 9 else 0.0
loads = int(loads)
ids = [line.strip() for line in open(ids_file) if line.strip()]
if not ids:
    sys.exit("reads: no event ids to look up")
conn = http.client.HTTPConnection(host, timeout=60)
admin = {"Authorization": f"Bearer {token}"}


def get(path, headers):
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        sys.exit(f"reads: GET {path} answered {response.status}: {body[:300]!r}")
    return body


# A console session, signed in with the admin token as a person would: the sign-in form first
# (its cookie and the csrf field it carries), then the token with them.
conn.request("GET", "/console/login")
form = conn.getresponse()
form_page = form.read().decode()
form_cookie = form.getheader("Set-Cookie", "").split(";")[0]
csrf = form_page.split('name="csrf"', 1)[1].split('value="', 1)[1].split('"', 1)[0]
conn.request("POST", "/console/login",
             body=urllib.parse.urlencode({"token": token, "csrf": csrf}),
             headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": form_cookie})
response = conn.getresponse()
response.read()
cookie = response.getheader("Set-Cookie", "").split(";")[0]
if response.status != 303 or not cookie:
    sys.exit(f"reads: console sign-in answered {response.status}")
console = {"Cookie": cookie}
quote = urllib.parse.quote


def events(query=""):
    return lambda i: (f"/admin/events{query}", admin)


def next_page(i):
    first = json.loads(get("/admin/events", admin))
    cursor = first.get("next_cursor")
    if not cursor:
        sys.exit("reads: the first page has no next page")
    return (f"/admin/events?cursor={quote(cursor)}", admin)


# Each round's three lookups take ids of their own (3i, 3i+1, 3i+2; IDS_FILE holds 3 * LOADS):
# with i, i+1 and i+2, a lookup found the rows the previous round's next lookup had just read
# (the admin detail those of the console's), and only the console's detail measured a cold one.
event_id = lambda i: ids[i % len(ids)]
window = f"?since={quote(since)}&until={quote(until)}"
reads = {
    "admin_events": events(),
    "admin_events_next_page": next_page,
    "admin_events_merchant": events(f"?merchant_id={merchant}"),
    "admin_events_provider": events(f"?provider={provider}"),
    "admin_events_outcome_applied": events("?outcome=applied"),
    "admin_events_outcome_held": events("?outcome=held"),
    "admin_events_type": events("?type=payment.succeeded"),
    "admin_events_window": events(window),
    "admin_events_event_id": lambda i: (f"/admin/events?event_id={quote(event_id(3 * i))}", admin),
    "admin_event_detail": lambda i: (f"/admin/events/{provider}/{quote(event_id(3 * i + 1))}", admin),
    "admin_attention": lambda i: ("/admin/attention", admin),
    "admin_balances": lambda i: (f"/admin/merchants/{merchant}/balances", admin),
    "console_events": lambda i: ("/console/events", console),
    "console_events_filtered": lambda i: (f"/console/events?merchant_id={merchant}&type=payment.succeeded", console),
    "console_event_detail": lambda i: (f"/console/events/{provider}/{quote(event_id(3 * i + 2))}", console),
    "console_attention": lambda i: ("/console/attention", console),
    # The balances page also draws the per-minute chart of the last hour.
    "console_balances_and_chart": lambda i: ("/console/balances", console),
}

samples = {name: [] for name in reads}
size = {name: 0 for name in reads}
started = time.perf_counter()
for i in range(loads):
    for name, read in reads.items():
        path, headers = read(i)
        t = time.perf_counter()
        body = get(path, headers)
        samples[name].append((time.perf_counter() - t) * 1000)
        size[name] = len(body)
    pause = started + (i + 1) * spread / loads - time.perf_counter()
    if pause > 0:
        time.sleep(pause)


def rank(values, q):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


print(json.dumps({
    "reads": {name: {"p50_ms": round(rank(v, 0.5), 2), "p99_ms": round(rank(v, 0.99), 2),
                     "max_ms": round(max(v), 2), "n": len(v), "bytes": size[name]}
              for name, v in samples.items()},
    "seconds": round(time.perf_counter() - started, 1),
}))

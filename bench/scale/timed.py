# Runs a command, counts the lines it writes to stdout (without keeping them) and prints
# {"lines", "seconds", "rss_mib", "code", "head", "tail"} as JSON: its wall time, its peak RSS
# (the child's maxrss), its exit code (0 or 1; anything else stops the run), and the first
# 2,000 bytes and the last line of its stdout (a reconcile's summary, an export's last event).
#
#   python3 bench/scale/timed.py COMMAND [ARGS...]
import json
import resource
import subprocess
import sys
import time

started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
lines, head, tail = 0, b"", b""
while chunk := child.stdout.read(1 << 20):
    lines += chunk.count(b"\n")
    head = head or chunk[:2000]
    tail = (tail + chunk)[-65536:]
stderr = child.stderr.read()
code = child.wait()
seconds = time.perf_counter() - started
if code not in (0, 1):
    sys.exit(f"timed: {sys.argv[1:]} exited {code}: {stderr.decode(errors='replace')[-2000:]}")
print(json.dumps({
    "lines": lines, "seconds": round(seconds, 2),
    "rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    "code": code, "head": head.decode(errors="replace"), "tail": tail.decode(errors="replace").rstrip("\n").rsplit("\n", 1)[-1][:300],
}))

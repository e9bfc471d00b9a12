#!/usr/bin/env python3
"""CPU time of a process tree, in microseconds, for scripts/bench.

  cpu_ticks.py postgres PID   the PostgreSQL server: the postmaster's own CPU, the CPU of the
                              children it has reaped (cutime + cstime: backends that exited,
                              pgbench's connections among them) and of its live children
                              (backends, autovacuum, checkpointer, WAL writer...). Every server
                              process is the postmaster's child, so a difference of two readings
                              is all the CPU the server spent between them.
  cpu_ticks.py process PID    one process (the gateway: its threads are counted in its own
                              utime + stime).

Reads /proc; clock ticks are 10 ms on most kernels, so measure phases of seconds.
"""
import os
import sys

TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17.
    return int(fields[1]), [int(x) for x in fields[11:15]]


def main():
    kind, pid = sys.argv[1], int(sys.argv[2])
    _, (utime, stime, cutime, cstime) = stat(pid)
    if kind == "process":
        print(int((utime + stime) * TICK_US))
        return
    total = utime + stime + cutime + cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid, (cu, cs, _, _) = stat(entry)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # exited while we looked: its time is in the postmaster's cutime now
        if ppid == pid:
            total += cu + cs
    print(int(total * TICK_US))


if __name__ == "__main__":
    main()

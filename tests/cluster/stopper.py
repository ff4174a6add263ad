"""Stops the named processes of one network namespace for STOP_MS every
PERIOD_MS (SIGSTOP, then SIGCONT), until killed; prints the longest stop.

    stopper.py NAMESPACE PROGRAM STOP_MS PERIOD_MS

One process that never forks while it stops others: a shell loop spawns
`sleep` and `kill` for every stop, whose start on a busy machine can stretch
a stop far beyond STOP_MS.
"""

import os
import signal
import subprocess
import sys
import time


def pids(namespace, program):
    out = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True
    ).stdout.split()
    found = []
    for pid in out:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == program:
                    found.append(int(pid))
        except OSError:
            pass
    return found


def main():
    namespace, program = sys.argv[1], sys.argv[2]
    stop, period = float(sys.argv[3]) / 1000, float(sys.argv[4]) / 1000
    longest = 0.0

    def report(*_):
        print(f"stopper: longest stop {longest * 1000:.1f} ms", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, report)
    targets = []
    while not targets:
        time.sleep(period)
        targets = pids(namespace, program)
    while True:
        time.sleep(period - stop)
        began = time.monotonic()
        for pid in targets:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                report()
        time.sleep(stop)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        longest = max(longest, time.monotonic() - began)


main()

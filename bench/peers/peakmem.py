"""Runs a command and reports its wall time and memory as JSON on stderr's last
line: CPU seconds, the kernel's peak RSS (ru_maxrss of the process and its waited-for
children) and, sampled every 50 ms over the whole process tree, the peak of
anonymous memory (RssAnon). The split matters for mmap readers such as selq:
pages of a mapped input file count in RSS but are page cache the kernel can
drop, while anonymous memory is what the tool itself holds.

  peakmem.py [--timeout S] -- CMD ARGS...
"""
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def anon_kb(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def main():
    args = sys.argv[1:]
    timeout = None
    if args[:1] == ["--timeout"]:
        timeout, args = float(args[1]), args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    t0 = time.monotonic()
    proc = subprocess.Popen(args, start_new_session=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], anon_kb(tree(proc.pid)))
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wall = time.monotonic() - t0
    done.set(); th.join()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc = 124 if timed_out else proc.returncode
    # CPU seconds are reported too: on a shared, loaded machine they are the
    # steadier measure of work per byte (bench/peers/project.py uses them).
    print(json.dumps({"wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                      "peak_rss_kb": ru.ru_maxrss, "peak_anon_kb": peak[0], "rc": rc}),
          file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())

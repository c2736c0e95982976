#!/usr/bin/env python3
# thread_sample.py PID SECONDS [INTERVAL_MS]: where a process's threads are, sampled from /proc: for each thread
# name, the share of samples in each state (R running, S sleeping, D disk) and, for R, user space or the system
# call it is in (/proc/TID/syscall: "running" = user space; a number = that syscall, e.g. 16 ioctl, 202 futex).
import collections, os, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
interval = (float(sys.argv[3]) if len(sys.argv) > 3 else 5.0) / 1000
names = {0: "read", 1: "write", 7: "poll", 16: "ioctl", 23: "select", 24: "sched_yield", 35: "nanosleep",
         44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 202: "futex", 228: "clock_gettime",
         230: "clock_nanosleep", 232: "epoll_wait", 281: "epoll_pwait", 7: "poll", 271: "ppoll", 74: "fsync",
         75: "fdatasync", 9: "mmap", 11: "munmap", 10: "mprotect"}
by = collections.defaultdict(collections.Counter)
threads = collections.defaultdict(set)
end = time.time() + seconds
samples = 0
while time.time() < end:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read()
            comm = st[st.index("(") + 1:st.rindex(")")]
            state = st[st.rindex(")") + 2]
            where = state
            if state == "R":
                try:
                    with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                        sc = f.read().split()[0]
                    where = "R:user" if sc == "running" else "R:" + names.get(int(sc), sc) if sc.lstrip("-").isdigit() else "R:" + sc
                except OSError:
                    where = "R:?"
            elif state in "SD":
                try:
                    with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                        sc = f.read().split()[0]
                    where = state + ":" + (names.get(int(sc), sc) if sc.lstrip("-").isdigit() else sc)
                except OSError:
                    pass
            by[comm][where] += 1
            threads[comm].add(tid)
        except (OSError, ValueError):
            pass
    samples += 1
    time.sleep(interval)
print(f"{samples} samples over {seconds} s")
for comm, c in sorted(by.items(), key=lambda kv: -sum(v for k, v in kv[1].items() if k.startswith("R"))):
    running = sum(v for k, v in c.items() if k.startswith("R")) / samples
    top = ", ".join(f"{k} {v / samples:.2f}" for k, v in c.most_common(6))
    print(f"{comm:16s} threads {len(threads[comm]):3d}  running {running:5.2f}  | {top}")

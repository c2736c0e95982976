#!/usr/bin/env python3
"""profile_by_op.py LOG...: the per-layer times `sluiced model --profile` printed ("  name (Op)  1.234 ms"),
summed per op: count, total ms and share, largest first; one table per log."""
import collections
import re
import sys

LINE = re.compile(r"^\s+(\S.*) \((\w+)\)\s+([\d.]+) ms$")
for path in sys.argv[1:]:
    total, count = collections.Counter(), collections.Counter()
    with open(path) as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                total[m.group(2)] += float(m.group(3))
                count[m.group(2)] += 1
    whole = sum(total.values()) or 1.0
    print("%s: %.1f ms in %d layers" % (path, whole, sum(count.values())))
    for op, ms in total.most_common():
        print("  %-20s %4d layers %9.2f ms %5.1f%%" % (op, count[op], ms, 100.0 * ms / whole))

"""Medians over repeats of interleave_checkouts.sh's output: per checkout and guide, the package's ms per step
and its ratio to the handwritten step of the same run.

    bash bench/interleave_checkouts.sh BEFORE AFTER 4 --configs reference --rounds 7 > log
    python bench/summarize_interleaved.py log
"""
import collections
import re
import statistics
import sys

rows, checkout = collections.defaultdict(list), None
for line in open(sys.argv[1]):
    header = re.match(r"## (\w+)", line)
    if header:
        checkout = header.group(1)
    row = re.match(r"\| (\w+) \| (\S+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
    if row:
        config, guide, handwritten, _, package = row.groups()
        rows[(config, guide, checkout)].append((float(handwritten), float(package)))
print("| config | guide | checkout | repeats | package ms (median) | package / handwritten (median) |")
print("|---|---|---|---|---|---|")
for (config, guide, checkout), times in rows.items():
    print("| %s | %s | %s | %d | %.2f | %.3f |" % (config, guide, checkout, len(times),
                                                 statistics.median(p for _, p in times),
                                                 statistics.median(p / h for h, p in times)))

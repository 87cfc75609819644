#!/usr/bin/env python3
"""What durable writes cost on this machine's disk (docs/benchmarks/durability.md).

Medians and 90th percentiles of 1000 runs of each primitive on a 2.4 MB file
under DIR (default: the current directory; use the disk the file buffer is on):

    python3 benches/disk-sync-costs.py [DIR]
"""
import mmap
import os
import sys
import tempfile
import time

SIZE = 24576  # one 200-event frame of 100-byte events, rounded to 4 KiB
SLOTS = 100


def timed(step, n=1000):
    lat = []
    for i in range(n):
        t = time.perf_counter()
        step(i)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return round(lat[n // 2] * 1e6), round(lat[int(n * 0.9)] * 1e6)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    fd, path = tempfile.mkstemp(dir=d, prefix="disk-sync-costs-")
    try:
        buf = b"x" * SIZE
        for i in range(SLOTS):  # written blocks: later writes overwrite, as chunk slots do
            os.pwrite(fd, buf, i * SIZE)
        os.fsync(fd)
        at = lambda i: (i % SLOTS) * SIZE
        rows = [
            ("fdatasync with nothing dirty", lambda i: os.fdatasync(fd)),
            ("24 KiB overwrite + fdatasync", lambda i: (os.pwrite(fd, buf, at(i)), os.fdatasync(fd))),
            ("24 KiB overwrite, no sync", lambda i: os.pwrite(fd, buf, at(i))),
        ]
        direct = os.open(path, os.O_RDWR | os.O_DIRECT)
        aligned = mmap.mmap(-1, SIZE)  # O_DIRECT needs an aligned buffer
        aligned.write(buf)
        rows += [
            ("24 KiB O_DIRECT overwrite + fdatasync",
             lambda i: (os.pwritev(direct, [aligned], at(i)), os.fdatasync(direct))),
            ("24 KiB O_DIRECT overwrite with RWF_DSYNC",
             lambda i: os.pwritev(direct, [aligned], at(i), os.RWF_DSYNC)),
        ]
        print("| operation | median µs | p90 µs |\n| --- | --- | --- |")
        for name, step in rows:
            med, p90 = timed(step)
            print(f"| {name} | {med} | {p90} |")
        os.close(direct)
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()

"""Diagnostic: where a host background's upload to the GPU goes (``kernels.device.upload_slabs``, the build's upload),
split into its parts, each timed alone on the same rows (synthetic standard-normal float32, said so; WOODELF's README
background shape by default):

- ``upload_slabs``: the whole upload as the build runs it (two pinned slabs, host threads filling one while the
  other is copied);
- ``host_copy``: only the host side, every slab's rows copied into one pinned slab by the host threads
  (``device.host_copy``), and the same with one ``np.copyto``;
- ``dma``: only the copies from one pinned slab to the device, queued back to back;
- ``pinned_alloc``: allocating the two pinned slabs;
- ``cupy_asarray``: CuPy's own copy of the whole array (for comparison).

Each part runs ``--rounds`` times after a device synchronisation and ends with one; the seconds of each round are
printed as JSON, with the bandwidth of the median in GB/s.

python3 integration/_diag_upload_gpu.py [--bg 5000000] [--features 127] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np


def main() -> None:
    import cupy as cp

    from hitml.kernels import device

    ap = argparse.ArgumentParser()
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cp.zeros(1).sum()
    cp.cuda.Device().synchronize()              # the CUDA context and CuPy's first kernel, outside every timing
    x = np.random.default_rng(0).standard_normal((a.bg, a.features), dtype=np.float32)
    row = a.features * 4
    rows = device._SLAB_BYTES // row
    mem = cp.cuda.alloc_pinned_memory(rows * row)
    buf = np.frombuffer(mem, dtype=np.float32, count=rows * a.features).reshape(rows, a.features)
    out = cp.empty(x.shape, np.float32)
    stream = cp.cuda.get_current_stream()

    def slabs():
        return ((s, min(len(x), s + rows)) for s in range(0, len(x), rows))

    def host_threads():
        for s, e in slabs():
            device.host_copy(buf[:e - s], x[s:e])

    def host_one():
        for s, e in slabs():
            np.copyto(buf[:e - s], x[s:e])

    def dma():
        for s, e in slabs():
            out[s:e].data.copy_from_host_async(buf.ctypes.data, (e - s) * row, stream)

    parts = {
        "upload_slabs": lambda: device.upload_slabs(x, np.float32),
        "host_copy": host_threads,
        "host_copy_one_thread": host_one,
        "dma": dma,
        "pinned_alloc": lambda: [cp.cuda.alloc_pinned_memory(rows * row) for _ in range(2)],
        "cupy_asarray": lambda: cp.asarray(x),
    }
    report = {"device": device.device_name(), "cpu_count": os.cpu_count(), "host_threads": device._host_pool()[1],
              "bytes": int(x.nbytes), "slab_bytes": rows * row}
    for name, fn in parts.items():
        times = []
        for _ in range(a.rounds):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - t)
        report[name] = {"s": [round(v, 4) for v in times]}
        if name != "pinned_alloc":
            report[name]["GB_per_s"] = round(x.nbytes / statistics.median(times) / 1e9, 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

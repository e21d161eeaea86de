"""Where the row sample's and the cut check's time goes on the device (a diagnostic beside bench_sketch_speed)."""
import sys
import warnings

import cupy as cp
import numpy as np

sys.path.insert(0, "integration")
from bench_sketch_speed import gpu_time, make_data
from hitml.kernels.sketch import gpu as skgpu
from hitml.kernels.sketch.cuts import cut_points
from hitml.kernels.sketch._gpu_moments import sketch_moments

warnings.simplefilter("ignore")
X = make_data(cp, 10_000_000, 50)


def t(f, reps=20):
    """Median milliseconds of f() with the device synchronised around each call."""
    return 1e3 * gpu_time(f, reps, cp)


ab = {True: [], False: []}
for _ in range(5):  # the selected rows sorted on the device (sample_sort) or on the host, alternating
    for dev in (True, False):
        skgpu.DEVICE_SORT = dev
        ab[dev].append(t(lambda: skgpu.sketch(X), reps=10))
skgpu.DEVICE_SORT = True
print(f"sketch n_sample=4096: sorted on the device {np.median(ab[True]):.3f} ms, on the host {np.median(ab[False]):.3f}"
      f" ms (medians of 5 alternating rounds)")
print(f"sketch n_sample=4096 {t(lambda: skgpu.sketch(X)):.3f} ms; n_sample=0 {t(lambda: skgpu.sketch(X, n_sample=0)):.3f}"
      f" ms; sketch_moments {t(lambda: sketch_moments(X)):.3f} ms")
Xp, w, hw = skgpu._prepare_input(X, None, cp)


def sample_only():
    skgpu._queue_sample(cp, Xp, w, hw, 4096)()


print(f"sample alone (queue + wait + host) {t(sample_only):.3f} ms")
sk = skgpu.sketch(X)
s = sk.sample
print(f"cut_points {t(lambda: cut_points(sk, 256, 'maxent')):.2f} ms; sources",
      dict(zip(*np.unique(cut_points(sk, 256, 'maxent').source.astype(str), return_counts=True))))
sk.sample = None
print(f"cut_points without the sample check {t(lambda: cut_points(sk, 256, 'maxent')):.2f} ms")

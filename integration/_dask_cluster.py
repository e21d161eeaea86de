"""Cluster helpers of the Dask benchmark: one GPU per worker, rows generated on the workers, bounded waits."""
from __future__ import annotations

import math
import os
import platform

import numpy as np

def n_gpus() -> int:
    import cupy as cp

    return int(cp.cuda.runtime.getDeviceCount())


def device_name(mode: str) -> str:
    if mode == "gpu":
        import cupy as cp

        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        return f"{n_gpus()} x {name.decode() if isinstance(name, bytes) else name}"
    return f"CPU ({os.cpu_count()} cores) {platform.processor() or platform.machine()}"


# ---------------------------------------------------------------------------------------------------- clusters
def make_cluster(n: int, mode: str, cpu_threads: int = 1):
    """(cluster, how): one worker per GPU, or in CPU mode one worker per ``cpu_threads`` cores (one Dask thread,
    whose Numba kernels run ``cpu_threads`` threads)."""
    import dask

    dask.config.set({"distributed.worker.multiprocessing-method": "spawn"})  # never fork a process that holds CUDA
    if mode == "gpu":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            pass
        else:
            return (LocalCUDACluster(n_workers=n, CUDA_VISIBLE_DEVICES=",".join(map(str, range(n))),
                                     threads_per_worker=1, dashboard_address=None, memory_limit=0),
                    "dask_cuda.LocalCUDACluster")
    from distributed import Nanny, Scheduler, SpecCluster

    threads = str(cpu_threads) if mode == "cpu" else str(max(1, min(8, (os.cpu_count() or 2) // n)))  # host work
    env = {"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "HITML_PROGRESS": "0"}
    workers = {}
    for i in range(n):
        opts = {"nthreads": 1, "silence_logs": 40, "env": dict(env, **({"CUDA_VISIBLE_DEVICES": str(i)} if mode == "gpu" else {}))}
        if mode == "gpu":
            opts["memory_limit"] = 0  # GPU bytes are not host bytes: no spilling or pausing on their account
        workers[i] = {"cls": Nanny, "options": opts}
    cluster = SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}}, workers=workers,
                          silence_logs=40)
    how = ("SpecCluster of Nannies, CUDA_VISIBLE_DEVICES=i per worker, 1 thread, no memory limit" if mode == "gpu"
           else f"SpecCluster of Nannies, {cpu_threads} core{'s' if cpu_threads > 1 else ''} per worker "
                f"(NUMBA_NUM_THREADS={cpu_threads})")
    return cluster, how


def _worker_gpu() -> dict:
    import cupy as cp

    out = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        out["visible_gpus"] = int(cp.cuda.runtime.getDeviceCount())
        out["pci_bus_id"] = cp.cuda.runtime.deviceGetPCIBusId(0)
    except Exception as exc:  # a report, not a requirement
        out["error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def worker_gpus(client) -> dict:
    """What GPU each worker sees; raises if two workers report the same PCI bus id (they would not scale)."""
    seen = client.run(_worker_gpu)
    ids = [v["pci_bus_id"] for v in seen.values() if "pci_bus_id" in v]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"workers share a GPU: {seen}")
    return seen


def worker_addresses(client, n: int) -> list[str]:
    client.wait_for_workers(n, timeout=300)
    return sorted(client.scheduler_info()["workers"])


# ------------------------------------------------------------------------------------------- data on workers
def _gen_block(name: str, n: int, seed: int, real, gpu: bool):
    """One partition of n rows, made on the worker that runs it (on its GPU when gpu)."""
    if gpu:
        import cupy as xp

        rs = xp.random.RandomState(seed)
        if name == "cal_housing":
            return xp.asarray(real)[rs.randint(0, len(real), size=n)]
        num = rs.standard_normal((n, 10), dtype=xp.float32)
        return xp.hstack([num, (rs.random_sample((n, 44), dtype=xp.float32) < 0.1).astype(xp.float32)])
    rng = np.random.default_rng(seed)
    if name == "cal_housing":
        return real[rng.integers(0, len(real), n)]
    return np.hstack([rng.normal(size=(n, 10)), (rng.random((n, 44)) < 0.1)]).astype(np.float32)


def worker_rows(client, addrs: list[str], name: str, n: int, chunk: int, real, gpu: bool, seed: int = 0):
    """A persisted dask.array of n rows: partition i generated on (and held by) worker i mod len(addrs)."""
    M = real.shape[1] if name == "cal_housing" else 54
    real_ref = client.scatter(real, broadcast=True) if real is not None else None
    return worker_blocks(client, addrs, n, chunk, M, gpu, seed,
                         lambda s, sd: (_gen_block, name, s, sd, real_ref, gpu))


def worker_blocks(client, addrs: list[str], n: int, chunk: int, M: int, gpu: bool, seed: int, task):
    """(dask.array of n rows x M, futures): partition i of ``chunk`` rows made by ``task(rows, seed_i)`` (a function
    and its arguments) on worker i mod len(addrs), and held there."""
    import dask.array as da
    from distributed import wait

    sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
    futs = [client.submit(*task(s, seed * 1_000_003 + i), workers=[addrs[i % len(addrs)]], allow_other_workers=False,
                          pure=False) for i, s in enumerate(sizes)]
    wait(futs)
    if gpu:
        import cupy as cp

        meta = cp.empty((0, 0), np.float32)
    else:
        meta = np.empty((0, 0), np.float32)
    X = da.concatenate([da.from_delayed(f, shape=(s, M), dtype=np.float32, meta=meta) for f, s in zip(futs, sizes)])
    return X, futs


def warm_slice(X, n_workers: int, rows: int = 2000):
    """The first ``rows`` rows of each of the first n_workers partitions (one per worker): warm-up input."""
    import dask.array as da

    return da.concatenate([X.blocks[i][:rows] for i in range(min(n_workers, X.numblocks[0]))])


def finite(x) -> bool:
    return bool(np.all(np.isfinite(x.get() if hasattr(x, "get") else np.asarray(x))))


def _timeout(seconds: float) -> float | None:
    return None if math.isinf(seconds) else max(1.0, seconds)


def compute_within(client, collection, timeout: float):
    """client.compute(collection) waited for at most ``timeout`` seconds (cancelled and TimeoutError after)."""
    from distributed import wait

    fut = client.compute(collection)
    try:
        wait(fut, timeout=_timeout(timeout))
    except Exception:
        client.cancel(fut)
        raise
    return fut.result()


def persist_within(client, collection, timeout: float):
    from distributed import futures_of, wait

    x = client.persist(collection)
    try:
        wait(x, timeout=_timeout(timeout))
        for f in futures_of(x):
            if f.status == "error":
                f.result()  # raises the task's exception (wait returns on failed tasks too)
    except Exception:
        client.cancel(futures_of(x))
        raise
    return x


# ------------------------------------------------------------------------------------------------------- parts

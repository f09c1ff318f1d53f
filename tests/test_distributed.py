"""Distributed training with MultiWorkerMirroredStrategy on two worker processes (loopback ports only,
bounded time): two runs give bit-identical weights, and each worker's detconv gradients are bit-identical
to the single-process gradients of the same per-worker batch. (A custom strategy.run loop: Keras 3's fit
fails under this strategy here even with stock layers.)"""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from detconv._loader import child_python_kwargs

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")
N_VARS = 5


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def load(path):
    d = np.load(path)
    return [d[f"arr_{i}"] for i in range(len(d.files))]


def train(tmp_path, tag):
    ports = free_ports(2)
    kw = child_python_kwargs(log_level="3")
    procs = [subprocess.Popen([sys.executable, WORKER, "worker", str(i), str(ports[0]), str(ports[1]),
                               str(tmp_path / f"{tag}{i}.npz")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, **kw) for i in range(2)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [load(tmp_path / f"{tag}{i}.npz") for i in range(2)]


@pytest.mark.timeout(600)
def test_two_worker_training_is_reproducible(tmp_path):
    a, b = train(tmp_path, "a"), train(tmp_path, "b")
    r = subprocess.run([sys.executable, WORKER, "single", str(tmp_path / "single.npz")], capture_output=True,
                       text=True, timeout=240, **child_python_kwargs(log_level="3"))
    assert r.returncode == 0, r.stderr[-3000:]
    single = load(tmp_path / "single.npz")
    for w in range(2):
        weights, grads = a[w][:N_VARS], a[w][N_VARS:]
        assert all(x.tobytes() == y.tobytes() for x, y in zip(weights, b[w][:N_VARS])), "runs differ"
        assert all(x.tobytes() == y.tobytes() for x, y in zip(weights, a[0][:N_VARS])), "workers differ"
        want = single[w * N_VARS:(w + 1) * N_VARS]
        assert all(x.tobytes() == y.tobytes() for x, y in zip(grads, want)), f"worker {w} gradients"

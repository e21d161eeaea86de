"""GPU twins: samplers, kernel matrices, discrepancy and coalition evaluation equal the CPU implementation."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels import shapley as kp
from hitml.kernels.shapley._coalitions import estimate_shapley

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("method", list(kp.METHODS))
@pytest.mark.parametrize("n,d", [(13, 2), (40, 9), (30, 50)])
def test_gpu_sampler_equals_cpu(method, n, d):
    import cupy

    pc, wc = kp.sample(method, n, d, 5, backend="cpu")
    pg, wg = kp.sample(method, n, d, 5, backend="gpu")
    assert isinstance(pg, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(pg), pc)
    np.testing.assert_allclose(cupy.asnumpy(wg), wc, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("kernel", ["mallows", "kendall", "spearman"])
def test_gpu_kernel_matrix_and_discrepancy_equal_cpu(kernel):
    import cupy

    p, w = kp.sample("sbq", 25, 12, 1)
    kc = kp.kernel_matrix(p, None, kernel, 4.0, backend="cpu")
    kg = kp.kernel_matrix(p, None, kernel, 4.0, backend="gpu")
    np.testing.assert_allclose(cupy.asnumpy(kg), kc, rtol=1e-12)
    assert kp.discrepancy(p, w, kernel, 4.0, backend="gpu") == pytest.approx(kp.discrepancy(p, w, kernel, 4.0),
                                                                             rel=1e-9)


@pytest.mark.parametrize("method", ["orthogonal", "owen"])
def test_gpu_coalition_evaluation_equals_cpu(method):
    import cupy

    rng = np.random.default_rng(0)
    X, bg = rng.normal(size=(4, 7)), rng.normal(size=(11, 7))

    def f(Z):  # works on NumPy and CuPy arrays alike
        return Z[:, 0] * Z[:, 1] + Z.max(axis=1) + 0.5 * Z[:, 6] ** 2

    kind = "masks" if method == "owen" else "permutations"
    s, w = kp.sample(method, 9, 7, 2)
    phi_c, base_c = estimate_shapley(f, X, bg, s, w, kind=kind, batch_rows=50)
    phi_g, base_g = estimate_shapley(f, cupy.asarray(X), cupy.asarray(bg), cupy.asarray(s), cupy.asarray(w),
                                     kind=kind, batch_rows=50, xp=cupy)
    np.testing.assert_allclose(cupy.asnumpy(phi_g), phi_c, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cupy.asnumpy(base_g), base_c, rtol=1e-12)


def test_gpu_explainer_equals_cpu_explainer():
    from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 6))

    def f(Z):
        return Z[:, 0] * Z[:, 2] - Z[:, 5] + Z.sum(axis=1) ** 2

    cpu = ShapleyExplainer(f, ShapleySampler("sobol", random_state=0, backend="cpu"), max_evals=70).fit(X[:20])
    gpu = ShapleyExplainer(f, ShapleySampler("sobol", random_state=0, backend="gpu"), max_evals=70,
                           model_input="device").fit(X[:20])
    np.testing.assert_allclose(gpu.transform(X[30:40]), cpu.transform(X[30:40]), rtol=1e-10, atol=1e-12)
    host = ShapleyExplainer(f, ShapleySampler("sobol", random_state=0, backend="gpu"), max_evals=70,
                            model_input="numpy").fit(X[:20])
    np.testing.assert_allclose(host.transform(X[30:40]), cpu.transform(X[30:40]), rtol=1e-10, atol=1e-12)

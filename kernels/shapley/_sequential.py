"""The stopping rule: spend evaluations until every Shapley value's 95% interval is narrower than ``tol``."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ._regression import RegressionPlan

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def _stage_seed(seed, stage: int):
    if seed is None:
        return None
    base = [int(seed)] if np.isscalar(seed) else [int(s) for s in seed]
    return base + [stage]


def interval_width(se: np.ndarray) -> np.ndarray:
    """Width of each value's 95% interval, 2 * 1.96 * se, largest over features and outputs, per row (m,).

    Parameters
    ----------
    se : ndarray of shape (m, d) or (m, d, k)
        Standard errors; NaN counts as an interval of infinite width.

    Returns
    -------
    ndarray of shape (m,)

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import interval_width
    >>> interval_width(np.array([[0.0, 0.5], [np.nan, 0.1]])).round(2).tolist()
    [1.96, inf]
    """
    w = 2.0 * Z95 * np.asarray(se, dtype=np.float64)
    w = np.where(np.isnan(w), np.inf, w)
    return w.reshape(w.shape[0], -1).max(axis=1) if w.size else np.zeros(w.shape[0])


def shapley_until(values: Callable[[np.ndarray, np.ndarray], np.ndarray], d: int, m: int, *, tol: float,
                  max_evals: int, seed=None, start: int | None = None, on_stage: Callable | None = None,
                  noise: str = "auto"):
    """(Shapley values (m, d, k), standard errors (m, d, k), evaluations spent per row (m,)).

    ``values(coalitions (C, d) bool, rows (r,) int)`` returns v(S) (r, C, k) for the listed rows. The first stage
    evaluates ``start`` coalitions per row (default 10 (d + 1), at most ``max_evals``); while a row's widest 95%
    interval (2 * 1.96 * se) is wider than ``tol`` and the design has fewer than ``max_evals`` coalitions, the design
    grows to twice its size keeping every coalition evaluated so far (``RegressionPlan.extend``), and only the rows
    not yet done are evaluated on the new coalitions. ``on_stage(rows_done)`` is called after each stage.

    Examples
    --------
    An additive game is fitted exactly, with zero standard errors, in the first stage:

    >>> import numpy as np
    >>> from hitml.kernels.shapley import shapley_until
    >>> w = np.array([1.0, -2.0, 0.5, 3.0])
    >>> game = lambda S, rows: (S.astype(float) @ w)[None, :, None].repeat(len(rows), axis=0)
    >>> phi, se, spent = shapley_until(game, d=4, m=1, tol=1e-3, max_evals=16, seed=0, noise="none")
    >>> bool(np.allclose(phi[0, :, 0], w)), float(se.max()) < 1e-6
    (True, True)
    """
    if not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    cap = min(int(max_evals), 2 ** d) if d < 63 else int(max_evals)
    budget = min(cap, int(start) if start is not None else 10 * (d + 1))
    plan = RegressionPlan(d, budget, _stage_seed(seed, 0), noise=noise)
    rows = np.arange(m)
    known = values(plan.coalitions, rows)
    # noise="auto": the first stage's repeated coalitions tell which rows are noisy, for every later stage too
    noisy = plan.noisy_rows(known)
    if noisy is None:
        noisy = np.full(m, noise == "auto")
    first = plan.apply_se(known, noisy)
    repeated = plan.evaluations - plan.n_main  # spent in the first stage on top of every later design
    main = known[:, :plan.n_main].copy()
    if repeated:  # a noisy row keeps the mean of its repeated evaluations, as apply_se does in the first stage
        again = (known[:, plan.replicates] + known[:, plan.n_main:]) / 2.0
        main[:, plan.replicates] = np.where(noisy[:, None, None], again, main[:, plan.replicates])
    known = main
    keys = {np.packbits(c).tobytes(): j for j, c in enumerate(plan.coalitions[:plan.n_main])}
    k = known.shape[2]
    phi = np.full((m, d, k), np.nan)
    se = np.full((m, d, k), np.nan)
    spent = np.zeros(m, dtype=np.int64)
    active = rows
    stage = 0
    while True:
        if stage == 0:
            est, err = first
        else:
            index = np.array([keys[np.packbits(c).tobytes()] for c in plan.coalitions])
            est, err = plan.apply_se(known[active][:, index], noisy[active])
        phi[active], se[active] = est, err
        spent[active] = plan.evaluations + (repeated if stage else 0)
        done = interval_width(err) <= tol
        if on_stage is not None:
            on_stage(int(m - active.size + done.sum()))
        active = active[~done]
        if active.size == 0 or plan.evaluations >= cap:
            break
        stage += 1
        grown = plan.extend(min(cap, 2 * plan.evaluations), _stage_seed(seed, stage))
        new = [c for c in grown.coalitions if np.packbits(c).tobytes() not in keys]
        if not new:
            break
        new = np.array(new, dtype=bool)
        fresh = np.full((m, len(new), k), np.nan)
        fresh[active] = values(new, active)
        for c in new:
            keys[np.packbits(c).tobytes()] = len(keys)
        known = np.concatenate([known, fresh], axis=1)
        plan = grown
    return phi, se, spent

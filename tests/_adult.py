"""The adult data (data/adult.csv.gz, a copy of ../shared/data) as a LightGBM classifier's input: categorical
columns as integer codes, and a model that splits on three of them (tests of categorical splits on real data)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

CATEGORICAL = ["workclass", "occupation", "native-country"]


def adult_codes(nrows: int = 3000):
    """(X, y): the first ``nrows`` rows of adult, non-numeric columns as int32 category codes, y = income > 50K."""
    import pandas as pd
    df = pd.read_csv(Path(__file__).resolve().parents[1] / "data" / "adult.csv.gz", skipinitialspace=True,
                     nrows=nrows)
    y = (df.pop("income").astype(str).str.strip() != "<=50K").to_numpy()
    for c in df.columns:
        if not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].astype("category").cat.codes.astype(np.int32)
    return df, y


def adult_lightgbm(n_estimators: int = 40, num_leaves: int = 31, **kw):
    """(fitted LGBMClassifier with CATEGORICAL as categorical features, X): LightGBM single-threaded."""
    import lightgbm as lgb
    X, y = adult_codes()
    model = lgb.LGBMClassifier(n_estimators=n_estimators, num_leaves=num_leaves, verbose=-1, n_jobs=1, **kw)
    model.fit(X, y, categorical_feature=CATEGORICAL)
    return model, X


def categorical_case(n_rows: int = 120):
    """(model, X, rows): adult_lightgbm with 63 leaves (some trees split on a category, some do not) and its first
    ``n_rows`` rows as float64 with NaN in every 7th row's first column."""
    model, X = adult_lightgbm(n_estimators=40, num_leaves=63, min_child_samples=5)
    rows = X.iloc[:n_rows].astype(np.float64)
    rows.iloc[::7, 0] = np.nan
    return model, X, rows

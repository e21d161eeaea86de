"""Run shap's own ``tests/explainers/test_tree.py`` with every ``shap.TreeExplainer`` computed by hitml.

    python integration/shap_tree_suite.py --shap-tests /path/to/shap/tests [--backend cpu|gpu|none] [pytest args...]

``--shap-tests`` is the ``tests`` folder of a shap source checkout of the installed shap's version (its
``conftest.py`` files are used as they are). ``--backend none`` runs the suite on plain shap, the baseline. The
datasets shap downloads (``adult``, ``california``) are built offline from ``--data`` (a folder holding
``adult.csv.gz`` and ``cal_housing.csv.gz``, the original files; see that folder's README), in the formats shap's and
scikit-learn's downloaders produce; tests needing other downloads (``shap.datasets.rank``) fail as they would
offline. Prints pytest's summary; the exit status is pytest's.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile

import numpy as np
import pandas as pd


class OfflineData:
    """pytest plugin: ``shap.datasets.cache`` and ``sklearn.datasets.fetch_california_housing`` read local files."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.tmp = tempfile.mkdtemp(prefix="shap_suite_")

    def _adult(self) -> str:
        path = os.path.join(self.tmp, "adult.data")
        if not os.path.exists(path):
            rows = pd.read_csv(os.path.join(self.data_dir, "adult.csv.gz"), dtype=str, keep_default_na=False)
            with open(path, "w", encoding="ascii") as fh:  # the original file: ", "-separated, no header
                for rec in rows.itertuples(index=False):
                    fh.write(", ".join(rec) + "\n")
        return path

    def _california(self, *args, **kwargs):
        from sklearn.utils import Bunch

        with gzip.open(os.path.join(self.data_dir, "cal_housing.csv.gz"), "rt") as fh:
            raw = pd.read_csv(fh)
        hh = raw["households"].to_numpy()
        cols = {
            "MedInc": raw["median_income"], "HouseAge": raw["housing_median_age"],
            "AveRooms": raw["total_rooms"] / hh, "AveBedrms": raw["total_bedrooms"] / hh,
            "Population": raw["population"], "AveOccup": raw["population"] / hh,
            "Latitude": raw["latitude"], "Longitude": raw["longitude"],
        }
        data = np.column_stack([np.asarray(v, dtype=np.float64) for v in cols.values()])
        target = raw["median_house_value"].to_numpy(dtype=np.float64) / 100000.0
        names = list(cols)
        if kwargs.get("as_frame"):
            frame = pd.DataFrame(data, columns=names)
            return Bunch(data=frame, target=pd.Series(target, name="MedHouseVal"), feature_names=names)
        if kwargs.get("return_X_y"):
            return data, target
        return Bunch(data=data, target=target, feature_names=names, target_names=["MedHouseVal"])

    def pytest_configure(self, config) -> None:
        import shap
        import sklearn.datasets

        original = shap.datasets.cache

        def cache(url: str, file_name: str | None = None) -> str:
            if (file_name or os.path.basename(url)) == "adult.data":
                return self._adult()
            return original(url, file_name)

        shap.datasets.cache = cache
        sklearn.datasets.fetch_california_housing = self._california
        config.addinivalue_line("markers", "xslow: shap's marker for very slow tests")


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shap-tests", required=True, help="the tests/ folder of a shap source checkout")
    parser.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto", "none"])
    parser.add_argument("--data", default=os.environ.get("HITML_DATA", os.path.join(here, "..", "data")),
                        help="folder with adult.csv.gz and cal_housing.csv.gz")
    args, rest = parser.parse_known_args(argv)
    import pytest

    if args.backend != "none":
        from hitml import shap_ext

        shap_ext.enable(args.backend)
    target = os.path.join(args.shap_tests, "explainers", "test_tree.py")
    # shap's CI leaves out its "xslow" tests (test_overflow_tree_path_dependent builds a 17.6 GB matrix)
    return int(pytest.main(["-p", "no:cacheprovider", "--rootdir", os.path.dirname(args.shap_tests),
                            "-q", "-rfE", "-m", "not xslow", target, *rest], plugins=[OfflineData(args.data)]))


if __name__ == "__main__":
    sys.exit(main())

"""Progress bars for long work (tqdm), switched off with progress=False or HITML_PROGRESS=0."""
from __future__ import annotations

import os
from contextlib import contextmanager

from tqdm.auto import tqdm


def progress_enabled(progress: bool | None) -> bool:
    """None means: on unless the HITML_PROGRESS environment variable is "0"."""
    if progress is None:
        return os.environ.get("HITML_PROGRESS", "1") != "0"
    return bool(progress)


@contextmanager
def progress_bar(total: int, desc: str, progress: bool | None = None, unit: str = "rows", min_total: int = 0):
    """A tqdm bar for ``total`` units, disabled when progress is off or total < min_total."""
    bar = tqdm(total=total, desc=desc, unit=unit, disable=not progress_enabled(progress) or total < min_total,
               leave=False)
    try:
        yield bar
    finally:
        bar.close()

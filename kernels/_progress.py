"""Progress bars for long work (tqdm), switched off with progress=False or HITML_PROGRESS=0."""
from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
from tqdm.auto import tqdm


def check_progress(progress, name: str = "progress") -> bool | None:
    """``progress`` as True, False or None; anything else (a string, a number, a tqdm class) raises TypeError, so a
    misspelt setting is not silently read as on or off."""
    if progress is None or isinstance(progress, bool):
        return progress
    if isinstance(progress, np.bool_):
        return bool(progress)
    raise TypeError(f"{name} must be True, False or None (None: on for long runs unless HITML_PROGRESS=0), got "
                    f"{progress!r} of type {type(progress).__name__}")


def progress_enabled(progress: bool | None) -> bool:
    """None means: on unless the HITML_PROGRESS environment variable is "0"."""
    progress = check_progress(progress)
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

"""The base of the engines' option objects (``GpuOptions``, ``CpuOptions``, ``GpuSketchOptions``): typed fields whose
every assignment is checked, so a misspelt name or a value outside the allowed ones raises instead of being ignored."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import numpy as np


class Options:
    """Checks each assignment to a dataclass subclass's fields.

    ``choices`` maps a field to its allowed values (ValueError naming them otherwise); ``flags`` are the fields that
    take True or False only (TypeError otherwise); ``check(name, value)`` checks the rest and may return the value to
    store (a normalised one). An unknown name raises AttributeError listing the options. Mutable subclasses are
    checked on every assignment, frozen ones (hashable: usable as a cache key) once, when made.
    """

    choices: ClassVar[dict[str, tuple]] = {}
    flags: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @functools.cache
    def option_names(cls) -> tuple[str, ...]:
        """The options (the dataclass fields, without the class-level ``choices`` and ``flags``)."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def _checked(self, name: str, value: Any) -> Any:
        fields = self.option_names()
        if name not in fields:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}; options: {', '.join(fields)}")
        if name in self.choices and value not in self.choices[name]:
            raise ValueError(f"options.{name} must be one of {self.choices[name]}, got {value!r}")
        if name in self.flags and not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"options.{name} must be True or False, got {value!r}")
        return self.check(name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, self._checked(name, value))

    def __post_init__(self) -> None:
        # a frozen subclass's __init__ bypasses __setattr__: its fields are checked here
        for name in self.option_names():
            object.__setattr__(self, name, self._checked(name, getattr(self, name)))

    def check(self, name: str, value: Any) -> Any:
        """The value to store for ``name`` (subclasses raise ValueError for a bad one); this base keeps it."""
        return value

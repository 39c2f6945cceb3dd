"""Backends by name: where nodes run. `local` (network namespaces) is the default."""
from __future__ import annotations

from .base import Backend, LinkEnds, RunContext
from .local import LocalBackend

BACKENDS: dict[str, type[Backend]] = {"local": LocalBackend}


def get_backend(name: str) -> type[Backend]:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; available here: {', '.join(BACKENDS)}") from None


__all__ = ["BACKENDS", "get_backend", "Backend", "LinkEnds", "RunContext"]

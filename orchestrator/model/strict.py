"""The base of every scenario model: an unknown field is an error (a typo must not pass silently)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

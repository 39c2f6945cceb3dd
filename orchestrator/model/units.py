"""Human units in scenarios: durations (`100ms`), bandwidths (`50mbit`), sizes (`2MiB`), rates (`2/s`).

Each parser accepts a plain number too (seconds, bit/s, bytes, events/s) and raises ValueError with a
message that says what was expected, so pydantic reports it against the field that held the value.
"""
from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
# Bandwidth is in bits per second, decimal prefixes, as tc writes it ("50mbit").
_BANDWIDTH_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit/s": 1, "kbit/s": 1e3,
                    "mbit/s": 1e6, "gbit/s": 1e9, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9}
_SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = re.fullmatch(_NUMBER + r"\s*([a-zA-Zµ/]*)", text.strip())
    if not m:
        raise ValueError(f"cannot read {text!r} as a {what} (write it like {example})")
    return _finite(float(m.group(1)), what, text), m.group(2)


def _finite(number: float, what: str, value: object) -> float:
    if not math.isfinite(number):
        raise ValueError(f"a {what} must be a finite number, got {value!r}")
    return number


def _text_or_number(value: object, what: str, example: str) -> str | float:
    """The value as a number (returned as float) or as text; anything else is an error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"a {what} must be a number or a string like {example}")
    if isinstance(value, str):
        return value
    try:
        return _finite(float(value), what, value)
    except OverflowError:  # an int beyond any float
        raise ValueError(f"a {what} must be a finite number, got a {len(str(value))}-digit one") from None


def parse_duration(value: object) -> float:
    """Seconds from `250ms`, `30s`, `2m`, `1h` or a number of seconds."""
    given = value
    value = _text_or_number(value, "duration (seconds)", "'30s'")
    if not isinstance(value, float):
        number, unit = _split(value, "duration", "'100ms', '30s' or '2m'")
        value = _scaled(number, unit, value, _DURATION_UNITS, "time", "ns, us, ms, s, m or h")
    if abs(value) > MAX_SECONDS:  # planning walks a run's time: a century of it never ends
        raise ValueError(f"{given!r} is more than {MAX_SECONDS / 86400:g} days; durations are at most {MAX_SECONDS:g} s")
    return value


MAX_SECONDS = 1e7  # 115 days: far beyond any emulated or simulated run


def _scaled(number: float, unit: str, value: object, units: dict[str, float], what: str, known: str) -> float:
    """`number` in `unit` from the table `units` (no unit: as it is); an unknown unit names the known."""
    if unit == "":
        return number
    if unit not in units:
        raise ValueError(f"unknown {what} unit {unit!r} in {value!r} (use {known})")
    return _finite(number * units[unit], what, value)


def parse_bandwidth(value: object) -> int:
    """Bits per second from `50mbit`, `1gbit`, `800kbit` or a number of bit/s."""
    value = _text_or_number(value, "bandwidth (bit/s)", "'50mbit'")
    if isinstance(value, float):
        return int(value)
    number, unit = _split(value, "bandwidth", "'50mbit' or '1gbit'")
    key = unit.lower()
    if key in ("bps", "kbps", "mbps", "gbps"):
        # tc reads "mbps" as megaBYTES per second while most people mean megabits: refuse to guess.
        raise ValueError(f"{value!r} is ambiguous (tc reads 'mbps' as megabytes/s); "
                         f"write '{number:g}mbit' for megabits per second")
    return int(_scaled(number, key, value, _BANDWIDTH_UNITS, "bandwidth", "bit, kbit, mbit or gbit"))


def parse_size(value: object) -> int:
    """Bytes from `1KiB`, `2MiB`, `1500B`, `1kB` or a number of bytes."""
    value = _text_or_number(value, "size (bytes)", "'1KiB'")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"a size in bytes must be whole, got {value}")
        return int(value)
    number, unit = _split(value, "size", "'1KiB', '2MiB' or '1500B'")
    return int(_scaled(number, unit.lower(), value, _SIZE_UNITS, "size", "B, KiB, MiB, GiB, kB, MB or GB"))


def parse_rate(value: object) -> float:
    """Events per second from `2/s`, `120/m`, `0.5/s` or a plain number (per second)."""
    value = _text_or_number(value, "rate (per second)", "'2/s'")
    if isinstance(value, float):
        return value
    m = re.fullmatch(_NUMBER + r"\s*/\s*([a-z]+)", value.strip())
    if not m:
        raise ValueError(f"cannot read {value!r} as a rate (write it like '2/s' or '120/m')")
    per = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(m.group(2))
    if per is None:
        raise ValueError(f"unknown rate unit in {value!r} (use /s, /m or /h)")
    return float(m.group(1)) / per


def format_duration(seconds: float) -> str:
    if seconds != 0 and abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def format_bandwidth(bps: int) -> str:
    for unit, factor in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= factor and bps % factor == 0:
            return f"{bps // int(factor)}{unit}"
    return f"{bps}bit"


# Annotated types for pydantic models: parse on input, keep the number in the model and in JSON.
Duration = Annotated[float, BeforeValidator(parse_duration)]
Bandwidth = Annotated[int, BeforeValidator(parse_bandwidth)]
Size = Annotated[int, BeforeValidator(parse_size)]
Rate = Annotated[float, BeforeValidator(parse_rate)]
__all__ = ["Duration", "Bandwidth", "Size", "Rate", "parse_duration", "parse_bandwidth", "parse_size",
           "parse_rate", "format_duration", "format_bandwidth"]

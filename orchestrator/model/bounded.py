"""Bounded input: every scenario and data file peerlab reads, and every YAML text it parses, held
within limits a hostile file cannot push past; and the text of a refusal, made safe to print.

Scenarios arrive in pull requests and CI runs them as root (orchestrator/model/data_files.py says where
data files may lie). What this module owns, and every reader uses:

- files (`read_regular`): only a regular file is opened (no FIFO, device, socket, directory, nor a
  file of /proc or /sys, whose sizes lie), and at most `limit` bytes are read; a larger file is
  refused, naming the limit. Scenario files: at most MAX_SCENARIO_BYTES; data files: their own limit.
- YAML (`load_yaml`): libyaml's parser where it is installed (the pure-Python one otherwise), composed
  here so that it can refuse, naming the field: a key given twice in one mapping (the last would win
  silently), nesting deeper than MAX_DEPTH, a whole number of more than MAX_INT_DIGITS digits, aliases
  that expand the document past MAX_VALUES values (a "billion laughs"), and an alias to a value that
  contains it. Every refusal is a `YamlRefused` (a ValueError) of one line.
- text (`shown`, `refusal_lines`): control characters escaped (a terminal escape sequence in a key
  does not reach the terminal), long values cut with '…', credentials in a URL masked, and at most
  MAX_PROBLEMS lines per refusal.
"""
from __future__ import annotations

import os
import re
import stat
from typing import Any, Callable

from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingEndEvent, ScalarEvent, SequenceEndEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_SCENARIO_BYTES = 4 * 2**20
MAX_DEPTH = 64             # levels of nested mappings and lists
MAX_INT_DIGITS = 40        # a whole number's characters (a 128-bit number has 39 digits)
MAX_VALUES = 1_000_000     # values of a document with every alias expanded
MAX_PROBLEMS = 8           # lines of one refusal, beside its header and a "... more" line
VALUE_WIDTH = 80           # a value quoted in a refusal
MESSAGE_VALUE_WIDTH = 200  # a value a check's message repeats (a data file's path is often longer than 80)
LINE_WIDTH = 1000          # one line of a refusal (the longest a check writes, dilation's, has 800)
PSEUDO_FS = ("/proc", "/sys")

INT_TAG = "tag:yaml.org,2002:int"
MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlRefused(ValueError):
    """A YAML text that is refused: one line, `field.path: what (line N)`."""


# files -----------------------------------------------------------------------------------------

def read_regular(path: str | os.PathLike, limit: int, *, follow: bool = True,
                 check: Callable[[os.stat_result, str], None] | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; ValueError saying why it is not
    read (OSError when it cannot be). Checked before it is opened (a device is never opened) and
    again on what was opened. `follow=False`: a symlink is refused; `check`: more checks on its stat."""
    shown_path = str(path)
    check_stat(os.stat(path, follow_symlinks=follow), shown_path, limit, check)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        check_stat(os.fstat(f.fileno()), shown_path, limit, check)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{shown(shown_path)} has more than {_size(limit)} (the limit for it)")
    return data


def check_stat(st: os.stat_result, shown_path: str, limit: int,
               check: Callable[[os.stat_result, str], None] | None = None) -> None:
    """ValueError unless `st` is a regular file on disk of at most `limit` bytes (and passes `check`)."""
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{shown(shown_path)} is not a regular file (a directory, device, FIFO or socket)")
    if any(st.st_dev == _device(d) for d in PSEUDO_FS):
        raise ValueError(f"{shown(shown_path)} is a file of {' or '.join(PSEUDO_FS)}, not a file on disk")
    if check is not None:
        check(st, shown_path)
    if st.st_size > limit:
        raise ValueError(f"{shown(shown_path)} has {_size(st.st_size)}; the limit is {_size(limit)}")


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


# YAML ------------------------------------------------------------------------------------------

class _BoundedComposer(Composer):
    """pyyaml's composer, counting: depth, values with aliases expanded, the path to each node."""

    def compose_document(self) -> Any:
        self._path: list[str] = []
        self._counts = [0]                 # values so far in each open collection (and the document)
        self._sizes: dict[int, int] = {}   # id(collection node) -> its values, aliases expanded
        return super().compose_document()

    def _where(self) -> str:
        return shown("".join(self._path).lstrip("."), 120) or "(top level)"

    def _refuse(self, problem: str, mark: Any) -> None:
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise YamlRefused(f"{self._where()}: {problem}{line}")

    def _add(self, n: int, mark: Any) -> None:
        self._counts[-1] += n
        if self._counts[-1] > MAX_VALUES:
            self._refuse(f"more than {MAX_VALUES:,} values once its aliases are expanded; a scenario "
                         "holds far fewer", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        if self.check_event(AliasEvent):
            node = super().compose_node(parent, index)
            if not isinstance(node, ScalarNode) and id(node) not in self._sizes:
                self._refuse("an alias to a value that contains it", mark)
            self._add(self._sizes.get(id(node), 1), mark)
            return node
        if self.check_event(ScalarEvent):
            node = super().compose_node(parent, index)
            if node.tag == INT_TAG and len(node.value) > MAX_INT_DIGITS:
                self._refuse(f"a whole number of {len(node.value):,} characters; at most {MAX_INT_DIGITS}", mark)
            self._add(1, mark)
            return node
        if len(self._counts) > MAX_DEPTH:
            self._refuse(f"nested more than {MAX_DEPTH} deep", mark)
        self._counts.append(1)
        node = super().compose_node(parent, index)
        size = self._counts.pop()
        self._sizes[id(node)] = size
        self._add(size, mark)
        return node

    def compose_sequence_node(self, anchor: Any) -> Any:
        start = self.get_event()
        tag = start.tag if start.tag not in (None, "!") else self.resolve(SequenceNode, None, start.implicit)
        node = SequenceNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        while not self.check_event(SequenceEndEvent):
            self._path.append(f"[{len(node.value)}]")
            node.value.append(self.compose_node(node, len(node.value)))
            self._path.pop()
        node.end_mark = self.get_event().end_mark
        return node

    def compose_mapping_node(self, anchor: Any) -> Any:
        start = self.get_event()
        tag = start.tag if start.tag not in (None, "!") else self.resolve(MappingNode, None, start.implicit)
        node = MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        seen: dict[Any, int] = {}
        while not self.check_event(MappingEndEvent):
            key = self.compose_node(node, None)
            value = _key_value(self, key)
            name = shown(value, 40) if value is not None else "?"
            if value is not None and key.tag != MERGE_TAG:
                if value in seen:
                    self._path.append(f".{name}")
                    self._refuse(f"given twice, on lines {seen[value]} and {key.start_mark.line + 1} (the "
                                 "second would silently win); keep one", None)
                seen[value] = key.start_mark.line + 1
            self._path.append(f".{name}")
            node.value.append((key, self.compose_node(node, key)))
            self._path.pop()
        node.end_mark = self.get_event().end_mark
        return node


def _key_value(loader: SafeConstructor, key: Any) -> Any:
    """A scalar key as the loader will construct it (1 and 0x1 are one key), or None."""
    if not isinstance(key, ScalarNode):
        return None
    try:
        value = loader.yaml_constructors.get(key.tag, SafeConstructor.construct_undefined)(loader, key)
        hash(value)
    except Exception:  # noqa: BLE001 - an odd key: construction refuses it later, with its own message
        return None
    return value


try:
    from yaml.cyaml import CParser as _CParser  # libyaml's parser
except ImportError:  # pragma: no cover - pyyaml built without libyaml
    _CParser = None
C_LOADER = _CParser is not None


if _CParser is not None:
    class BoundedLoader(_BoundedComposer, _CParser, SafeConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
else:  # pragma: no cover - libyaml is installed wherever peerlab is set up
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class BoundedLoader(_BoundedComposer, Reader, Scanner, Parser, SafeConstructor, Resolver):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


def load_yaml(text: str) -> Any:
    """The one document of `text`, as yaml.safe_load gives it; yaml.YAMLError for text that is not YAML,
    YamlRefused for YAML past the bounds."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def count_values(data: Any, stop: int = MAX_VALUES) -> int:
    """Values in `data` (a loaded document; shared parts counted each time), counting stops past `stop`."""
    count, todo = 0, [data]
    while todo and count <= stop:
        item = todo.pop()
        count += 1
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return count


# text ------------------------------------------------------------------------------------------

_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]*@")


def shown(value: Any, limit: int = VALUE_WIDTH) -> str:
    """`value` as text safe to print: control characters escaped (\\x1b, \\n), cut to `limit`
    characters with '…'."""
    text = value if isinstance(value, str) else str(value)
    cut = len(text) > limit
    out = "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
                  for c in text[:limit])
    if cut or len(out) > limit:
        return out[:limit - 1] + "…"
    return out


def mask_credentials(text: str) -> str:
    """`s3://KEY:SECRET@bucket` -> `s3://***@bucket`."""
    return _CREDENTIALS.sub(r"\1***@", text)


def refusal_lines(problems: list[str]) -> list[str]:
    """The lines of a refusal: at most MAX_PROBLEMS (then how many more), each printable, at most
    LINE_WIDTH characters, no credentials."""
    lines = [shown(mask_credentials(p[:2 * LINE_WIDTH]), LINE_WIDTH) for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"... and {len(problems) - MAX_PROBLEMS} more problems (fix these first)")
    return lines

"""YAML with locations: one mapping read from an untrusted file, with the file and line of every key.

The reader of profiles (:mod:`servectl.profile.loader`), and of the other YAML files servectl reads (qualify
suites and their cases, the gateway configuration): the file size, the nodes after expanding aliases, the
nesting depth and the time spent are bounded, and every problem is one :class:`~servectl.errors.Problem`
naming the file and line.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.errors import Problem, ProfileError
from servectl.files import FileRefused, read_bounded

if TYPE_CHECKING:  # PyYAML loads on first read
    import yaml

PathKey = tuple[str | int, ...]
Location = tuple[Path, int]


def _yaml_loader(text: str) -> Any:
    """A safe loader of ``text``: libyaml's when PyYAML was built with it (same marks, several times faster)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)


#: Bounds on one profile file (untrusted input): bytes read, values after expanding aliases, nesting depth,
#: and seconds spent reading it (checked between the parsing steps, each linear in the bounded size).
#: 80,000 ``engine.env`` keys (about 1.7 MB, 1.3 s) stay inside them; the shipped profiles are a few KB.
MAX_PROFILE_BYTES = 4 * 2**20
MAX_YAML_NODES = 1_000_000
MAX_YAML_DEPTH = 64
READ_BUDGET_S = 5.0


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[PathKey, Location]]:
    """Parse one YAML mapping and the line of every key in it.

    A profile is untrusted input: the file size, the nodes after expanding aliases, the nesting depth and the
    time spent reading it are bounded (an alias bomb is refused before anything walks it), and every decoding
    error becomes one problem naming the file.

    Raises:
        ProfileError: the file cannot be read, is too big or too slow to read, is not UTF-8 YAML, is not a
            mapping, or repeats a key.
    """
    import yaml

    shown = display_path(path)
    deadline = time.monotonic() + READ_BUDGET_S

    def fail(message: str, line: int | None = None) -> ProfileError:
        return ProfileError([Problem(shown, line, "", message, rule="yaml")])

    def in_budget() -> None:
        if time.monotonic() > deadline:
            raise fail(
                f"took more than {READ_BUDGET_S:g} s to read ({len(raw):,} bytes); a profile is a small text "
                "file: split it, or remove what repeats"
            )

    raw = b""
    try:  # a FIFO, socket, device, folder or link loop is refused without blocking
        raw = read_bounded(path, limit_bytes=MAX_PROFILE_BYTES, what="profile")
    except FileRefused as e:
        raise fail(e.reason) from None
    except OSError as e:
        raise fail(f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise fail(f"not UTF-8 text (byte {e.start}); a profile is a YAML text file", line) from None
    try:
        # Only a text that could nest too deep pays for a pass over its events (a tenth of the read)
        deep = _nesting_bound(text) > MAX_YAML_DEPTH
        has_aliases = _check_nesting(text, shown) if deep else "*" in text
        in_budget()
        loader = _yaml_loader(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise fail(f"YAML syntax: {e.problem or e.context}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:  # the reader rejects control characters before parsing starts
        raise fail(f"YAML: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    locations: dict[PathKey, Location] = {(): (path, 1)}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        in_budget()
        if isinstance(node, yaml.MappingNode):
            if has_aliases:
                _check_expansion(node, shown)
            _walk(node, path, locations, problems)
            in_budget()
            data = loader.construct_document(node)
            in_budget()
        else:
            data = None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise fail(f"YAML syntax: {e.problem or e.context}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise fail(f"YAML: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    except (ValueError, OverflowError, TypeError) as e:  # a timestamp or number the constructor cannot build
        raise fail(f"YAML value: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    except RecursionError:
        raise fail(f"nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ProfileError([Problem(shown, 1, "", "a profile must be a YAML mapping of keys to values", rule="yaml")])
    if problems:
        raise ProfileError(problems)
    return data, locations


_LINE_PREFIX = re.compile(r"^[ ?:-]*", re.MULTILINE)


def _nesting_bound(text: str) -> int:
    """An upper bound on the nesting depth, from the text alone.

    A block collection nested one level deeper starts one column further right (its indentation, or the
    ``- ``/``? `` before it on the line), and a flow collection needs its own ``[`` or ``{``.
    """
    prefix = max(map(len, _LINE_PREFIX.findall(text)), default=0)
    return prefix + text.count("[") + text.count("{") + 1


def _check_nesting(text: str, shown: str) -> bool:
    """Refuse nesting deeper than :data:`MAX_YAML_DEPTH` from the event stream, before composing.

    PyYAML's composer recurses once per level (quadratic time, and a crash near 40,000 levels, which a
    small file of ``[`` or ``- `` reaches); the event stream is flat and stops at the first level too deep.

    Returns:
        Whether the document uses aliases (only then can it expand beyond its own size).
    """
    import yaml

    loader = _yaml_loader(text)
    depth = 0
    aliases = False
    try:
        while (event := loader.get_event()) is not None:
            if isinstance(event, yaml.ScalarEvent):  # most events; nothing to count
                continue
            if isinstance(event, yaml.AliasEvent):
                aliases = True
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else None
                    raise ProfileError(
                        [Problem(shown, line, "", f"nested deeper than {MAX_YAML_DEPTH} levels", rule="yaml")]
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as e:  # PyYAML >= 6.0.4's scanner bounds flow nesting itself, looking ahead
        if "nesting depth" not in str(e.problem):
            raise
        line = e.problem_mark.line + 1 if e.problem_mark else None
        raise ProfileError(
            [Problem(shown, line, "", f"nested deeper than {MAX_YAML_DEPTH} levels", rule="yaml")]
        ) from None
    finally:
        loader.dispose()
    return aliases


def _check_expansion(root: yaml.Node, shown: str) -> None:
    """Refuse a node tree that expands to too many values, nests too deep, or refers to itself.

    Runs before anything is constructed or walked, in time linear in the *distinct* nodes: sizes and
    heights are memoised per node, so an alias bomb (a few lines, billions of values once expanded, also
    through ``<<`` merges) is refused in milliseconds. Iterative, so depth cannot exhaust Python's stack.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            height[id(node)] = 1 + max((height[id(c)] for c in children), default=0)
            if size[id(node)] > MAX_YAML_NODES:
                message = (
                    f"more than {MAX_YAML_NODES:,} values after expanding aliases; "
                    "a profile this big is a mistake (or an alias bomb): remove the repeated aliases"
                )
                raise ProfileError([Problem(shown, None, "", message, rule="yaml")])
            if height[id(node)] > MAX_YAML_DEPTH:
                line = node.start_mark.line + 1
                raise ProfileError(
                    [Problem(shown, line, "", f"nested deeper than {MAX_YAML_DEPTH} levels", rule="yaml")]
                )
            continue
        if id(node) in size:
            continue
        if id(node) in on_path:
            line = node.start_mark.line + 1
            raise ProfileError([Problem(shown, line, "", "an alias refers to a value that contains it", rule="yaml")])
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _walk(node: yaml.Node, path: Path, out: dict[PathKey, Location], problems: list[Problem]) -> None:
    """Record the line of every key and item, and flag repeated keys (after :func:`_check_expansion`)."""
    import yaml

    shown = display_path(path)
    stack: list[tuple[yaml.Node, PathKey]] = [(node, ())]
    while stack:
        current, prefix = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in current.value:
                key = str(key_node.value)
                child = (*prefix, key)
                line = key_node.start_mark.line + 1
                if key in seen:
                    problems.append(Problem(shown, line, dotted_path(child), "key repeats; keep one", rule="yaml"))
                seen.add(key)
                out[child] = (path, line)
                if not isinstance(value_node, yaml.ScalarNode):  # most values: nothing below them
                    stack.append((value_node, child))
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                child = (*prefix, index)
                out[child] = (path, item.start_mark.line + 1)
                if not isinstance(item, yaml.ScalarNode):
                    stack.append((item, child))


def display_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def dotted_path(path: PathKey) -> str:
    """A key path as written in messages: ``engine.args`` and ``container.mounts[0].source``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


__all__ = [
    "MAX_PROFILE_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "READ_BUDGET_S",
    "Location",
    "PathKey",
    "display_path",
    "dotted_path",
    "read_yaml",
]

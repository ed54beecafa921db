"""What changed between two flag catalogs: flags added, removed, or changed in kind, type, choices or default.

Pure. Options are matched by their primary flag; an option whose flag was renamed shows as one removed and
one added. Choices are compared as sets (argparse keeps some as sets, whose order means nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from servectl.profile.catalog import CatalogOption, FlagCatalog


@dataclass(frozen=True)
class FlagChange:
    """One difference. ``kind`` is ``added``, ``removed`` or ``changed`` (then ``field`` says what)."""

    flag: str
    kind: str
    field: str = ""  # kind, type, nargs, action, choices, default, aliases
    before: str = ""
    after: str = ""

    def line(self) -> str:
        if self.kind == "added":
            return f"+ {self.flag}  {self.after}".rstrip()
        if self.kind == "removed":
            return f"- {self.flag}  {self.before}".rstrip()
        if not self.before:  # choices: only what was added (+) and removed (-)
            return f"~ {self.flag}  {self.field}: {self.after}"
        return f"~ {self.flag}  {self.field}: {self.before} -> {self.after}"


def _describe(opt: CatalogOption) -> str:
    detail = opt.kind if opt.kind != "value" else (opt.type or "str") + (f" nargs={opt.nargs}" if opt.nargs else "")
    choices = f" choices={{{', '.join(opt.choices)}}}" if opt.choices is not None else ""
    return f"[{detail}]{choices}"


def _choices_change(a: CatalogOption, b: CatalogOption) -> FlagChange | None:
    before, after = set(a.choices or ()), set(b.choices or ())
    if (a.choices is None) != (b.choices is None) or before != after:
        added = sorted(after - before)
        removed = sorted(before - after)
        if a.choices is None or b.choices is None:
            return FlagChange(a.primary_flag, "changed", "choices", _fmt(a.choices), _fmt(b.choices))
        parts = [f"+{c}" for c in added] + [f"-{c}" for c in removed]
        return FlagChange(a.primary_flag, "changed", "choices", after=" ".join(parts))
    return None


def _fmt(choices: Iterable[str] | None) -> str:
    return "any value" if choices is None else "{" + ", ".join(choices) + "}"


def diff_catalogs(a: FlagCatalog, b: FlagCatalog) -> list[FlagChange]:
    """Every difference from ``a`` to ``b``, in ``b``'s option order (removed ones last, in ``a``'s order)."""
    before = {opt.primary_flag: opt for opt in a.options}
    after = {opt.primary_flag: opt for opt in b.options}
    changes: list[FlagChange] = []
    for flag, new in after.items():
        old = before.get(flag)
        if old is None:
            changes.append(FlagChange(flag, "added", after=_describe(new)))
            continue
        for field in ("kind", "type", "nargs", "action"):
            x, y = getattr(old, field), getattr(new, field)
            if x != y:
                changes.append(FlagChange(flag, "changed", field, str(x), str(y)))
        choice_change = _choices_change(old, new)
        if choice_change is not None:
            changes.append(choice_change)
        if old.default != new.default:
            changes.append(FlagChange(flag, "changed", "default", repr(old.default), repr(new.default)))
        if set(old.flags) != set(new.flags):
            changes.append(FlagChange(flag, "changed", "aliases", ", ".join(old.flags), ", ".join(new.flags)))
    changes += [FlagChange(flag, "removed", before=_describe(old)) for flag, old in before.items() if flag not in after]
    return changes


def flags_affected(changes: Iterable[FlagChange], flags: Iterable[str]) -> list[FlagChange]:
    """The changes that touch one of ``flags`` (a profile's compiled flags), for "what does an upgrade break"."""
    wanted = set(flags)
    return [c for c in changes if c.flag in wanted]

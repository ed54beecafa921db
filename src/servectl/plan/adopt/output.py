"""The adopted profile as a file: a comment header (origin, each value's source, notes), then the YAML."""

from __future__ import annotations

from servectl.plan.adopt.draft import Adoption
from servectl.yaml_text import dump, with_header


def adoption_yaml(adoption: Adoption, *, schema_line: str | None = None) -> str:
    """The profile file: a comment header (origin, each value's source, notes), then the YAML.

    The header quotes the source (a recipe's id and reason, a container's name): each line is escaped
    (:func:`servectl.yaml_text.comment`) so none of it can become a key of the profile.
    """
    lines: list[str] = []
    if schema_line:
        lines.append(f"yaml-language-server: $schema={schema_line}")
    if adoption.container_name or adoption.container_id:
        lines.append(
            f"Written by `servectl adopt` from container {adoption.container_name} ({adoption.container_id[:12]})."
        )
        lines.append("Where each value came from (docker inspect of the container and of its image):")
    else:
        lines.append(f"Written by `servectl adopt` from {adoption.origin}.")
        lines.append("Where each value came from (JSON pointers into the source):")
    width = max((len(f) for f, _ in adoption.sources), default=0)
    lines.extend(f"  {path.ljust(width)}  {where}" for path, where in adoption.sources)
    if adoption.notes:
        lines.append("Notes:")
        lines.extend(f"  - {note}" for note in adoption.notes)
    if adoption.problems:
        lines.append("Problems in the source (fix them before promoting this profile):")
        lines.extend(f"  - {problem}" for problem in adoption.problems)
    if adoption.exports:
        lines.append(f"Before servectl starts it: export {' '.join(adoption.exports)}")
    return with_header(lines, dump(adoption.data))


__all__ = ["adoption_yaml"]

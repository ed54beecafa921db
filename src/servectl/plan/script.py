"""Printed forms of a launch plan: the dry-run script and plan diffs (pure text, no I/O)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from servectl.plan.compile import LaunchPlan, format_docker_run, format_engine_argv


def dry_run_text(plan: LaunchPlan) -> str:
    """A shell script that starts the same container as ``servectl up`` (secrets as references)."""
    out = [
        f"# servectl plan for profile {plan.profile} (plan hash {plan.plan_hash})",
        f"# from {plan.source}",
    ]
    if plan.files:
        out.append("# files servectl writes before start:")
        for f in plan.files:
            folder = shlex.quote(str(Path(f.host_path).parent))
            out.append(f"mkdir -p {folder} && cat > {shlex.quote(f.host_path)} <<'SERVECTL_EOF'")
            out.append(f.content.rstrip("\n"))
            out.append("SERVECTL_EOF")
    for ref in plan.secrets:
        if ref.source == "env":
            out.append(f"# {ref.label}: written from ${ref.name} (***) to {ref.host_path}, mode 0600")
            out.append(f"(umask 077 && printenv {ref.name} > {shlex.quote(ref.host_path)})")
        else:
            out.append(f"# {ref.label}: read from {ref.name} (***), mounted read-only")
    out.append(format_docker_run(plan))
    out.append("")
    out.append(f"# SGLang argv ({len([t for t in plan.engine_argv if t.startswith('--')])} flags):")
    out.extend("#   " + line for line in format_engine_argv(plan).splitlines())
    out.append(f"# serves {plan.served_name!r} at {plan.url}")
    return "\n".join(out) + "\n"


def plan_changes(a: LaunchPlan, b: LaunchPlan) -> list[tuple[str, Any, Any]]:
    """Every field that differs between two plans as ``(field, value in a, value in b)``; None is unset.

    Engine flags are compared by flag (``engine --context-length``), the rest by dotted plan field.
    """
    changes: list[tuple[str, Any, Any]] = []
    flags_a, flags_b = _flags(a.engine_argv), _flags(b.engine_argv)
    for flag in sorted(set(flags_a) | set(flags_b)):
        va, vb = flags_a.get(flag), flags_b.get(flag)
        if va != vb:
            changes.append((f"engine {flag}", va, vb))
    da, db = _flatten(a.to_dict()), _flatten(b.to_dict())
    skip = (
        "engine_argv",
        "docker.command",
        "plan_hash",
        "profile",
        "source",
        "docker.labels.servectl.source",
    )
    for key in sorted(set(da) | set(db)):
        if key.startswith(skip):
            continue
        if da.get(key) != db.get(key):
            changes.append((key, da.get(key), db.get(key)))
    return changes


def plan_diff(a: LaunchPlan, b: LaunchPlan) -> list[str]:
    """Lines naming every field that differs between two plans (engine flags compared by flag)."""
    return [f"{field}: {_show(va)} -> {_show(vb)}" for field, va, vb in plan_changes(a, b)]


def _flags(argv: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = ""
    for token in argv:
        if token.startswith("--"):
            current = token
            out[current] = []
        elif current:
            out[current].append(token)
    return {k: " ".join(v) if v else "(switch)" for k, v in out.items()}


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(data, list | tuple) and data and isinstance(data[0], dict | list | tuple):
        out = {}
        for i, v in enumerate(data):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: json.dumps(data) if isinstance(data, list | tuple) else data}


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)

"""Profile commands: profiles, show, validate, diff, schema, promote (catalog: servectl.cli.catalog)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servectl.cli.complete import profile_names
from servectl.errors import ProfileError, UsageError

if TYPE_CHECKING:
    from servectl.host import Host


def register(app: typer.Typer) -> None:
    app.command("profiles")(profiles_command)
    app.command("show")(show_command)
    app.command("validate")(validate_command)
    app.command("diff")(diff_command)
    app.command("schema")(schema_command)
    app.command("promote")(promote_command)


def promote_command(
    name: Annotated[str, typer.Argument(help="profile to promote", autocompletion=profile_names)],
    evidence: Annotated[Path, typer.Option("--evidence", help="the --out folder of `servectl bench NAME`")],
    qualification: Annotated[
        Path | None,
        typer.Option(
            "--qualification",
            help="the --out folder of `servectl qualify NAME` (default: the --evidence folder)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Mark a profile promoted, on bench and qualification evidence of its current plan, image and model pins."""
    from servectl.host import from_env

    with from_env() as host:
        record = host.promote(name=name, evidence_dir=evidence, qualification_dir=qualification)
    typer.echo(
        f"promoted {name}: evidence {name}.evidence.json (run {record.run_id}, plan {record.plan_hash}; "
        f"{record.gate_counts})"
    )
    if record.model_revision_check.startswith("unverified"):
        typer.echo(f"note: model.revision {record.model_revision} is {record.model_revision_check} (recorded)")


def profiles_command(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List the profiles on the search path: name, status, model, TP, context, port, role, source file."""
    from servectl.host import from_env

    with from_env() as host:
        rows = host.profiles()
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return

    from servectl.cli.views.profiles import profiles_table
    from servectl.cli.views.table import table_console

    console = table_console()
    console.print(profiles_table(rows, width=console.width))


def show_command(
    name: Annotated[str, typer.Argument(help="profile name", autocompletion=profile_names)],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of YAML")] = False,
) -> None:
    """Print the resolved profile (after `extends`), with where it came from."""
    from servectl.host import from_env

    with from_env() as host:
        shown = host.show(name=name)
    if as_json:
        typer.echo(json.dumps(shown.data, indent=2))
        return
    import yaml

    typer.echo(f"# {shown.name}: resolved from " + " <- ".join(str(p) for p in shown.chain))
    typer.echo(yaml.safe_dump(shown.data, sort_keys=False, width=110).rstrip())
    for line in shown.evidence():
        typer.echo(line)


def validate_command(
    names: Annotated[
        list[str] | None, typer.Argument(help="profiles to validate (default: all)", autocompletion=profile_names)
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print each profile with its problems (file, line, field, rule, message)")
    ] = False,
    in_image: Annotated[
        bool,
        typer.Option("--in-image", help="also parse each argv with the image's own SGLang (throwaway container)"),
    ] = False,
) -> None:
    """Validate profiles (all runnable ones when none are named); exit 2 listing every problem."""
    from servectl.host import from_env

    with from_env() as host:
        _validate(host, names, as_json=as_json, in_image=in_image)


def _validate(host: Host, names: list[str] | None, *, as_json: bool, in_image: bool) -> None:
    from servectl.errors import ProfileTemplate

    results = host.validate(names=names or None)
    if as_json:
        typer.echo(json.dumps([v.to_dict() for v in results], indent=2))
        # with no names, a shipped template (filled in by `servectl adopt`) is not a failure
        if any(v.error is not None and (names or not isinstance(v.error, ProfileTemplate)) for v in results):
            raise typer.Exit(2)
        return
    problems: list[str] = []
    for v in results:
        if v.error is None:
            typer.echo(f"ok      {v.name}")
            for warning in v.warnings:
                typer.echo(f"  warning: {warning}")
            if v.note:
                typer.echo(f"  note: {v.note}")
            if in_image:
                problems.extend(_in_image(host, v.name))
        elif isinstance(v.error, ProfileTemplate) and not names:
            typer.echo(f"template {v.name}: {v.error.instructions}")
        else:
            typer.echo(f"invalid {v.name}")
            problems.extend(v.error.lines())
    if not names:
        problems.extend(_gateway_file(host))
    if problems:
        raise ProfileError("\n".join(problems))


def _gateway_file(host: Host) -> list[str]:
    """``servectl validate`` checks the gateway file too, when there is one."""
    checked = host.check_gateway_file()
    if checked is None:
        return []
    typer.echo(f"{'invalid' if checked.problems else 'ok     '} gateway {checked.path}")
    return checked.problems


def diff_command(
    a: Annotated[str, typer.Argument(help="first profile", autocompletion=profile_names)],
    b: Annotated[str, typer.Argument(help="second profile", autocompletion=profile_names)] = "",
    container: Annotated[
        str,
        typer.Option("--container", help="compare profile A with this running container (docker inspect) instead"),
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print the differences as JSON")] = False,
) -> None:
    """Show what differs between the resolved launch plans of two profiles, or a profile and a container."""
    if container:
        if b:
            raise UsageError("give either a second profile or --container, not both")
        _diff_container(a, container, as_json=as_json)
        return
    if not b:
        raise UsageError("name a second profile, or a container with --container NAME")
    from servectl.host import from_env

    with from_env() as host:  # plans, like up --dry-run: an unset ${VAR} stays visible instead of failing
        diff = host.diff_profiles(a=a, b=b)
    if as_json:
        typer.echo(json.dumps(diff.to_dict(), indent=2))
        return
    if not diff.lines:
        typer.echo(f"{a} and {b} compile to the same launch")
    for line in diff.lines:
        typer.echo(line)


def _diff_container(profile: str, container: str, *, as_json: bool) -> None:
    from servectl.host import from_env

    with from_env() as host:
        lines = host.diff_container(name=profile, container=container)
    if as_json:
        typer.echo(json.dumps({"profile": profile, "container": container, "changes": lines}, indent=2))
        return
    if not lines:
        typer.echo(f"container {container} and profile {profile} match on every field servectl controls")
    for line in lines:
        typer.echo(line)


def schema_command() -> None:
    """Print the JSON Schema of the profile format (shipped as schema/profile.schema.json)."""
    from servectl.host import from_env

    with from_env() as host:
        typer.echo(json.dumps(host.profile_schema(), indent=2))


def _in_image(host: Host, name: str) -> list[str]:
    """Print the image's verdict on the profile's argv; return the problem lines."""
    verdict = host.validate_in_image(name=name).verdict
    where = f"{verdict.image} (SGLang {verdict.sglang_version}, {verdict.seconds:.1f} s)"
    if not verdict.parsed:
        typer.echo(f"  in-image: rejected by {where}")
        return [f"{name}: engine.parse: {verdict.image} rejects the argv: {verdict.error}"]
    if verdict.resolve_error:
        typer.echo(f"  in-image: parsed by {where}; resolution needs the GPU or model: {verdict.resolve_error}")
    else:
        typer.echo(f"  in-image: parsed and resolved by {where}")
    return []

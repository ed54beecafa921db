"""Gateway commands: gateway run, gateway keys create/list/revoke, gateway up/down/status/logs, gateway clients."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="the gateway file (default: ~/.config/servectl/gateway.yaml, or $SERVECTL_HOME/gateway.yaml; "
        "`servectl gateway status` names it)",
    ),
]


def register(app: typer.Typer) -> None:
    gateway = typer.Typer(help="One authenticated, alias-routed OpenAI-compatible endpoint that outlives swaps.")
    gateway.command("init")(init_command)
    gateway.command("run")(run_command)
    gateway.command("up")(up_command)
    gateway.command("down")(down_command)
    gateway.command("status")(status_command)
    gateway.command("logs")(logs_command)
    gateway.command("clients")(clients_command)
    keys = typer.Typer(help="Gateway keys (the key file keeps SHA-256 digests, never the keys).")
    keys.command("create")(keys_create_command)
    keys.command("list")(keys_list_command)
    keys.command("revoke")(keys_revoke_command)
    gateway.add_typer(keys, name="keys")
    app.add_typer(gateway, name="gateway")


def init_command(
    config: ConfigOption = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing gateway file")] = False,
) -> None:
    """Write the example gateway file (aliases chat -> demo | demo-rollback, and default) where servectl reads it."""
    from servectl.host import from_env

    with from_env() as host:
        path = host.init_gateway_file(config_file=config, overwrite=force)
    typer.echo(f"wrote {path}: edit its aliases; servectl validate checks it, a running gateway reloads it")


def run_command(
    config: ConfigOption = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="HOST:PORT instead of the file's listen (one gateway per state folder: a second one, on any "
            "address, is refused; run it with its own SERVECTL_HOME)",
        ),
    ] = None,
) -> None:
    """Run the gateway in the foreground (for systemd and containers); SIGTERM drains, then it exits."""
    from servectl.host import from_env

    with from_env() as host:
        host.gateway_run(
            config_file=config, listen=listen, on_listening=lambda url: print(f"gateway on {url}", file=sys.stderr)
        )


def keys_create_command(
    name: Annotated[
        str, typer.Argument(help="a name for the key (shown in the gateway's log and /metrics, never the key)")
    ],
    aliases: Annotated[
        str | None, typer.Option("--aliases", help="grant only these aliases, comma-separated (default: all)")
    ] = None,
    alias: Annotated[list[str] | None, typer.Option("--alias", help="grant this alias (repeatable)")] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="GET routes only (/v1/models, /ui): no completions")
    ] = False,
    budget: Annotated[
        str | None, typer.Option("--budget", help="requests per UTC period: N/hour, N/day, N/week or N/month")
    ] = None,
    expires: Annotated[str | None, typer.Option("--expires", help="lifetime such as 12h, 30d, 8w")] = None,
    rate: Annotated[int | None, typer.Option("--rate", min=1, help="requests per minute (default: the file's)")] = None,
    config: ConfigOption = None,
) -> None:
    """Make a key and print it once, alone on stdout (notes go to stderr)."""
    from servectl.host import from_env

    granted = [*(alias or []), *(a.strip() for a in (aliases or "").split(",") if a.strip())]
    with from_env() as host:
        created = host.create_gateway_key(
            key_name=name,
            aliases=granted,
            read_only=read_only,
            budget=budget,
            expires=expires,
            rate_per_minute=rate,
            config_file=config,
        )
    typer.echo(created.key)
    entry = created.entry
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(entry.expires_at)) if entry.expires_at else "never"
    print(f"key {name!r} for {entry.scope()}; expires {until}; its digest is in {created.keys_file}; "
          "it is not shown again", file=sys.stderr)  # fmt: skip


def keys_list_command(
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print each key's scope and usage as JSON")] = False,
) -> None:
    """List the keys: name, scope (aliases, read-only, budget), usage, expiry (never the keys)."""
    from servectl.host import from_env

    with from_env() as host:
        rows = host.gateway_keys(config_file=config)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        until = time.strftime("%Y-%m-%d", time.gmtime(r["expires_at"])) if r["expires_at"] else "never"
        scope = ", ".join(r["aliases"]) if r["aliases"] else "*"
        scope += " (read-only)" if r["read_only"] else ""
        budget = f"{r['budget_used']} of {r['budget']}" if r["budget"] else "no budget"
        state = " (expired)" if r["expired"] else ""
        typer.echo(f"{r['name']:<20} {scope:<28} {budget:<16} {r['requests_total']:>8} requests "
                   f"{r['tokens_out_total']:>9} tokens  expires {until}{state}")  # fmt: skip


def keys_revoke_command(
    name: Annotated[str, typer.Argument(help="the key's name")], config: ConfigOption = None
) -> None:
    """Remove a key; a running gateway refuses it within a second."""
    from servectl.host import from_env

    with from_env() as host:
        host.revoke_gateway_key(key_name=name, config_file=config)
    typer.echo(f"revoked {name}")


def up_command(
    config: ConfigOption = None,
    wait_s: Annotated[
        float | None, typer.Option("--wait", help="seconds to wait for it to answer (default: a minute)")
    ] = None,
) -> None:
    """Run the gateway as a container (restart policy unless-stopped; image built here from this servectl)."""
    from servectl.cli.views.gateway import gateway_lines
    from servectl.host import from_env

    with from_env() as host:
        started = host.gateway_up(config_file=config, timeout_s=wait_s)
    typer.echo(f"gateway container {started.container_id[:12]} ({started.image}) {started.state}")
    for line in gateway_lines(started.live) if started.live else []:
        typer.echo(line)


def down_command() -> None:
    """Stop the gateway container (requests in flight drain first) and remove it."""
    from servectl.host import from_env

    with from_env() as host:
        stopped = host.gateway_down()
    typer.echo("no gateway container" if stopped is None else f"stopped gateway container {stopped.container_id[:12]}")


def status_command(
    as_json: Annotated[bool, typer.Option("--json", help="print the container and live state as JSON")] = False,
) -> None:
    """The gateway: its container (if any) and, from the running gateway, each alias -> profile -> state."""
    from servectl.cli.views.gateway import container_line, gateway_lines
    from servectl.host import from_env

    with from_env() as host:
        current = host.gateway_status()
    container, live = current.container, current.live
    if as_json:
        typer.echo(json.dumps(current.to_dict(), indent=2))
        return
    if container is not None:
        for line in container_line(container.container_id, container.image, container.state):
            typer.echo(line)
    if current.config_file is not None:
        there = "" if current.config_file_present else " (none there: each profile is an alias of itself)"
        typer.echo(f"gateway file {current.config_file}{there}")
    if live is None:
        typer.echo("no gateway answers on this host" + ("" if container else "; start one: servectl gateway up"))
        raise typer.Exit(1)
    for line in gateway_lines(live):
        typer.echo(line)


def logs_command(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="only the last N lines")] = None,
) -> None:
    """The gateway container's log: one line per request (alias, key name, status, times; never keys or text)."""
    from servectl.host import from_env

    with from_env() as host:
        for line in host.gateway_logs(follow=follow, tail=tail):
            typer.echo(line)


def clients_command(
    client: Annotated[
        str | None,
        typer.Argument(
            help="pi, openclaw, hermes, claude-code, llm or openwebui (none: the base URL and the aliases)",
            show_default=False,
        ),
    ] = None,
    alias: Annotated[
        str | None, typer.Option("--alias", help="the model a one-model client uses (default: the first chat alias)")
    ] = None,
    key_env: Annotated[
        str | None,
        typer.Option("--key-env", help="the variable the client reads the key from (default SERVECTL_GATEWAY_KEY)"),
    ] = None,
    key_file: Annotated[Path | None, typer.Option("--key-file", help="a file holding the key, read by the client")] = (
        None
    ),
    url: Annotated[
        str | None, typer.Option("--url", help="the gateway's URL as the client reaches it (default: from listen)")
    ] = None,
    write: Annotated[Path | None, typer.Option("--write", help="write the configuration to FILE (mode 0600)")] = None,
    force: Annotated[bool, typer.Option("--force", help="with --write: replace an existing file")] = False,
    config: ConfigOption = None,
) -> None:
    """Each client's configuration against this gateway: base URL, aliases with their context windows, where the
    key comes from (a variable's name or a file; no key is printed). The file on stdout, notes on stderr."""
    from servectl.host import from_env

    with from_env() as host:
        shown = host.gateway_clients(
            client=client,  # type: ignore[arg-type]  # a name it does not know is refused there
            config_file=config,
            url=url,
            key_env=key_env,
            key_file=key_file,
            alias=alias,
            write_to=write,
            overwrite=force,
        )
    if shown.setup is None:
        typer.echo(f"gateway {shown.base_url}")
        for a in shown.aliases:
            window = f"{a.context_window} tokens" if a.context_window else "window unknown (no engine.context_length)"
            caps = ", ".join(a.capabilities) or "-"
            typer.echo(f"  {a.alias:<16} {window:<28} {caps:<32} {', '.join(a.profiles)}")
        typer.echo(f"clients: {', '.join(shown.clients)} (servectl gateway clients NAME)")
        return
    setup = shown.setup
    if shown.written is None:
        typer.echo(setup.text, nl=False)
        print(f"# {setup.client} reads this at {setup.path}", file=sys.stderr)
    else:
        print(f"wrote {shown.written} ({setup.client} reads it at {setup.path})", file=sys.stderr)
    for note in setup.notes:
        print(f"# {note}", file=sys.stderr)

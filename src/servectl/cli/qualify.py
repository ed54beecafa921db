"""``servectl qualify``: run the qualification gates against a running service and write the evidence.

Parses options, calls :func:`servectl.bench.qualify.run_qualify`, shows progress and a summary table (or the
evidence as JSON with ``--json``), writes ``qualify.json``. Heavy modules (openai, rich) load inside the command.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Annotated

import typer

from servectl.errors import QualificationFailed, UsageError

#: Failed cases printed per gate (every one is in the evidence).
SHOWN_FAILURES = 5


def _default_out_dir() -> Path:
    from servectl.paths import state_dir

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return state_dir() / "qualify" / stamp


def qualify_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Profile to qualify: its running service, with the plan hash and pins recorded.", show_default=False
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8180."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Served model name (default: the only one /v1/models lists).")
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            "--suite",
            help="Suite YAML file or shipped suite name (default: the profile's `qualify:`, else 'default').",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for qualify.json (default: STATE/qualify/<UTC time>).", show_default=False),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api-key-env", help="Environment variable holding the server's API key.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the evidence as JSON instead of a table.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the long-context word salad.")] = 0,
) -> None:
    """Run the qualification gates (smoke, JSON, tools, reasoning, needle, endurance, VRAM); write the evidence."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from servectl.bench.model import ApiKey
    from servectl.bench.qualify import QualifyProgressEvent, QualifySettings, load_suite, run_qualify, suite_path
    from servectl.bench.qualify.evidence import evidence_document, write_evidence

    if name is None and not url:
        raise UsageError("qualify: give a profile NAME or --url http://HOST:PORT")
    target = None
    if name is not None:
        from servectl.adapters.docker import DockerSdkEngine
        from servectl.bench.qualify.target import qualify_target
        from servectl.plan.resolve import resolve
        from servectl.preflight.request import optional_gpu_inventory

        target = qualify_target(name=name, docker=DockerSdkEngine(), gpus=optional_gpu_inventory(resolve(name)))
    suite_file = (
        suite_path(suite, relative_to=Path.cwd()) if suite else (target.suite_file if target else suite_path(None))
    )
    loaded_suite = load_suite(suite_file)
    key_env = api_key_env or (target.bench.api_key_env if target else None)
    api_key = None
    if key_env:
        value = os.environ.get(key_env)
        if not value:
            raise UsageError(f"--api-key-env {key_env}: the variable is not set or empty; export it first")
        api_key = ApiKey(value)
    settings = QualifySettings(
        url=url or (target.bench.url if target else ""),
        suite=loaded_suite,
        model=model or (target.bench.model if target else None),
        api_key=api_key,
        api_key_env=key_env,
        seed=seed,
    )
    out_dir = out or _default_out_dir()
    console = Console()
    err_console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task("discovering model", total=None)

        def on_progress(event: QualifyProgressEvent) -> None:
            bar.update(task, completed=event.done, total=event.total, description=f"{event.gate}: {event.case}")

        report = run_qualify(
            settings=settings,
            context=target.bench.context if target else None,
            facts=target.facts if target else None,
            progress=on_progress,
        )
    path = write_evidence(report, out_dir)
    if as_json:
        typer.echo(json.dumps(evidence_document(report), indent=2))
    else:
        from servectl.cli.views.qualify import summary_table

        console.print(summary_table(report, width=console.width))
        for gate in report.gates:
            for case in gate.failures[:SHOWN_FAILURES]:
                console.print(f"  {case.message}", markup=False, highlight=False)
            if len(gate.failures) > SHOWN_FAILURES:
                console.print(
                    f"  ... and {len(gate.failures) - SHOWN_FAILURES} more {gate.gate} failures", markup=False
                )
        overhead = report.overhead.cpu_fraction
        cpu = f"{100 * overhead:.1f} % of request time" if overhead is not None else "-"
        console.print(f"{report.counts}; client CPU {cpu}", highlight=False)
        console.print(f"evidence: {path}", highlight=False)
    failed = [g for g in report.gates if g.verdict == "fail"]
    if failed:
        what = ", ".join(f"{g.gate} {g.count}" for g in failed)
        raise QualificationFailed(f"qualify: {len(failed)} of {len(report.gates)} gates failed ({what}); see {path}")


def register(app: typer.Typer) -> None:
    """Add ``qualify`` to the ``servectl`` app."""
    app.command("qualify")(qualify_command)

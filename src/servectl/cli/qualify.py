"""``servectl qualify``: run the qualification gates against a running service and write the evidence.

Parses options, calls :meth:`servectl.host.Host.qualify` (over
:func:`servectl.bench.qualify.profile_run.run_profile_qualify`, which runs the gates and writes
``qualify.json``), shows progress and a summary table (or the evidence as JSON with ``--json``). Heavy modules
(openai, rich) load inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servectl.bench.qualify.settings import QualifySettings
from servectl.cli.options import ApiKeyEnv, ApiKeyFile, ServedModel, ServerUrl

if TYPE_CHECKING:
    from servectl.bench.qualify import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult

#: Failed cases printed per gate (every one is in the evidence).
SHOWN_FAILURES = 5

#: Each option's default is the settings field's (their one home; tests/unit/test_one_home.py holds to it).
_DEFAULT = QualifySettings()


def qualify_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Profile to qualify: its running service, with the plan hash and pins recorded.", show_default=False
        ),
    ] = None,
    url: ServerUrl = None,
    model: ServedModel = None,
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
    api_key_env: ApiKeyEnv = None,
    api_key_file: ApiKeyFile = None,
    via_gateway: Annotated[
        bool,
        typer.Option(
            "--via-gateway",
            help="NAME is a gateway alias: run the gates through `servectl gateway` with its key; the alias's "
            "first profile must answer.",
        ),
    ] = _DEFAULT.via_gateway,
    as_json: Annotated[bool, typer.Option("--json", help="Print the evidence as JSON instead of a table.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the long-context word salad.")] = _DEFAULT.seed,
) -> None:
    """Run the qualification gates (smoke, JSON, tools, reasoning, needle, coding, image/OCR, clients, routed,
    endurance, VRAM, as the suite lists); write the evidence."""
    from servectl.cli.views.progress import progress_bar
    from servectl.cli.views.qualify import evidence_json
    from servectl.host import from_env

    def describe(event: QualifyProgressEvent) -> str:
        return f"{event.gate}: {event.case}"

    settings = QualifySettings(
        url=url or "",
        model=model,
        api_key_env=api_key_env,
        api_key_file=api_key_file,
        via_gateway=via_gateway,
        seed=seed,
    )
    with progress_bar(describe) as on_progress, from_env() as host:
        result = host.qualify(name=name, suite=suite, settings=settings, out_dir=out, progress=on_progress)
    if as_json:
        typer.echo(json.dumps(evidence_json(result.report), indent=2))
    else:
        _print_summary(result)
    result.raise_if_failed()


def _print_summary(result: ProfileQualifyResult) -> None:
    """The gates as a table, the first failures of each, the client's CPU share and where the evidence is."""

    from servectl.cli.views.qualify import summary_table
    from servectl.cli.views.table import table_console

    console = table_console()
    report = result.report
    console.print(summary_table(report, width=console.width))
    for gate in report.gates:
        if gate.verdict == "fail" and gate.note and gate.failures:  # a gate-wide reason the table does not show
            console.print(f"  {gate.gate}: {gate.note}", markup=False, highlight=False)
        for case in gate.failures[:SHOWN_FAILURES]:
            console.print(f"  {case.message}", markup=False, highlight=False)
        if len(gate.failures) > SHOWN_FAILURES:
            console.print(f"  ... and {len(gate.failures) - SHOWN_FAILURES} more {gate.gate} failures", markup=False)
    overhead = report.overhead.cpu_fraction
    cpu = f"{100 * overhead:.1f} % of request time" if overhead is not None else "-"
    console.print(f"{report.counts}; client CPU {cpu}", highlight=False)
    console.print(f"evidence: {result.evidence}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``qualify`` to the ``servectl`` app."""
    app.command("qualify")(qualify_command)

"""``servectl bench``: measure TTFT, prefill and decode tok/s of a running server.

Parses options, calls :meth:`servectl.host.Host.bench` (over
:func:`servectl.bench.profile_run.run_profile_bench`, which measures and writes the artifacts and the plot),
renders a progress bar and the results table. Heavy modules (httpx, rich, matplotlib) are imported inside the
command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from servectl.bench.settings import BenchSettings
from servectl.cli.bench_compare import compare_command
from servectl.cli.options import ApiKeyEnv, ServedModel, ServerUrl
from servectl.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from servectl.bench import BenchProgressEvent, BenchReport, PointResult, Stat
    from servectl.bench.profile_run import ProfileBenchResult


def _int_list(option: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.strip().replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not a comma-separated list of integers, e.g. 4096,65536") from None
    if not values:
        raise UsageError(f"{option}: give at least one value")
    return values


def _fmt_stat(stat: Stat | None, fmt: str) -> str:
    if stat is None:
        return "-"
    if stat.n == 1 or stat.min == stat.max:
        return format(stat.p50, fmt)
    return f"{format(stat.p50, fmt)} [{format(stat.min, fmt)}-{format(stat.max, fmt)}]"


def _prompt_cell(point: PointResult) -> str:
    actual = point.prompt_tokens_actual
    if actual is None:
        return f"{point.prompt_tokens_target:,} / -"
    shown = f"{actual.p50:,.0f}" if actual.min == actual.max else f"{actual.min:,.0f}-{actual.max:,.0f}"
    return f"{point.prompt_tokens_target:,} / {shown}"


def _peak_cell(point: PointResult) -> str:
    """The fullest card's peak used VRAM during the point (``-`` when the cards could not be read)."""
    highest = point.peak_vram.highest_mib if point.peak_vram is not None else None
    return "-" if highest is None else f"{highest:,}"


def results_table(report: BenchReport, *, width: int) -> Table:
    """The headline numbers of every point, one row each; at narrow widths the secondary columns go first."""
    from servectl.cli.views.columns import Col
    from servectl.cli.views.table import fit_table

    columns = (
        Col("prompt tokens\ntarget / actual", justify="right"),
        Col("C", justify="right"),
        Col("ok", justify="right"),
        Col("TTFT s\np50 [min-max]", justify="right", priority=2),
        Col("prefill tok/s\np50", justify="right", priority=3),
        Col("decode tok/s\np50 [min-max]", justify="right"),
        Col("output\ntok/min", justify="right", priority=1),
        Col("peak VRAM\nMiB/card", justify="right", priority=1),
        Col("accept\nlength", justify="right", priority=4),
        Col("client\nCPU", justify="right", priority=5),
    )
    rows: list[tuple[str, ...]] = []
    for p in report.points:
        if p.skipped:
            rows.append((f"{p.prompt_tokens_target:,} / -", str(p.concurrency), "skipped", *("-",) * 7))
            continue
        accept = p.accept_length.p50 if p.accept_length is not None else p.server_accept_length
        cpu = p.client_cpu_fraction
        ok = f"{p.ok_count}/{len(p.requests)}"
        rows.append(
            (
                _prompt_cell(p),
                str(p.concurrency),
                ok if not p.flagged else f"[red]{ok}[/red]",
                _fmt_stat(p.ttft_s, ".3f"),
                _fmt_stat(p.prefill_tok_s, ",.0f").split(" ")[0],
                _fmt_stat(p.decode_tok_s, ".2f"),
                f"{rate:,.0f}" if (rate := p.output_tok_per_min) is not None else "-",
                _peak_cell(p),
                f"{accept:.2f}" if accept is not None else "-",
                f"{100 * cpu:.0f} %" if cpu is not None else "-",
            )
        )
    title = f"{report.model} @ {report.settings.url}  ({report.settings.max_tokens} output tokens)"
    return fit_table(columns, rows, width=width, title=title)


def _render_notes(console: Console, report: BenchReport) -> None:
    from rich.markup import escape

    for point in report.points:
        for warning in point.warnings:
            where = f"{point.prompt_tokens_target:,} tokens C{point.concurrency}"
            console.print(f"[yellow]warning[/yellow]: {where}: {escape(warning)}", highlight=False)
        for r in point.flagged:
            console.print(
                f"  flagged round {r.round_index + 1} stream {r.stream_index + 1}: {r.failure}: {r.error}",
                markup=False,
                highlight=False,
            )
    for warning in report.warnings:
        console.print(f"[yellow]warning[/yellow]: {escape(warning)}", highlight=False)
    for point in report.points:  # the table shows the fullest card; with several, each one here
        if point.peak_vram is not None and len(point.peak_vram.cards) > 1:
            cards = ", ".join(
                f"GPU{c.index} " + ("unknown" if c.peak_used_mib is None else f"{c.peak_used_mib:,} MiB")
                for c in point.peak_vram.cards
            )
            where = f"{point.prompt_tokens_target:,} tokens C{point.concurrency}"
            console.print(f"peak VRAM {where}: {cards}", highlight=False)
    if report.free_vram_after:
        cards = ", ".join(
            f"GPU{c.index} " + ("unknown" if c.memory_free_bytes is None else f"{c.memory_free_bytes // 2**20:,} MiB")
            for c in report.free_vram_after
        )
        console.print(f"free VRAM after the run: {cards}", highlight=False)


#: Each option's default is the settings field's (their one home; tests/unit/test_one_home.py holds to it).
_DEFAULT = BenchSettings()


def _comma_list(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


def bench_command(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            help="Profile to benchmark: its running service, with the plan hash and pins recorded.",
            show_default=False,
        ),
    ] = None,
    url: ServerUrl = None,
    model: ServedModel = None,
    prompt_tokens: Annotated[
        str, typer.Option("--prompt-tokens", help="Prompt-length targets in tokens, comma-separated.")
    ] = _comma_list(_DEFAULT.prompt_tokens),
    repeats: Annotated[
        int, typer.Option("--repeats", help="Measured rounds per length and concurrency.")
    ] = _DEFAULT.repeats,
    concurrency: Annotated[
        str,
        typer.Option("--concurrency", help="Concurrency levels, comma-separated (N simultaneous streams)."),
    ] = _comma_list(_DEFAULT.concurrency),
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Completion tokens per request (fixed).")
    ] = _DEFAULT.max_tokens,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for the JSON artifacts (default: STATE/bench/<UTC time>).",
            show_default=False,
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the taper plot (PNG) here.", show_default=False)
    ] = None,
    api_key_env: ApiKeyEnv = None,
    warmup: Annotated[
        bool, typer.Option("--warmup/--no-warmup", help="One unmeasured request per length.")
    ] = _DEFAULT.warmup,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Read timeout per request, seconds.")
    ] = _DEFAULT.timeout_s,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the prompt word salad.")] = _DEFAULT.seed,
) -> None:
    """Measure TTFT, prefill and decode tok/s at each prompt length and concurrency (or: bench compare)."""
    if ctx.invoked_subcommand is not None:
        return

    from servectl.host import from_env

    settings = BenchSettings(
        url=url or "",
        model=model,
        api_key_env=api_key_env,
        prompt_tokens=_int_list("--prompt-tokens", prompt_tokens),
        concurrency=_int_list("--concurrency", concurrency),
        repeats=repeats,
        max_tokens=max_tokens,
        warmup=warmup,
        timeout_s=timeout,
        seed=seed,
    )
    from servectl.cli.views.table import table_console

    console = table_console()
    from servectl.cli.views.progress import progress_bar

    with progress_bar(_describer(repeats)) as on_progress, from_env() as host:
        result = host.bench(name=name, settings=settings, out_dir=out, plot=plot, progress=on_progress)
    _print_result(console, result)
    result.raise_if_failed()


def _print_result(console: Console, result: ProfileBenchResult) -> None:
    console.print(results_table(result.report, width=console.width))
    _render_notes(console, result.report)
    console.print(f"artifacts: {result.out_dir}", highlight=False)
    if result.plot is not None:
        console.print(f"plot: {result.plot}", highlight=False)
    if result.plot_error is not None:
        console.print(f"warning: plot not written: {result.plot_error}", markup=False, highlight=False)


def _describer(repeats: int) -> Callable[[BenchProgressEvent], str]:
    def describe(event: BenchProgressEvent) -> str:
        if event.role == "probe":
            return "calibrating prompt length"
        what = f"{event.role} {event.prompt_tokens_target:,} tokens"
        if event.concurrency is not None:
            what += f" C{event.concurrency} round {(event.round_index or 0) + 1}/{repeats}"
        return what

    return describe


class _BenchGroup(TyperGroup):
    """``bench [NAME] [OPTIONS]`` measures; ``bench compare ...`` compares.

    A click group parses its own arguments first, so ``compare`` would become the profile NAME; here a first
    word that names a subcommand is parsed as click parses any group's subcommand: without the group's NAME
    argument (``get_params``) and with options ending at it (``Context.allow_interspersed_args``), so it and
    what follows go to the subcommand (a profile named ``compare`` cannot be benchmarked by name; use
    ``--url``). Options may follow NAME, as they could before ``bench`` became a group.
    """

    allow_interspersed_args = True

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            ctx.meta[_SUBCOMMAND_FIRST] = True
            ctx.allow_interspersed_args = False
        return super().parse_args(ctx, args)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        # a subcommand's run or its usage line (`bench compare`, not `bench [name] compare`): no NAME
        if ctx.meta.get(_SUBCOMMAND_FIRST) or ctx.command is not self:
            return [p for p in params if getattr(p, "param_type_name", "") != "argument"]
        return params


_SUBCOMMAND_FIRST = "servectl.bench.subcommand_first"  # ctx.meta key (click: a namespace per extension)


def register(app: typer.Typer) -> None:
    """Add ``bench`` and ``bench compare`` to the ``servectl`` app."""
    bench_app = typer.Typer(cls=_BenchGroup, invoke_without_command=True, no_args_is_help=False)
    bench_app.callback()(bench_command)
    bench_app.command("compare")(compare_command)
    app.add_typer(bench_app, name="bench")

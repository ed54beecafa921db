"""Options several commands share, declared once: the same flag has the same name, type and help everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from servectl.cli.complete import check_ids

ServerUrl = Annotated[
    str | None,
    typer.Option("--url", help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8180."),
]
ServedModel = Annotated[
    str | None,
    typer.Option("--model", help="Served model name (default: the only one /v1/models lists)."),
]
ApiKeyEnv = Annotated[
    str | None,
    typer.Option("--api-key-env", help="Environment variable holding the server's API key.", show_default=False),
]
ApiKeyFile = Annotated[
    Path | None,
    typer.Option("--api-key-file", help="File holding the API key (instead of --api-key-env).", show_default=False),
]
ForcedChecks = Annotated[
    list[str] | None,
    typer.Option(
        "--force",
        metavar="CHECK-ID",
        autocompletion=check_ids,
        help="skip one preflight check by id (repeatable), e.g. port.free; recorded with the result",
    ),
]

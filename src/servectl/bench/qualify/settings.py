"""What a qualification asks for: :class:`QualifySettings`, the one home of every qualify default.

Kept apart from the results (:mod:`servectl.bench.qualify.model`) so that ``servectl qualify --help`` reads its
options' defaults off these fields without loading the suite models (pydantic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.bench.settings import ApiKey, _base_url
from servectl.errors import UsageError

if TYPE_CHECKING:
    from servectl.bench.qualify.routed import RouteTarget
    from servectl.bench.qualify.suite import LoadedSuite


@dataclass(frozen=True)
class QualifySettings:
    """Where the service is, which suite to run and with which key: the one home of every qualify default.

    ``servectl qualify`` builds one from its options (each option's default is the field's) and passes it whole
    through :meth:`servectl.Host.qualify` to :func:`~servectl.bench.qualify.profile_run.run_profile_qualify`,
    which fills in the suite and what the profile's service tells (URL, model, key) and hands it to the runner.

    Attributes:
        url: Base URL of the OpenAI-compatible server (a trailing ``/v1`` is dropped); empty: the profile's
            running service (a run needs one or the other).
        suite: The suite (gates, counts, thresholds); None: chosen by the run (``--suite``, else the profile's
            ``qualify:``, else ``default``). The runner needs one (:attr:`loaded_suite`).
        model: Served model name; None takes the only model ``/v1/models`` lists.
        api_key: The key value (never recorded); None sends a placeholder the server ignores without a key.
        api_key_env: Name of the variable the key came from (recorded).
        api_key_file: File the key is read from instead of ``api_key_env``.
        via_gateway: The profile name is a gateway alias: run through the gateway with its key.
        seed: Seed of the long-context word salad.
        route: What a routed run must find behind ``url`` (``--via-gateway``); None for a direct run.
    """

    url: str = ""
    suite: LoadedSuite | None = None
    model: str | None = None
    api_key: ApiKey | None = field(default=None, repr=False, compare=False)
    api_key_env: str | None = None
    api_key_file: Path | None = None
    via_gateway: bool = False
    seed: int = 0
    route: RouteTarget | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", _base_url(self.url))
        if self.url and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"qualify url: {self.url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8180")

    @property
    def loaded_suite(self) -> LoadedSuite:
        """The suite to run (raises when none was given; :func:`run_profile_qualify` always gives one)."""
        if self.suite is None:
            raise UsageError("qualify settings: no suite; give QualifySettings(suite=load_suite(suite_path(None)))")
        return self.suite

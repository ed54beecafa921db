"""Adoption: ``docker inspect`` of a container servectl did not start -> a profile that reproduces it. Pure.

Why it lives in ``plan/``: it is the compiler read backwards. It needs the flag catalog (``profile/``) to
read the engine's argv and the compiler's conventions (entry point, API-key wrapper, mounts, labels) to
write a profile that compiles back to the same container - and nothing of the runtime. The adapters hand
over plain ``docker inspect`` data (dicts); :mod:`servectl.service.adopt` reads Docker, checks the result
with the loader and the diff of :mod:`servectl.plan.container_match`, and writes the file.

What is translated, and from where (each value's source is kept for the file's comment header):

* image: ``Config.Image``, pinned by the repo digest of the image the container runs (said when none);
* engine: the argv after ``python -m sglang.launch_server``, parsed with the catalog into the typed keys
  (``tp``, ``context_length``, ``speculative``, ...) and ``args``; flags and choices the catalog lacks
  are kept and declared in ``catalog_extend``; ``--api-key`` becomes ``serve.api_key_env``;
* env: what the container sets beyond its image; secret-looking values become ``${NAME}`` references;
* the mount that holds ``--model-path`` becomes ``model`` (with repo and revision for a Hugging Face
  snapshot folder); other mounts, ports or host network, GPUs (device requests, CDI, device nodes,
  ``NVIDIA_VISIBLE_DEVICES``), IPC, shared memory, ulimits, name, restart policy, init, stop timeout, labels.

What cannot be carried over is said in :attr:`Adoption.notes`, never dropped silently.

The modules, by seam: :mod:`.container` (inspect -> profile, section by section in :mod:`.sections`),
:mod:`.output` (the YAML file with its comment header), :mod:`.compose` (compose file -> the inspect document
its container would have), :mod:`.recipe` (a ``local-ai-registry/v1`` registry recipe -> the compose service
its docker launch is, and the recipe's problems, one line each), :mod:`.draft` (the result and error types).
This face re-exports them lazily; the modules import one another directly, never through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ADMIN_KEY_ENV": "servectl.plan.adopt.draft",
    "API_KEY_ENV": "servectl.plan.adopt.draft",
    "AdoptError": "servectl.plan.adopt.draft",
    "Adoption": "servectl.plan.adopt.draft",
    "SGLANG_DEFAULT_HOST": "servectl.plan.adopt.draft",
    "SGLANG_DEFAULT_PORT": "servectl.plan.adopt.draft",
    "adopt_container": "servectl.plan.adopt.container",
    "adoption_yaml": "servectl.plan.adopt.output",
    "compose_service_inspect": "servectl.plan.adopt.compose",
    "profile_name_for": "servectl.plan.adopt.draft",
    "RECIPE_SCHEMA": "servectl.plan.adopt.recipe",
    "Recipe": "servectl.plan.adopt.recipe",
    "adopt_recipe": "servectl.plan.adopt.recipe",
    "read_recipe": "servectl.plan.adopt.recipe",
    "recipe_inspect": "servectl.plan.adopt.recipe",
    "recipe_service": "servectl.plan.adopt.recipe",
}

__all__ = [*_EXPORTS]

# The one list of public names is _EXPORTS; __all__ is derived from it, and the block below says the same
# to type checkers (`X as X`: an explicit re-export). tests/unit/test_exports.py fails when it drifts.
if TYPE_CHECKING:
    from servectl.plan.adopt.compose import compose_service_inspect as compose_service_inspect
    from servectl.plan.adopt.container import adopt_container as adopt_container
    from servectl.plan.adopt.draft import ADMIN_KEY_ENV as ADMIN_KEY_ENV
    from servectl.plan.adopt.draft import API_KEY_ENV as API_KEY_ENV
    from servectl.plan.adopt.draft import SGLANG_DEFAULT_HOST as SGLANG_DEFAULT_HOST
    from servectl.plan.adopt.draft import SGLANG_DEFAULT_PORT as SGLANG_DEFAULT_PORT
    from servectl.plan.adopt.draft import AdoptError as AdoptError
    from servectl.plan.adopt.draft import Adoption as Adoption
    from servectl.plan.adopt.draft import profile_name_for as profile_name_for
    from servectl.plan.adopt.output import adoption_yaml as adoption_yaml
    from servectl.plan.adopt.recipe import RECIPE_SCHEMA as RECIPE_SCHEMA
    from servectl.plan.adopt.recipe import Recipe as Recipe
    from servectl.plan.adopt.recipe import adopt_recipe as adopt_recipe
    from servectl.plan.adopt.recipe import read_recipe as read_recipe
    from servectl.plan.adopt.recipe import recipe_inspect as recipe_inspect
    from servectl.plan.adopt.recipe import recipe_service as recipe_service


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

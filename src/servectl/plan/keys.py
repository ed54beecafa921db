"""The keys a service is given: where each is mounted, the engine flag it becomes, where it comes from

Where it comes from is a :class:`SecretRef` (a variable or a file, never the key itself); :func:`key_wrapper` reads
each key into its flag inside the container. Light on purpose: ``down`` and ``status`` read the key mounts
without loading the compiler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

API_KEY_CONTAINER_PATH = "/run/secrets/servectl-api-key"
ADMIN_KEY_CONTAINER_PATH = "/run/secrets/servectl-admin-api-key"
#: The engine flag each mounted key file becomes (SGLang's ``--api-key`` and ``--admin-api-key``).
KEY_FLAGS = {API_KEY_CONTAINER_PATH: "--api-key", ADMIN_KEY_CONTAINER_PATH: "--admin-api-key"}
#: The engine setting each flag sets, as its parser names it (``api_key``, ``admin_api_key``): also the stem of
#: the profile's fields (``serve.api_key_env``, ``serve.admin_api_key_file``).
KEY_DESTS = {path: flag[2:].replace("-", "_") for path, flag in KEY_FLAGS.items()}

#: Reads the keys from the mounted secret files and appends them to argv *inside* the process, so no key shows
#: in ``docker inspect`` nor in the host's process list (/proc/<pid>/cmdline keeps ``-c``). With the API key
#: alone it is the text it always was (the plan hashes of running services stay as they were).
_KEY_WRAPPER = (
    "import runpy,sys;"
    "{reads}"
    "sys.argv=[{module!r},*sys.argv[1:],{flags}];"
    "runpy.run_module({module!r},run_name='__main__',alter_sys=True)"
)
_KEY_VARIABLES = {API_KEY_CONTAINER_PATH: "k", ADMIN_KEY_CONTAINER_PATH: "a"}


def key_wrapper(container_paths: Sequence[str], module: str) -> str:
    """The ``python -c`` text that reads each key file into its flag, then runs ``module`` as ``__main__``."""
    reads = "".join(f"{_KEY_VARIABLES[p]}=open({p!r}).read().strip();" for p in container_paths)
    flags = ",".join(f"{KEY_FLAGS[p]!r},{_KEY_VARIABLES[p]}" for p in container_paths)
    return _KEY_WRAPPER.format(reads=reads, module=module, flags=flags)


@dataclass(frozen=True)
class SecretRef:
    """Where a key comes from (the API key, or the admin key by its ``container_path``); never the key itself."""

    source: str  # "env" or "file"
    name: str  # env var name or host file path
    host_path: str  # the file mounted into the container (written from the env var at start)
    container_path: str = API_KEY_CONTAINER_PATH

    @property
    def flag(self) -> str:
        """The engine flag the key becomes: ``--api-key`` or ``--admin-api-key``."""
        return KEY_FLAGS[self.container_path]

    @property
    def dest(self) -> str:
        """The engine setting the flag sets, as its parser names it: ``api_key`` or ``admin_api_key``."""
        return KEY_DESTS[self.container_path]

    @property
    def setting(self) -> str:
        """The profile field that names it: ``serve.api_key_env``, ``serve.admin_api_key_file``..."""
        return f"serve.{self.dest}_{self.source}"

    @property
    def label(self) -> str:
        """What the key is, in words: ``API key`` or ``admin key``."""
        return "admin key" if self.container_path == ADMIN_KEY_CONTAINER_PATH else "API key"

"""The stand-in engine's process: parse argv, walk the startup phases with SGLang's log lines, serve HTTP.

Entry points: ``python -m sglang.launch_server`` inside the stand-in image, ``python -m servectl.standin`` on
the host; both call :func:`main`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

from servectl.profile.memory_saver import load_memory_saver
from servectl.standin.argv import (
    PROG,
    ArgvError,
    error_text,
    help_text,
    load_catalog,
    parse_server_args,
    server_args_repr,
)
from servectl.standin.logs import EngineLog
from servectl.standin.memory import ledger_for
from servectl.standin.model import MemoryPlan, ModelConfigError, load_model_info, plan_memory
from servectl.standin.server import make_server
from servectl.standin.settings import PHASE_SHARES, SettingsError, StandinSettings
from servectl.standin.state import EngineState
from servectl.standin.transport import StandinServer

READY_LINE = "The server is fired up and ready to roll!"
MEMORY_SAVER = load_memory_saver()
#: What SGLang 0.5.23 prints for GLM with an fp8 KV cache on SM120 (sglang/srt/arg_groups/overrides.py).
SPARSE_MLA_LINE = (
    "Set DSA backends for GLM FP8 KV Cache on SM120/SM121: prefill=flashinfer_sparse_mla, decode=flashinfer_sparse_mla."
)
_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
_DEFAULT_ADAPTIVE_LADDER = {"1": {"candidate_steps": [1, 3, 5, 7]}}


class Terminated(BaseException):
    """SIGTERM/SIGINT arrived: unwind and exit 0 (BaseException so that no ``except Exception`` eats it)."""


class StartupCrash(Exception):
    """An injected (``STANDIN_CRASH_AT``) or simulated startup failure: exit with ``exit_code``.

    Raised from the startup sequence, caught in :meth:`Engine.run`.
    """

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


class Engine:
    """One stand-in server process: startup sequence on the calling thread, HTTP on a daemon thread."""

    def __init__(self, settings: StandinSettings, args: dict[str, Any], *, stdout: TextIO, stderr: TextIO) -> None:
        self.settings = settings
        self.args = args
        self.log = EngineLog(stdout)
        self.stderr = stderr
        self.state: EngineState | None = None
        self.server: StandinServer | None = None
        self._server_thread: threading.Thread | None = None

    # -- process -----------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until SIGTERM (exit 0), a startup failure (its exit code) or forever."""
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
            on_sigterm = signal.SIG_IGN if self.settings.ignore_sigterm else _raise_terminated
            signal.signal(signal.SIGTERM, on_sigterm)
            signal.signal(signal.SIGINT, _raise_terminated)
        try:
            return self._run()
        except Terminated:
            self._log_shutdown()
            return 0
        except StartupCrash as crash:
            return crash.exit_code
        finally:
            self.close()
            for sig, handler in previous.items():  # run in-process (tests): give the caller its handlers back
                signal.signal(sig, handler)

    def close(self) -> None:
        """Stop listening (request threads are daemons and end with the process)."""
        if self.server is not None:
            if self._server_thread is not None:
                self.server.shutdown()
            self.server.server_close()
            self.server = None

    def _log_shutdown(self) -> None:
        if self.server is not None:
            self.log.uvicorn("Shutting down")
            self.log.uvicorn("Waiting for application shutdown.")
            self.log.uvicorn("Application shutdown complete.")
            self.log.uvicorn(f"Finished server process [{os.getpid()}]")

    def _run(self) -> int:
        args = self.args
        self.log.info(f"server_args={server_args_repr(args)}")
        try:
            model = load_model_info(str(args["model_path"]))
        except ModelConfigError as err:
            self.stderr.write("\n".join(err.lines) + "\n")
            self.stderr.flush()
            return 1
        self._check_speculative_adaptive()
        context_length = int(args.get("context_length") or model.derived_context_length)
        memory = plan_memory(model, args, context_length)
        self.state = EngineState(
            settings=self.settings,
            args=args,
            log=self.log,
            context_length=context_length,
            architecture=model.architecture,
            eos_token_id=_first_int(model.config.get("eos_token_id")),
            kv_tokens=memory.kv_tokens,
            hidden_size=model.hidden_size,
            memory=ledger_for(
                args, memory.weights_gb, memory.k_size_gb + memory.v_size_gb, memory.cuda_graph_gb, self.settings
            ),
        )
        if self.settings.listen_at == "start":
            self._listen()
        total = self.settings.startup_delay_s
        self._phase_weights(total * PHASE_SHARES["weights"], model.architecture, model.torch_dtype, memory)
        self._phase_kv_cache(total * PHASE_SHARES["kv_cache"], memory)
        self._phase_cuda_graph(total * PHASE_SHARES["cuda_graph"], memory, context_length)
        if self.settings.listen_at == "uvicorn":
            self._listen()
        self._log_uvicorn_start()
        self._phase_warmup(total * PHASE_SHARES["warmup"])
        for line in self.settings.extra_log_lines:
            self.log.raw(line)
        self.state.phase = "ready"
        self.state.ready.set()
        self.log.info(READY_LINE)
        while not self.state.dead.wait(1.0):
            pass
        self._die()

    def _die(self) -> NoReturn:
        """SGLang's way down after a call killed its scheduler (the memory-saver catalog's ``crash``): the
        scheduler's lines, the server's SIGQUIT handler, its process tree killed (exit status 137)."""
        assert self.state is not None and self.state.death is not None
        crash = MEMORY_SAVER["crash"]
        death = self.state.death
        pid = str(os.getpid())
        if death.exception:
            self.log.tp(_fill(crash["scheduler_exception"], traceback=death.scheduler_lines[0]))
            self.log.raw("\n".join(death.scheduler_lines[1:]))
        else:
            self.log.raw("\n".join(death.scheduler_lines))
            self.log.info(
                _fill(
                    crash["subprocess_exit"],
                    name=str(crash["scheduler_name"]).format(rank=0),
                    proc_pid=str(os.getpid() + 1),
                    proc_exitcode=str(MEMORY_SAVER["library"]["exit_status"]),
                )
            )
        self.log.info(
            _fill(
                crash["sigquit"],
                signum="3",
                frame="<frame at 0x7f0c2a1b3d40, file "
                "'/usr/lib/python3.12/asyncio/base_events.py', line 1987, code _run_once>",
            )
        )
        self.log.info(_fill(crash["kill_process_tree"], parent_pid=pid, include_parent="True", **{"os_getpid()": pid}))
        self.state.gone.set()
        raise StartupCrash(int(crash["exit_status"]))

    # -- HTTP --------------------------------------------------------------------------------------------
    def _listen(self) -> None:
        assert self.state is not None
        host, port = str(self.args.get("host") or "127.0.0.1"), int(self.args.get("port") or 30000)
        try:
            self.server = make_server(self.state, host, port)
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            self.log.uvicorn(
                f"[Errno {err.errno}] error while attempting to bind on address ({host!r}, {port}): {reason}",
                level="ERROR",
            )
            raise StartupCrash(1) from None
        self._server_thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name="standin-http", daemon=True
        )
        self._server_thread.start()

    def _log_uvicorn_start(self) -> None:
        assert self.server is not None
        host = str(self.args.get("host") or "127.0.0.1")
        shown = f"[{host}]" if ":" in host else host
        self.log.uvicorn(f"Started server process [{os.getpid()}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        self.log.uvicorn(f"Uvicorn running on http://{shown}:{self.server.server_port} (Press CTRL+C to quit)")

    # -- phases ------------------------------------------------------------------------------------
    def _enter(self, phase: str) -> None:
        assert self.state is not None
        self.state.phase = phase

    def _checkpoint(self, phase: str, remaining_s: float) -> None:
        """Injected failures, once a phase has begun: fatal line, stall, crash."""
        s = self.settings
        if s.fatal_line is not None and s.fatal_at == phase:
            time.sleep(remaining_s / 2)
            self.log.raw(s.fatal_line)
            _hang()
        if s.stall_at == phase:
            _hang()
        if s.crash_at == phase:
            time.sleep(remaining_s / 2)
            self._crash(phase)

    def _crash(self, phase: str) -> NoReturn:
        self.log.tp("Scheduler hit an exception: Traceback (most recent call last):")
        self.log.raw(
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2841, in '
            "run_scheduler_process\n"
            "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank)\n"
            f"RuntimeError: stand-in crash injected at startup phase '{phase}' (STANDIN_CRASH_AT={phase})"
        )
        self.log.info("Received sigquit from a child process. It usually means the child failed.")
        raise StartupCrash(self.settings.crash_exit_code)

    def _phase_weights(self, duration_s: float, architecture: str, dtype: str, memory: MemoryPlan) -> None:
        phase_began = time.monotonic()
        self._enter("weights")
        args = self.args
        if not args.get("attention_backend"):
            self.log.info("Attention backend not specified. Use flashinfer backend by default.")
        if args.get("dsa_decode_backend") == "flashinfer_sparse_mla":
            self.log.info(SPARSE_MLA_LINE)
        time.sleep(duration_s * 0.1)
        self.log.tp(f"Load weight begin. avail mem={memory.available_before_gb:.2f} GB")
        self._checkpoint("weights", duration_s * 0.9)
        files = _weight_files(str(args["model_path"])) if self.settings.read_weights else []
        shards = len(files) or memory.shard_count
        step = duration_s * 0.9 / shards
        rate = shards / (duration_s * 0.9) if duration_s > 0 else 0.0
        self.log.raw(f"Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]")
        begin = time.monotonic()
        for done in range(1, shards + 1):
            time.sleep(step)
            if files:
                _read_through(files[done - 1])
            elapsed = time.monotonic() - begin
            if files:  # the rate is what the reading gives
                rate = done / elapsed if elapsed > 0 else 0.0
            left = (shards - done) / rate if rate else 0.0
            shown_rate = f"{rate:5.2f}it/s" if rate else "?it/s"
            self.log.raw(
                f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed "
                f"| {done}/{shards} [{_mmss(elapsed)}<{_mmss(left)}, {shown_rate}]"
            )
        took = time.monotonic() - phase_began if files else duration_s
        self.log.tp(
            f"Load weight end. elapsed={took:.2f} s, type={architecture}, dtype=torch.{dtype}, "
            f"avail mem={memory.available_after_weights_gb:.2f} GB, mem usage={memory.weights_gb:.2f} GB."
        )

    def _phase_kv_cache(self, duration_s: float, memory: MemoryPlan) -> None:
        self._enter("kv_cache")
        self._checkpoint("kv_cache", duration_s)
        time.sleep(duration_s)
        self.log.tp(
            f"KV Cache is allocated. dtype: {self.args.get('kv_cache_dtype') or 'torch.bfloat16'}, "
            f"#tokens: {memory.kv_tokens}, K size: {memory.k_size_gb:.2f} GB, "
            f"V size: {memory.v_size_gb:.2f} GB"
        )
        self.log.tp(f"Memory pool end. avail mem={memory.available_after_kv_gb:.2f} GB")

    def _phase_cuda_graph(self, duration_s: float, memory: MemoryPlan, context_length: int) -> None:
        self._enter("cuda_graph")
        args = self.args
        disabled = bool(args.get("disable_cuda_graph")) or args.get("cuda_graph_backend_decode") == "disabled"
        if not disabled or self.settings.never_ready:
            self.log.tp(
                f"Capture target decode CUDA graph begin. backend={_decode_graph_backend(args)}, "
                f"num_tokens_per_req=1, avail mem={memory.available_after_kv_gb:.2f} GB"
            )
        self._checkpoint("cuda_graph", duration_s)
        if self.settings.never_ready:
            self._capture_forever(memory)
        if not disabled:
            sizes = _graph_batch_sizes(args)
            begin = time.monotonic()
            for done, bs in enumerate(reversed(sizes), start=1):
                time.sleep(duration_s / len(sizes))
                elapsed = time.monotonic() - begin
                self.log.raw(
                    f"Capturing batches (bs={bs} avail_mem={memory.available_after_kv_gb:.2f} GB): "
                    f"{100 * done // len(sizes):3d}%| {done}/{len(sizes)} [{_mmss(elapsed)}<00:00]"
                )
            self.log.tp(
                f"Capture target decode CUDA graph end. bs={sizes}, elapsed={time.monotonic() - begin:.2f} s, "
                f"mem usage={memory.cuda_graph_gb:.2f} GB, avail mem={memory.available_after_graphs_gb:.2f} GB."
            )
        else:
            time.sleep(duration_s)
        self.log.tp(
            f"max_total_num_tokens={memory.kv_tokens}, "
            f"chunked_prefill_size={args.get('chunked_prefill_size')}, "
            f"max_prefill_tokens={args.get('max_prefill_tokens')}, "
            f"max_running_requests={args.get('max_running_requests')}, context_len={context_length}, "
            f"available_gpu_mem={memory.available_after_graphs_gb:.2f} GB"
        )

    def _capture_forever(self, memory: MemoryPlan) -> NoReturn:
        """``STANDIN_NEVER_READY``: a capture progress line every second, forever."""
        begin = time.monotonic()
        count = 0
        while True:
            time.sleep(1.0)
            count += 1
            self.log.raw(
                f"Capturing batches (bs=1 avail_mem={memory.available_after_kv_gb:.2f} GB): {count}it "
                f"[{_mmss(time.monotonic() - begin)}, 1.00it/s]"
            )

    def _phase_warmup(self, duration_s: float) -> None:
        self._enter("warmup")
        self._checkpoint("warmup", duration_s)
        if self.args.get("skip_server_warmup"):
            time.sleep(duration_s)
            return
        time.sleep(duration_s / 3)
        self.log.access("127.0.0.1:59386", "GET /get_model_info HTTP/1.1", 200, "OK")
        self.log.tp(
            "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
            "#running-req: 0, #queue-req: 0, #pending-token: 0, "
        )
        time.sleep(duration_s * 2 / 3)
        self.log.access("127.0.0.1:59392", "POST /generate HTTP/1.1", 200, "OK")

    # -- speculative decoding ----------------------------------------------------------------------
    def _check_speculative_adaptive(self) -> None:
        """Adaptive speculation: EAGLE/EAGLE3 with top-k 1 only (else a warning), num-steps on the ladder."""
        args = self.args
        if not args.get("speculative_adaptive"):
            return
        algorithm = str(args.get("speculative_algorithm") or "").upper()
        topk = args.get("speculative_eagle_topk")
        if algorithm not in _ADAPTIVE_ALGORITHMS or topk not in (None, 1):
            self.log.info(
                f"speculative_adaptive disabled: only EAGLE/EAGLE3 with speculative_eagle_topk=1 are supported "
                f"(got algorithm={args.get('speculative_algorithm')}, topk={topk}). "
                "Falling back to static speculative params."
            )
            return
        ladder: Mapping[str, Any] = _DEFAULT_ADAPTIVE_LADDER
        config_path = args.get("speculative_adaptive_config")
        if config_path:
            try:
                loaded = json.loads(Path(str(config_path)).read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                self._fail_startup(f"{type(err).__name__}: speculative adaptive config {config_path!r}: {err}")
            if (
                not isinstance(loaded, dict)
                or not loaded
                or not all(
                    isinstance(v, dict)
                    and isinstance(v.get("candidate_steps"), list)
                    and v["candidate_steps"]
                    and all(isinstance(s, int) and s >= 0 for s in v["candidate_steps"])
                    for v in loaded.values()
                )
            ):
                self._fail_startup(
                    f"ValueError: speculative adaptive config {config_path!r} must map batch sizes to "
                    '{"candidate_steps": [non-negative ints, ...]}'
                )
            ladder = loaded
        steps = sorted({int(s) for entry in ladder.values() for s in entry["candidate_steps"]})
        num_steps = args.get("speculative_num_steps")
        if num_steps is not None and int(num_steps) not in steps:
            self._fail_startup(
                f"ValueError: speculative_num_steps={num_steps} is not one of the adaptive candidate steps {steps}"
            )
        self.log.tp(f"AdaptiveSpeculativeParams initialized: steps={num_steps or steps[0]}, candidate_steps={steps}")

    def _fail_startup(self, last_line: str) -> NoReturn:
        self.stderr.write(
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 612, in __post_init__\n'
            "    self._handle_speculative_decoding()\n"
            f"{last_line}\n"
        )
        self.stderr.flush()
        raise StartupCrash(1)


def _decode_graph_backend(args: Mapping[str, Any]) -> str:
    config = args.get("cuda_graph_config")
    decode = config.get("decode") if isinstance(config, dict) else None
    backend = decode.get("backend") if isinstance(decode, dict) else None
    return str(backend or args.get("cuda_graph_backend_decode") or "full")


def _graph_batch_sizes(args: Mapping[str, Any]) -> list[int]:
    explicit = args.get("cuda_graph_bs")
    if isinstance(explicit, list) and explicit:
        return sorted(int(b) for b in explicit)
    limit = int(args.get("cuda_graph_max_bs_decode") or args.get("cuda_graph_max_bs") or 8)
    sizes = [1, 2, 4, *range(8, limit + 1, 8)]
    return [b for b in sizes if b <= max(1, limit)]


def _first_int(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: What counts as a weight file: :data:`servectl.adapters.host.WEIGHT_SUFFIXES` (a unit test keeps them equal; the
#: stand-in is standard-library only and cannot import the adapters).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".npz")


def _weight_files(model_path: str) -> list[str]:
    """The regular weight files directly in the model folder, in shard (name) order."""
    folder = Path(model_path)
    try:
        names = sorted(p for p in folder.iterdir() if p.name.endswith(WEIGHT_SUFFIXES) and p.is_file())
    except OSError:
        return []
    return [str(p) for p in names]


def _read_through(path: str, chunk_bytes: int = 8 * 2**20) -> int:
    """Read the whole file as a checkpoint loader does (from disk, or from the page cache when it is there)."""
    read = 0
    buffer = memoryview(bytearray(chunk_bytes))
    with open(path, "rb", buffering=0) as handle:
        while got := handle.readinto(buffer):
            read += got
    return read


def _mmss(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{int(seconds // 60):02d}:{math.floor(seconds % 60):02d}"


def _fill(entry: Mapping[str, Any], **values: str) -> str:
    """A catalog line (``template`` with ``{name}`` fields) with its values."""
    text = str(entry["template"])
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text.replace("{{", "{").replace("}}", "}")


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def _hang() -> NoReturn:
    while True:
        time.sleep(3600)


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the stand-in like ``python -m sglang.launch_server [argv]``; return the process exit status.

    Exit status: 0 after SIGTERM/SIGINT (or ``--help``), 2 for flags the catalog rejects or bad ``STANDIN_*``
    values, 1 when ``config.json`` is missing or the port is taken, ``STANDIN_CRASH_EXIT_CODE`` for an
    injected crash.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        settings = StandinSettings.from_environ(env)
        catalog = load_catalog(settings.catalog_name, settings.catalog_extension)
    except (SettingsError, ValueError) as problem:
        err.write(f"{PROG}: error: {problem}\n")
        return 2
    if "-h" in argv or "--help" in argv:
        out.write(help_text(catalog))
        return 0
    try:
        args = parse_server_args(catalog, argv)
    except ArgvError as problem:
        err.write(error_text(catalog, str(problem)))
        err.flush()
        return 2
    return Engine(settings, args, stdout=out, stderr=err).run()


def run_process(argv: Sequence[str] | None = None) -> NoReturn:
    """The stand-in as a process (``python -m servectl.standin``, the image's ``sglang.launch_server``).

    A failed run ends the process at once once its lines are out (``os._exit``): its request threads are
    daemons, and an interpreter shutting down while one of them holds stdout's lock aborts (exit status 134,
    SIGABRT) instead of the status the failure stands for (137 for SGLang's killed process tree: seen once in a
    clean-clone CI run under load).
    """
    code = main(argv)
    if code == 0:
        sys.exit(0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code)

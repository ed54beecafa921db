"""A stand-in for the SGLang server, for tests and demos on machines without a GPU.

It answers ``python3 -m sglang.launch_server [flags]`` the way SGLang 0.5.23 does, from the outside: flags are
checked against servectl's flag catalog (argparse-style error and exit status 2 for unknown flags or bad
values), ``config.json`` is read from ``--model-path``, the startup log walks SGLang's phases with its line
formats, and an HTTP server answers SGLang's health, model and OpenAI-compatible endpoints with paced,
counted tokens.
It is standard-library only (plus :mod:`servectl.profile.catalog`), so that it runs in a bare image that holds only a
Python interpreter: see :mod:`servectl.standin.image`. On the host: ``python -m servectl.standin [flags]``.

Behaviour is set with environment variables:

``STANDIN_STARTUP_DELAY_S``
    Total startup time in seconds (float, default 2.0), spread over the phases ``weights`` (45 %),
    ``kv_cache`` (10 %), ``cuda_graph`` (30 %) and ``warmup`` (15 %).
``STANDIN_READ_WEIGHTS=1``
    During the ``weights`` phase, really read every weight file in ``--model-path`` (``*.safetensors``,
    ``*.bin``, ...), one checkpoint shard per file, at whatever rate the disk (or the page cache) gives; the
    phase takes its share of the delay plus the reading. Without it there are no weights to read.
``STANDIN_TOKEN_RATE``
    Decode rate in tokens per second per request (default 50).
``STANDIN_TAPER``
    Decode rate that changes with prompt length: ``PROMPT_TOKENS:TOK_S`` pairs, comma-separated, prompt tokens
    rising, e.g. ``4096:160,65536:253,200000:160`` (rises, then falls). Between two pairs the rate is linear in
    log(prompt tokens); before the first and after the last it stays flat. Replaces ``STANDIN_TOKEN_RATE`` for
    completions; set it in a profile's ``engine.env`` like any other ``STANDIN_*`` variable.
``STANDIN_BATCH_RATES``
    Decode rate that changes with the requests running (SGLang's ``#running-req``, the request itself included):
    ``RUNNING_REQUESTS:TOK_S`` pairs, e.g. ``1:208,4:188`` (a variant faster alone and slower at 4), linear in
    log(running requests) between pairs and flat outside, re-read for every chunk. Replaces
    ``STANDIN_TOKEN_RATE``; not together with ``STANDIN_TAPER``.
``STANDIN_RATE_NOISE`` / ``STANDIN_RATE_NOISE_SEED``
    Each request's decode rate times a log-normal factor of this spread (e.g. ``0.03``: about 3 %; default 0),
    drawn from a generator seeded with the seed (unseeded when unset): a variant whose speed scatters.
``STANDIN_CHUNK_TOKENS``
    Tokens per streamed chunk (default 1); more than one looks like speculative decoding.
``STANDIN_ACCEPT_LENGTH``
    Speculative accept length to report (default: the chunk size). Reported whenever chunks are larger than
    one token or this is set: in ``usage`` of chat/completions responses as ``spec_accept_length`` and
    ``spec_verify_ct`` (plus SGLang's ``completion_tokens_details`` with accepted/rejected draft tokens), in
    ``meta_info`` of ``/generate`` (``spec_accept_length``, ``spec_verify_ct``, SGLang's names), and as
    ``accept len: X.XX`` in the ``Decode batch`` log lines.
``STANDIN_PREFILL_RATE``
    Prefill speed in prompt tokens per second (default 0: no prefill delay).
``STANDIN_CRASH_AT`` / ``STANDIN_CRASH_EXIT_CODE``
    At the named phase (``weights``, ``kv_cache``, ``cuda_graph``, ``warmup``), print a traceback-like
    ``Scheduler hit an exception`` block and exit with the code (default 1).
``STANDIN_NEVER_READY=1``
    After the KV cache, print a CUDA-graph capture progress line every second forever; ``/health`` stays 503.
``STANDIN_STALL_AT``
    At the named phase, stop printing and hang (``/health`` stays 503).
``STANDIN_FATAL_LINE`` / ``STANDIN_FATAL_AT``
    Print this line at the named phase (default ``kv_cache``), e.g.
    ``torch.OutOfMemoryError: CUDA out of memory``, then hang like a wedged SGLang.
``STANDIN_IGNORE_SIGTERM=1``
    Ignore SIGTERM (only SIGKILL ends the process). Otherwise SIGTERM (and SIGINT) exit 0 at once.
``STANDIN_EXTRA_LOG``
    Lines separated by ``|``, printed as they are just before the ready line.
``STANDIN_COMPLETION_SHORTFALL``
    Return this many fewer completion tokens than asked (finish reason ``stop``).
``STANDIN_DIE_AFTER_TOKENS``
    Drop the connection after this many completion tokens of every request: a stream ends without ``[DONE]``
    (and without the end of the chunked body); a non-streamed request gets no response. The process lives on.
``STANDIN_CATALOG`` / ``STANDIN_CATALOG_EXTEND``
    The flag catalog to check argv against (default ``sglang-0.5.23``), and a JSON extension of it in the
    shape :meth:`servectl.profile.catalog.FlagCatalog.extended` takes, for custom images that add flags or choices.
``STANDIN_TOOL_FAULT`` / ``STANDIN_JSON_FAULT`` / ``STANDIN_REASONING_FAULT`` / ``STANDIN_NEEDLE_MAX_TOKENS``
    Chat requests that offer tools, ask for JSON (``response_format``), set ``chat_template_kwargs.enable_thinking``,
    send a tool result or hold a needle get scripted answers shaped as SGLang returns them (see
    :mod:`servectl.standin.behaviour`); these variables break them on purpose (``wrong_function``,
    ``malformed_args``, ``schema_args``, ``stream_mismatch``, ``no_continue``; ``invalid``, ``schema``; ``leak``)
    or limit needle retrieval to prompts of at most N tokens.
``STANDIN_ERROR_EVERY`` / ``STANDIN_USAGE_SKEW``
    Every k-th generation request fails with HTTP 500; ``usage`` reports N more completion tokens than were sent.
``STANDIN_RELEASE_S`` / ``STANDIN_RESUME_S`` / ``STANDIN_RELEASE_FAULT`` / ``STANDIN_RESUME_FAULT``
    SGLang's memory saver (``POST /release_memory_occupation``, ``POST /resume_memory_occupation``, see
    :mod:`servectl.standin.memory`): how long a release and a resume take (default 0.2 s and 0.5 s), a release
    that answers 200 but frees nothing (``keep``), a resume that is refused (``fail``) or whose weights come back
    wrong (``wrong``: every completion after it is wrong). What kills SGLang kills the stand-in, with SGLang's
    lines and exit status 137: a release while a request runs, a second release of a region, a resume of a tag
    that was not released. ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` (SGLang's own variable) puts graph memory in the
    ``cuda_graph`` region, otherwise releasing that tag frees nothing. ``STANDIN_RELEASE_FAULT=die`` /
    ``STANDIN_RESUME_FAULT=die``: the call kills the server as SGLang's does on a busy server (a request that came
    between a client's idle check and its release) or on a resume of what it did not release.
``STANDIN_BACKUP_GBPS``
    With ``--enable-weights-cpu-backup``, a release and a resume of ``weights`` also take one rank's weights
    divided by this rate (GB/s; default 0: no such time), as the copy to and from host RAM does.
``STANDIN_LISTEN_AT``
    ``start`` (default): listen from the first moment and answer 503 while starting. ``uvicorn``: listen only
    from the ``Uvicorn running`` line on, as real SGLang does (connections are refused before that).

Log: every line is flushed. SGLang's format, ``[2026-11-30 10:00:00] ...`` for the main process and
``[2026-11-30 10:00:00 TP0] ...`` for the scheduler: ``server_args=ServerArgs(...)``, ``Load weight begin``,
``Loading safetensors checkpoint shards:  50% Completed | 2/4 [...]``, ``Load weight end``,
``KV Cache is allocated. dtype: ..., #tokens: N, ...``, ``Capture target decode CUDA graph begin/end``,
uvicorn's ``Uvicorn running on http://HOST:PORT``, then ``The server is fired up and ready to roll!``. With
``--dsa-decode-backend flashinfer_sparse_mla`` it logs SGLang's ``Set DSA backends for GLM FP8 KV Cache ...``.

Tokens (see :mod:`servectl.standin.tokens`): prompt tokens are counted by a documented regular expression
plus a per-message overhead of 4; completions are exactly ``max_tokens`` long (16 tokens with finish reason
``stop`` when unset), paced at absolute deadlines so that the measured decode rate is the set rate. A prompt
that does not fit the context length (``--context-length``, else ``max_position_embeddings``) is a 400 error
worded like SGLang's. With ``--api-key``, every route but ``/health*`` needs ``Authorization: Bearer <key>``
(else 401); with ``--admin-api-key`` the memory saver's release and resume routes (SGLang's ``ADMIN_OPTIONAL``
level, from the memory-saver catalog) take that key and not the API key.
"""

from servectl.standin.engine import READY_LINE, SPARSE_MLA_LINE, main

__all__ = ["READY_LINE", "SPARSE_MLA_LINE", "main"]

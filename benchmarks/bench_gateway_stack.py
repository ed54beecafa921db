"""The measurement that chose the gateway's HTTP stack: one pass-through proxy in uvicorn + starlette + httpx and
in aiohttp, each in its own process, against the host stand-in (results: results/gateway-stack.md).

    pip install uvicorn starlette   # in a throwaway venv: neither is a servectl dependency
    PYTHONPATH=src python benchmarks/bench_gateway_stack.py
"""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def proxy(kind: str, upstream: str, port: int) -> None:
    if kind == "starlette":
        import httpx
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import StreamingResponse
        from starlette.routing import Route

        limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        client = httpx.AsyncClient(base_url=upstream, timeout=None, limits=limits)

        async def forward(request):  # type: ignore[no-untyped-def]
            body = await request.body()
            req = client.build_request(
                "POST", request.url.path, content=body, headers={"content-type": "application/json"}
            )
            resp = await client.send(req, stream=True)

            async def gen():  # type: ignore[no-untyped-def]
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()

            return StreamingResponse(
                gen(), status_code=resp.status_code, headers={"content-type": resp.headers.get("content-type", "")}
            )

        app = Starlette(routes=[Route("/v1/chat/completions", forward, methods=["POST"])])
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        return
    from aiohttp import ClientSession, TCPConnector, web

    async def main() -> None:
        session = ClientSession(upstream, connector=TCPConnector(limit=512))

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            async with session.post(request.path, data=body, headers={"content-type": "application/json"}) as up:
                resp = web.StreamResponse(
                    status=up.status, headers={"content-type": up.headers.get("content-type", "")}
                )
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    asyncio.run(main())


def measure(port: int, n: int, stream: bool) -> tuple[float, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    body = json.dumps(
        {
            "model": "demo",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 64 if stream else 1,
            "stream": stream,
        }
    )
    times = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = conn.getresponse()
        r.read(1)
        times.append((time.perf_counter() - t) * 1000)
        r.read()
    q = statistics.quantiles(times, n=100)
    return round(q[49], 3), round(q[98], 3)


def main() -> None:
    if len(sys.argv) == 4:
        proxy(sys.argv[1], sys.argv[2], int(sys.argv[3]))
        return
    from servectl.standin.process import HostStandin, free_port

    flags = ["--model-path", str(REPO / "examples" / "demo-model"), "--served-model-name", "demo"]
    with HostStandin(flags, env={"STANDIN_TOKEN_RATE": "100000", "STANDIN_CHUNK_TOKENS": "1"}) as engine:
        engine.wait_ready()
        procs = {}
        for kind in ("starlette", "aiohttp"):
            port = free_port()
            procs[kind] = (port, subprocess.Popen([sys.executable, __file__, kind, engine.base_url, str(port)]))
        time.sleep(2)
        for rnd in range(2):
            for name, port in [("direct", engine.port), *((k, v[0]) for k, v in procs.items())]:
                measure(port, 50, False)
                print(
                    rnd,
                    name,
                    "non-streamed p50/p99 ms",
                    measure(port, 400, False),
                    "streamed TTFB p50/p99 ms",
                    measure(port, 200, True),
                    flush=True,
                )
        for _, p in procs.values():
            p.terminate()


if __name__ == "__main__":
    main()

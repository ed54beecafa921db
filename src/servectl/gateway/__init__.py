"""servectl gateway: one authenticated, alias-routed OpenAI-compatible endpoint that outlives every swap.

``servectl gateway run`` (or ``up``) listens on 127.0.0.1:8080 by default; clients ask for an alias and the
gateway sends each request to the servectl service that runs that alias's profile now. ``swap``, ``up``,
``down`` and ``rollback`` tell it (admin socket, :mod:`servectl.adapters.gateway_admin`) to hold and drain
the aliases they change, so clients see a short wait instead of a refused connection.

Modules: ``config`` (the YAML file), ``keys`` (digests, ``keys create``), ``routes`` (alias -> service,
pure), ``admission`` (holds, drains), ``ratelimit``, ``metrics``, ``proxy`` (the aiohttp app), ``admin``
(the admin socket), ``serve`` (running it), ``container`` (``gateway up|down|status|logs``).
"""

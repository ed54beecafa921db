"""Render a launch plan to files other tools run: a Compose file, Kubernetes manifests. Pure: no I/O.

Everything comes from the :class:`~servectl.plan.compile.LaunchPlan` that ``servectl up`` would run, so the files
cannot drift from it; :mod:`servectl.render.files` loads profiles, compiles portable plans and writes files.
"""

from __future__ import annotations

from servectl.render.compose import compose_notes, render_compose
from servectl.render.k8s import k8s_notes, render_k8s
from servectl.render.yaml_out import GENERATED_MARK, to_yaml

__all__ = ["GENERATED_MARK", "compose_notes", "k8s_notes", "render_compose", "render_k8s", "to_yaml"]

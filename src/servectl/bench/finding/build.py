"""The claims of a finding, computed from its artifacts: facts, headline, gates, free VRAM, host.

Each claim names the artifact paths (inside the finding) and JSON pointers it is computed from, so that
`servectl claims verify` can compute it again. Gates are handled generically by their case counts: a new
gate kind needs nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.bench.finding.ledger import PointerMissing, apply, format_value, pointer_values

DOWN2 = {"decimals": 2, "rounding": "down"}  # more is better: never show more than measured
UP2 = {"decimals": 2, "rounding": "up"}  # less is better: never show less than measured
EXACT = {"decimals": 0, "rounding": "exact"}
FLOOR0 = {"decimals": 0, "rounding": "down"}


@dataclass(frozen=True)
class FindingSources:
    """Where the copied artifacts sit in the finding (paths relative to it) and their parsed content."""

    docs: Mapping[str, Any]
    profile: str
    summary: str
    points: Sequence[str]
    qualification: str | None = None
    bench_manifest: str | None = None


@dataclass
class ClaimSet:
    """Claims as they are built, in order, by id."""

    docs: Mapping[str, Any]
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(
        self,
        claim_id: str,
        label: str,
        *,
        method: str,
        artifact: str,
        pointers: Sequence[str],
        unit: str = "",
        fmt: Mapping[str, Any] = EXACT,
        conditions: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Compute and record one claim; None (nothing recorded) when the artifact does not give a value."""
        values: list[Any] = []
        try:
            for pointer in pointers:
                values.extend(pointer_values(self.docs[artifact], pointer))
            value = apply(method, values) if values or method in ("count", "count_true") else None
        except (PointerMissing, ValueError):
            return None
        if value is None:
            return None
        claim: dict[str, Any] = {
            "id": claim_id,
            "revision": 1,
            "status": "current",
            "origin": "measured",
            "label": label,
            "unit": unit,
            "value": value,
            "text": format_value(value, fmt),
            "format": dict(fmt),
            "compute": {"method": method, "sources": [{"artifact": artifact, "pointer": p} for p in pointers]},
        }
        if conditions:
            claim["conditions"] = {k: v for k, v in conditions.items() if k != "claims"}
            claim["condition_claims"] = dict(conditions.get("claims") or {})
        self.claims[claim_id] = claim
        return claim


def build_claims(src: FindingSources) -> list[dict[str, Any]]:
    """Every claim of a finding, in the order the README states them."""
    cs = ClaimSet(src.docs)
    _facts(cs, src)
    for point in src.points:
        _point(cs, point)
    _vram(cs, src)
    if src.qualification:
        _gates(cs, src.qualification)
    return list(cs.claims.values())


def _facts(cs: ClaimSet, src: FindingSources) -> None:
    p, s = src.profile, src.summary
    cs.add("fact.profile", "profile", method="value", artifact=s, pointers=["/provenance/profile"])
    cs.add("fact.model_repo", "model", method="value", artifact=p, pointers=["/model/repo"])
    cs.add("fact.model_revision", "model revision", method="value", artifact=s, pointers=["/provenance/model_revision"])
    cs.add("fact.served_name", "served as", method="value", artifact=s, pointers=["/server/model"])
    cs.add("fact.image_digest", "runtime image", method="value", artifact=s, pointers=["/provenance/image_digest"])
    cs.add("fact.plan_hash", "plan hash", method="value", artifact=s, pointers=["/provenance/plan_hash"])
    cs.add("fact.image_ref", "image reference", method="value", artifact=p, pointers=["/image/ref"])
    cs.add("fact.gpus", "GPUs", method="count", artifact=p, pointers=["/gpus/devices/*"], unit="cards")
    cs.add("fact.tp", "tensor parallel", method="value", artifact=p, pointers=["/engine/tp"])
    cs.add("fact.context_length", "context", method="value", artifact=p, pointers=["/engine/context_length"])
    cs.add("fact.kv_cache_dtype", "KV cache", method="value", artifact=p, pointers=["/engine/kv_cache_dtype"])
    cs.add(
        "fact.speculative",
        "speculative decoding",
        method="value",
        artifact=p,
        pointers=["/engine/speculative/algorithm"],
    )
    cs.add("fact.status", "status when reported", method="value", artifact=p, pointers=["/status"])
    cs.add("fact.rollback", "rollback target", method="value", artifact=p, pointers=["/rollback"])
    if src.bench_manifest:
        _host(cs, src.bench_manifest, str(src.docs[s].get("run_id", "")))


def _host(cs: ClaimSet, manifest: str, run_id: str) -> None:
    host = f"/runs/{run_id}/host"
    if (cs.docs[manifest].get("runs") or {}).get(run_id, {}).get("host", {}).get("source") != "nvml":
        return
    cs.add("host.cards", "cards measured on", method="count", artifact=manifest, pointers=[f"{host}/cards/*/index"])
    cs.add("host.card_name", "card", method="value", artifact=manifest, pointers=[f"{host}/cards/0/name"])
    cs.add("host.driver", "NVIDIA driver", method="value", artifact=manifest, pointers=[f"{host}/driver_version"])
    cs.add(
        "host.power_limit_w",
        "power cap (lowest card)",
        method="min",
        artifact=manifest,
        pointers=[f"{host}/cards/*/power_limit_w"],
        unit="W",
        fmt=FLOOR0,
    )


def _point(cs: ClaimSet, artifact: str) -> None:
    doc = cs.docs[artifact]
    point = doc.get("point") or {}
    key = f"c{point.get('concurrency')}.p{point.get('prompt_tokens_target')}"
    ok = [i for i, r in enumerate(doc.get("requests") or []) if r.get("ok") and r.get("decode_tok_s") is not None]
    if not ok:
        return
    target = cs.add(
        f"prompt_tokens_target.{key}",
        "prompt tokens target",
        method="value",
        artifact=artifact,
        pointers=["/point/prompt_tokens_target"],
        unit="tokens",
    )
    actual = cs.add(
        f"prompt_tokens.{key}",
        "prompt tokens (median)",
        method="median",
        artifact=artifact,
        pointers=[f"/requests/{i}/prompt_tokens_actual" for i in ok],
        unit="tokens",
        fmt=FLOOR0,
    )
    conc = cs.add(
        f"concurrency.{key}", "concurrency", method="value", artifact=artifact, pointers=["/point/concurrency"]
    )
    n = cs.add(f"n.{key}", "requests measured", method="count_true", artifact=artifact, pointers=["/requests/*/ok"])
    if not (target and actual and conc and n):
        return
    conditions = {
        "prompt_tokens_target": target["value"],
        "prompt_tokens_actual": actual["value"],
        "concurrency": conc["value"],
        "statistic": "p50",
        "n": n["value"],
        "claims": {
            "prompt_tokens_target": target["id"],
            "prompt_tokens_actual": actual["id"],
            "concurrency": conc["id"],
            "n": n["id"],
        },
    }
    for quantity, label, unit, fmt in (("decode_tok_s", "decode", "tok/s", DOWN2), ("ttft_s", "TTFT", "s", UP2)):
        cs.add(
            f"{label.lower()}.{key}",
            f"{label} {unit}",
            method="median",
            artifact=artifact,
            pointers=[f"/requests/{i}/{quantity}" for i in ok],
            unit=unit,
            fmt=fmt,
            conditions=conditions,
        )


def _vram(cs: ClaimSet, src: FindingSources) -> None:
    cs.add(
        "vram.reserve",
        "VRAM reserve",
        method="value",
        artifact=src.profile,
        pointers=["/gpus/vram_reserve_mib"],
        unit="MiB/card",
    )
    cs.add("vram.waiver", "reserve waiver", method="value", artifact=src.profile, pointers=["/gpus/reserve_waiver"])
    free = "/free_vram_after/*/memory_free_mib"
    cs.add(
        "vram.free_after_bench",
        "free VRAM after the benchmark (lowest card)",
        method="min",
        artifact=src.summary,
        pointers=[free],
        unit="MiB/card",
        fmt=FLOOR0,
    )
    if src.qualification:
        cs.add(
            "vram.free_after_qualify",
            "free VRAM after qualification (lowest card)",
            method="min",
            artifact=src.qualification,
            pointers=[free],
            unit="MiB/card",
            fmt=FLOOR0,
        )


def _gates(cs: ClaimSet, artifact: str) -> None:
    for i, gate in enumerate(cs.docs[artifact].get("gates") or []):
        name = str(gate.get("gate"))
        base = f"/gates/{i}"
        cs.add(
            f"gate.{name}.verdict", f"{name} verdict", method="value", artifact=artifact, pointers=[f"{base}/verdict"]
        )
        if gate.get("verdict") == "skipped":
            cs.add(f"gate.{name}.note", f"{name} not run", method="value", artifact=artifact, pointers=[f"{base}/note"])
            continue
        cs.add(
            f"gate.{name}.passed",
            f"{name} cases passed",
            method="count_true",
            artifact=artifact,
            pointers=[f"{base}/cases/*/ok"],
            unit="cases",
        )
        cs.add(
            f"gate.{name}.total",
            f"{name} cases",
            method="count",
            artifact=artifact,
            pointers=[f"{base}/cases/*/ok"],
            unit="cases",
        )

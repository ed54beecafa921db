"""The text of a finding, generated from its ledger: ``README.md`` and the one-line post (``--format short``).

Every number in the prose comes from a claim (:meth:`Text.c`); paths, hashes and pointers are in code
spans. Rendering with ``mark=True`` writes each claim as ``⟦id⟧`` instead of its text, which is how the
tests check that no number in the prose was typed in rather than computed. The sections follow the
promotion seed: canonical facts, headline, capability results, caveats, decision, what was not qualified,
imported figures, artifacts, claim ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servectl.bench.finding.ledger import artifacts_of, current, ref
from servectl.bench.qualify.model import GATE_LABELS


@dataclass(frozen=True)
class Text:
    """Claim texts of one ledger, by id."""

    ledger: Mapping[str, Any]
    mark: bool = False

    @property
    def claims(self) -> dict[str, Mapping[str, Any]]:
        return current(self.ledger.get("claims") or [])

    def has(self, claim_id: str) -> bool:
        return claim_id in self.claims

    def c(self, claim_id: str) -> str:
        """The claim's text (``⟦id⟧`` when marking)."""
        return f"⟦{claim_id}⟧" if self.mark else str(self.claims[claim_id]["text"])

    def value(self, claim_id: str) -> Any:
        return self.claims[claim_id]["value"]

    def keys(self, prefix: str) -> list[str]:
        """The ``c1.p4096`` keys of claims ``prefix.<key>``, in ledger order."""
        return [i[len(prefix) + 1 :] for i in self.claims if i.startswith(prefix + ".")]

    def label(self, gate: str) -> str:
        """A gate's short name as the ledger recorded it (``needle`` for ``long_context``)."""
        labels = self.ledger.get("gate_labels") or GATE_LABELS
        return str(labels.get(gate, gate))

    def gates(self) -> list[str]:
        return list(dict.fromkeys(i.split(".")[1] for i in self.claims if i.startswith("gate.")))


def _facts(t: Text) -> list[str]:
    lines = ["## Canonical facts", ""]
    model = t.c("fact.model_repo") if t.has("fact.model_repo") else "(no repository recorded)"
    if t.has("fact.model_revision"):
        model += f"@{t.c('fact.model_revision')}"
    lines.append(f"- Model identity: {model}, served as {t.c('fact.served_name')}")
    image = t.c("fact.image_digest") if t.has("fact.image_digest") else "(not pinned by digest)"
    lines.append(f"- Runtime identity: {t.c('fact.image_ref')} image {image}")
    setup = f"{t.c('fact.gpus')} GPUs, TP={t.c('fact.tp')}"
    for claim_id, label in (
        ("fact.context_length", "context"),
        ("fact.kv_cache_dtype", "KV cache"),
        ("fact.speculative", "speculative decoding"),
    ):
        if t.has(claim_id):
            setup += f", {label} {t.c(claim_id)}"
    lines.append(f"- Local setup: {setup}")
    if t.has("host.cards"):
        host = f"{t.c('host.cards')} x {t.c('host.card_name')}, NVIDIA driver {t.c('host.driver')}"
        if t.has("host.power_limit_w"):
            host += f", power cap {t.c('host.power_limit_w')} W (lowest card)"
        lines.append(f"- Measured on: {host}")
    else:
        lines.append("- Measured on: host facts unknown (NVML gave none on the measuring host)")
    lines.append(f"- Profile: {t.c('fact.profile')}, plan {t.c('fact.plan_hash')}")
    return [*lines, ""]


def headline_parts(t: Text) -> list[str]:
    """``112.07 decode tok/s at 2,969 prompt tokens (4,096 target), median of 3 C1 requests`` per point."""
    parts = []
    for key in t.keys("decode"):
        part = (
            f"{t.c(f'decode.{key}')} decode tok/s at {t.c(f'prompt_tokens.{key}')} prompt tokens "
            f"({t.c(f'prompt_tokens_target.{key}')} target), median of {t.c(f'n.{key}')} "
            f"C{t.c(f'concurrency.{key}')} requests"
        )
        if t.has(f"ttft.{key}"):
            part += f"; time to first token {t.c(f'ttft.{key}')} s"
        parts.append(part)
    return parts


def _headline(t: Text) -> list[str]:
    parts = headline_parts(t)
    body = [f"- {p}" for p in parts] or ["- no point with a complete decode measurement"]
    return ["## Headline", "", *body, ""]


def gate_count(t: Text, gate: str) -> str:
    """``tools 20/20`` (``(fail)`` added when the gate failed)."""
    label = t.label(gate)
    text = f"{label} {t.c(f'gate.{gate}.passed')}/{t.c(f'gate.{gate}.total')}"
    return text if t.value(f"gate.{gate}.verdict") == "pass" else f"{text} ({t.c(f'gate.{gate}.verdict')})"


def _capabilities(t: Text) -> list[str]:
    run = [g for g in t.gates() if t.has(f"gate.{g}.passed")]
    lines = ["## Capability results", ""]
    if not t.gates():
        return [*lines, "- no qualification evidence in this finding", ""]
    lines += [f"- {gate_count(t, g)}: {t.c(f'gate.{g}.verdict')}" for g in run]
    return [*lines, ""]


def _caveats(t: Text) -> list[str]:
    lines = ["## Caveats", ""]
    reserve = f"{t.c('vram.reserve')} MiB/card" if t.has("vram.reserve") else "no"
    if t.has("vram.waiver"):
        lines.append(f"- The {reserve} VRAM reserve is waived; the profile's reason: {t.c('vram.waiver')}")
    else:
        lines.append(f"- VRAM reserve: {reserve} (not waived)")
    free = []
    if t.has("vram.free_after_bench"):
        free.append(f"{t.c('vram.free_after_bench')} MiB/card after the benchmark")
    if t.has("vram.free_after_qualify"):
        free.append(f"{t.c('vram.free_after_qualify')} MiB/card after qualification")
    lines.append(
        f"- Free VRAM measured (lowest card): {' and '.join(free)}"
        if free
        else "- Free VRAM: not measured (no GPU inventory on the measuring host)"
    )
    return [*lines, ""]


def _decision(t: Text) -> list[str]:
    ran = [g for g in t.gates() if t.has(f"gate.{g}.passed")]
    failed = [g for g in ran if t.value(f"gate.{g}.verdict") != "pass"]
    if not ran:
        verdict = "not eligible for promotion: no qualification evidence"
    elif failed:
        verdict = "not eligible for promotion: " + ", ".join(gate_count(t, g) for g in failed)
    else:
        verdict = "eligible for promotion: every gate that ran passed"
    rollback = t.c("fact.rollback") if t.has("fact.rollback") else "none (the profile names no rollback)"
    return [
        "## Decision",
        "",
        f"- {verdict}",
        f"- Status when reported: {t.c('fact.status')}",
        f"- Rollback target: {rollback}",
        "",
    ]


def _not_qualified(t: Text) -> list[str]:
    lines = ["## Not qualified", ""]
    for gate in t.gates():
        if t.has(f"gate.{gate}.note"):
            lines.append(f"- {t.label(gate)}: not run ({t.c(f'gate.{gate}.note')})")
    keys = t.keys("decode")
    if keys:
        top_c = max(keys, key=lambda k: t.value(f"concurrency.{k}"))
        top_p = max(keys, key=lambda k: t.value(f"prompt_tokens.{k}"))
        lines.append(f"- concurrency above C{t.c(f'concurrency.{top_c}')}: not measured")
        lines.append(f"- prompts longer than {t.c(f'prompt_tokens.{top_p}')} tokens: not measured")
    lines.append("- anything this finding does not state (e.g. video, other clients, other cards)")
    return [*lines, ""]


def _imported(t: Text) -> list[str]:
    imported = [c for c in t.claims.values() if c.get("origin") == "imported"]
    if not imported:
        return []
    lines = ["## Imported figures (not measured by servectl)", ""]
    for claim in imported:
        source = claim.get("source") or {}
        lines.append(
            f"- {t.c(str(claim['id']))} {claim.get('unit', '')} {claim.get('label', '')}: imported "
            f"from {source.get('title', 'an outside source')} (`{source.get('url', '')}`)"
        )
    return [*lines, ""]


def _artifacts(t: Text) -> list[str]:
    lines = [
        "## Artifacts",
        "",
        "- `artifact-manifest.json` (every artifact's checksum and size), `README.md`, `claims.json`",
    ]
    for artifact in t.ledger.get("artifacts") or []:
        lines.append(f"- `{artifact['path']}` (`sha256:{artifact['sha256']}`)")
    return [*lines, ""]


def _conditions(t: Text, claim: Mapping[str, Any]) -> str:
    ids = claim.get("condition_claims") or {}
    if not ids:
        return ""
    parts = []
    if "prompt_tokens_actual" in ids:
        parts.append(f"{t.c(ids['prompt_tokens_actual'])} prompt tokens ({t.c(ids['prompt_tokens_target'])} target)")
    if "concurrency" in ids:
        parts.append(f"C{t.c(ids['concurrency'])}")
    if "n" in ids:
        parts.append(f"median of {t.c(ids['n'])}")
    return "; ".join(parts)


def _ledger(t: Text) -> list[str]:
    lines = ["## Claim ledger", "", "| Public claim | Conditions | Evidence |", "| --- | --- | --- |"]
    for claim_id, claim in t.claims.items():
        what = f"{t.c(claim_id)} {claim.get('unit', '')}".rstrip() + f" ({claim.get('label', '')})"
        if claim.get("origin") == "imported":
            evidence = f"imported: `{(claim.get('source') or {}).get('url', '')}`"
        else:
            method = (claim.get("compute") or {}).get("method")
            pointers = ", ".join(f"`{s['pointer']}`" for s in (claim.get("compute") or {}).get("sources") or [])
            evidence = f"{method} of " + " · ".join(f"`{a}`" for a in artifacts_of(claim)) + f" at {pointers}"
        lines.append(f"| {what} | {_conditions(t, claim)} | {evidence} |")
    superseded = [c for c in t.ledger.get("claims") or [] if c.get("status") == "superseded"]
    if superseded:
        lines += ["", "Superseded claims (kept; corrections never overwrite):", ""]
        for claim in superseded:
            after = claim.get("superseded_by") or "withdrawn"
            lines.append(f"- `{ref(claim)}` ({claim.get('label', '')}) said `{claim.get('text')}`; now `{after}`")
    return [*lines, ""]


def render_readme(ledger: Mapping[str, Any], *, mark: bool = False) -> str:
    """The finding's ``README.md``, generated from ``ledger`` alone."""
    t = Text(ledger, mark=mark)
    title = f"# Finding: {t.c('fact.profile')}" if t.has("fact.profile") else "# Finding"
    lines = [title, "", "Generated by `servectl report` from `claims.json`; recount with `servectl claims verify`.", ""]
    for section in (
        _facts,
        _headline,
        _capabilities,
        _caveats,
        _decision,
        _not_qualified,
        _imported,
        _artifacts,
        _ledger,
    ):
        lines += section(t)
    return "\n".join(lines).rstrip() + "\n"


def render_short(ledger: Mapping[str, Any], *, mark: bool = False) -> str:
    """One line for a post: profile, setup, headline numbers, gate counts."""
    t = Text(ledger, mark=mark)
    speeds = [
        f"{t.c(f'decode.{k}')} tok/s at {t.c(f'prompt_tokens.{k}')} prompt tokens (C{t.c(f'concurrency.{k}')})"
        for k in t.keys("decode")
    ]
    gates = [gate_count(t, g) for g in t.gates() if t.has(f"gate.{g}.passed")]
    setup = f"{t.c('fact.gpus')} GPUs TP={t.c('fact.tp')}"
    if t.has("host.cards"):
        setup = f"{t.c('host.cards')} x {t.c('host.card_name')} TP={t.c('fact.tp')}"
    text = f"{t.c('fact.profile')}, {setup}: " + ", ".join(speeds or ["no decode measurement"])
    if gates:
        text += "; " + ", ".join(gates)
    return text + "."

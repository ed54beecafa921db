"""Extract the v1 OpenAPI schema of the LeaderWorkerSet CRD into tests/data/lws-v1.schema.json.

Usage: python tests/data/extract_lws_schema.py PATH/TO/leaderworkerset.x-k8s.io_leaderworkersets.yaml

Keeps ``spec.versions[name=v1].schema.openAPIV3Schema`` and drops every ``description`` annotation (the
validation keywords are untouched), which takes the 1.3 MB CRD down to a small JSON file. Rerun it when the
CRD is updated, and update SOURCE.md with the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def strip_descriptions(node: Any, *, in_properties: bool = False) -> Any:
    """Drop ``description`` keywords; a *property* named "description" (under ``properties``) stays."""
    if isinstance(node, dict):
        return {
            key: strip_descriptions(value, in_properties=(key == "properties" and not in_properties))
            for key, value in node.items()
            if in_properties or not (key == "description" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [strip_descriptions(item) for item in node]
    return node


def main(crd_path: str) -> None:
    crd = yaml.safe_load(Path(crd_path).read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strip_descriptions(version["schema"]["openAPIV3Schema"])
    out = Path(__file__).with_name("lws-v1.schema.json")
    out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])

"""Shared by the configuration tests: the base document and the demo's configuration file."""

from __future__ import annotations

from pathlib import Path

DEMO = Path(__file__).resolve().parents[3] / "demo" / "conduit.yaml"


BASE = """\
version: 1
scopes:
  - path: acme
    bindings:
      triage:
        executor: python
        settings: {target: "demo.agents:triage"}
        controls: [inject, interrupt]
      plain:
        executor: command
        settings: {argv: ["./bin/triage"]}
      inbox: {}
    routes:
      - slot: pull-requests
        handler: match
        params:
          type: "github.pull_request.*"
          keys: ["pr:{data.repository}#{data.number}"]
        binding: triage
        policy: queue
"""

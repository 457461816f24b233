"""Guarded rollouts (issue 29): guard rules checked before any hot-config change is written, gray-release
targets resolved to client instances, rollout plans driven by the MetaServer, drift and release markers."""

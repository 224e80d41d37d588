"""Run services: what the product computes on stored runs (analyses, alerts, cost, status,
findings, the demo runs). They read and write through ``ingest.store``; pages and the CLI call them.
"""

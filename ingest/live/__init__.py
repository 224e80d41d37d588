"""Following a running job: ``watch`` (shards), ``watch_logs`` + ``log_spool`` + ``new_rows`` (the logs
a job writes). Built on ``ingest.importing`` and ``ingest.store``.
"""

"""Import orchestration: a log's files, configs and metric map into one stored run
(``importer``, ``import_inputs``, ``metric_map``, ``configs``, ``config_trainers``). Reads through
``ingest.formats``, writes through ``ingest.store``.
"""

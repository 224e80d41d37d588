"""Compaction engines the store is given (``Store.compact``'s ``read_parts``): the Spark engine
(``spark_engine``, ``spark_shipping``). The store's own modules never import this package.
"""

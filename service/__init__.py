"""The streammom daemon: a thin loop around the ``streammom`` library (Kafka, metrics, CLI)."""

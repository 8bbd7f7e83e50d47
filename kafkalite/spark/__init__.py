"""kafkalite as a PySpark data source (PySpark 4's Python Data Source API).

`spark.dataSource.register(KafkaliteDataSource)`, then `spark.read.format("kafkalite")`
with the options of Spark's own Kafka source and sink. Options and offset planning
(`options`, `offsets`) are pure and import no pyspark; the data source itself is imported
lazily so that `import kafkalite.spark.options` works without the `spark` extra.
"""

from __future__ import annotations

from typing import Any

from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError

__all__ = ["KafkaliteDataLossError", "KafkaliteDataSource", "KafkaliteSparkOptionError"]


def __getattr__(name: str) -> Any:
    if name == "KafkaliteDataSource":
        from kafkalite.spark.source import KafkaliteDataSource

        return KafkaliteDataSource
    raise AttributeError(name)

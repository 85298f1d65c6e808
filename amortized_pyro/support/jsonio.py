"""JSON for the package's records: a number that is not finite (a metric not evaluated, an MSE without test
images) is written as null, which JSON has, and read back as NaN."""
import math


def to_json(record):
    """``record`` with every non-finite float as None (JSON's null)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def from_json(record, keys=None):
    """``record`` with null read back as NaN: at ``keys`` only, or at every key."""
    return {k: (math.nan if v is None and (keys is None or k in keys) else v) for k, v in record.items()}

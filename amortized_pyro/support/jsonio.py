"""JSON for the package's records: a number that is not finite (a metric not evaluated, an MSE without test
images) is written as null, which JSON has, and read back as NaN; JSON-lines files read with the number of the
line that is not JSON."""
import json
import math
from pathlib import Path

from amortized_pyro.errors import AmortizedPyroError


def to_json(record):
    """``record`` with every non-finite float as None (JSON's null)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def from_json(record, keys=None):
    """``record`` with null read back as NaN: at ``keys`` only, or at every key."""
    return {k: (math.nan if v is None and (keys is None or k in keys) else v) for k, v in record.items()}


def read_jsonl(path):
    """The records of a JSON-lines file (blank lines passed over); a line that is not JSON is an
    :class:`~amortized_pyro.errors.AmortizedPyroError` naming the file and the line's number. A missing file
    raises FileNotFoundError, for the caller to say what was expected there."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as e:
                raise AmortizedPyroError("cannot read %s: line %d is not JSON (%s)"
                                         % (path, number, e.args[0].split(":")[0])) from None
    return records


def append_jsonl(path, record):
    """``record`` appended to a JSON-lines file as one line (:func:`to_json`), flushed: a resumable study's
    finished result, kept whatever happens to the run after it."""
    with open(path, "a") as f:
        f.write(json.dumps(to_json(record)) + "\n")
        f.flush()

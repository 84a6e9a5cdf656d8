"""Loading traces into the canonical job table, and generating synthetic ones.

``--trace`` takes ``philly`` (the bundled trace), ``tiresias-60`` (Tiresias'
60-job trace, bundled), ``synthetic[:jobs=N,load=X]``,
``gavel-synthetic[:jobs=N,rate=R,...]`` (Gavel's typed workload) or a path;
a file's format is recognised from its first line, and ``--trace-format``
overrides that. The names are loaded on first use (pandas is slow to import).
"""

from __future__ import annotations

from corral.lazy import lazy_exports

_WHERE = {
    "FORMATS": "corral.traces.formats",
    "LoadReport": "corral.traces.rows",
    "TraceOptions": "corral.traces.loading",
    "detect_format": "corral.traces.loading",
    "load_trace": "corral.traces.loading",
}

__getattr__ = lazy_exports("corral.traces", _WHERE)


__all__ = ["FORMATS", "LoadReport", "TraceOptions", "detect_format", "load_trace"]

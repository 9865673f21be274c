"""Everything a run reports: the Graph500 text block, the JSON record, the plot.

Contract
--------
Output is an API, produced in one place:

- :mod:`dbfs.report.stats`: Graph500 statistics and the exact 3.0.1 stdout
  block (Graph500 specification 2.0, section 9 "Computing and Outputting
  Performance Information");
- :mod:`dbfs.report.record`: the JSON result file (``machine``,
  ``result_dict``, ``write_json``) and the slowest levels of a run with
  their per-worker kernel, exchange and bytes sent (``slowest_levels``);
- :mod:`dbfs.report.plots`: the PNG plot (``plot_run``; matplotlib imported
  on first use).

The names callers use are re-exported here.
"""
from dbfs.report.plots import plot_run
from dbfs.report.record import (machine, result_dict, search_records, slowest_levels, slowest_levels_of_record,
                                write_json, write_partial)
from dbfs.report.stats import (VALUE_COLUMN, format_graph500, format_value, graph500_fields, graph500_stats,
                               render_graph500, teps_stats)

__all__ = ["machine", "result_dict", "search_records", "write_json", "write_partial", "plot_run", "slowest_levels",
           "slowest_levels_of_record",
           "graph500_stats", "teps_stats", "graph500_fields", "render_graph500", "format_graph500", "format_value",
           "VALUE_COLUMN"]

"""Reports: matplotlib figures (Gantt charts, ...) and the static HTML index of a run directory."""

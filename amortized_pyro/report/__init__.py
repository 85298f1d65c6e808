"""Results as text and figures: tables (tables), the studies' figures (figures), the gap and capacity figures
(gap_figures) and their shared style (style; it selects matplotlib's Agg backend when imported, so this
``__init__`` imports nothing).
"""

"""Results as text and figures: tables (tables), the studies' figures (figures), the gap and capacity figures
(gap_figures) and their shared style (style: figures drawn on their own Agg canvas, outside pyplot). This
``__init__`` imports nothing.
"""

"""A run: what defines it (config), its data (data), its directory and checkpoints (store), building, training,
resuming and loading it (fit), and packs of runs trained together (packs).
"""

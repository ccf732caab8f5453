"""Chips of scenes (--tile): the grid, the options, the chip element's planning and window reads."""

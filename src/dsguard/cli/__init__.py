"""The commands: argument parsing and output for ``dsguard run|validate|plan|status|...``.

Commands may import every other unit; nothing imports them (the console script enters at
:func:`dsguard.cli.main.main`).
"""

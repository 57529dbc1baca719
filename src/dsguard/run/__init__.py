"""The run machinery: launching attempts, pumping their output, the run loop, the event log,
``state.json``, the lock and checkpoint selection on disk.
"""

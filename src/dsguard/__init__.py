"""dsguard: a self-healing supervisor for deep-learning training.

Pipeline: job file -> launch -> watch output and exit -> classify -> decide -> act -> record.
The supervisor never imports torch; training-side helpers live in the ``train`` extra.
"""

__version__ = "0.1.0"

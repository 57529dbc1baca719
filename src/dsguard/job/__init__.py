"""The job model: what the user asked for, read from a job file or a quick-start command line.

Imports only the standard library (and PyYAML to read files); every other unit may import it.
"""

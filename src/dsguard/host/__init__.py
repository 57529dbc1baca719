"""Facts about the machine: NVML, memory cgroups and resident memory, the training
environment's toolkits and interpreter. Read-only probes; never imports :mod:`dsguard.run`.
"""

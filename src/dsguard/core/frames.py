"""Traceback structure for the classifier: which frames name a failure's kind.

A training failure's last exception line often carries a generic class (``ValueError``,
``AssertionError``, ``RuntimeError``) whose message no rule knows; where in the stack it was
raised does name the kind. This module holds those facts, pure and stdlib-only, so that
``classify`` can stay a message matcher with one structural hook.
"""

from __future__ import annotations

import re

__all__ = ["BUILD_FRAME"]

# A traceback frame inside DeepSpeed's op builder or torch's C++/CUDA extension builder, in
# Python's ('File ".../op_builder/builder.py", line 9') or IPython's (".../cpp_extension.py in
# _run_ninja_build(...)") format.
# (Linear on a 1 MB line: each branch starts at one literal, and no two unbounded runs meet.)
BUILD_FRAME = re.compile(
    r"File \"[^\"\n]*(?:op_builder|torch/utils/cpp_extension\.py)[^\"\n]*\", line "
    r"|^\S*(?:op_builder/\S*|torch/utils/cpp_extension\.py) in \w"
)

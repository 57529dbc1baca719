"""Runs in the *training* interpreter (``dsguard.host.envfacts`` executes this file by
path): torch's version, its CUDA/HIP build, CUDA_HOME as torch resolves it, the JIT extensions
dir, and DeepSpeed's version, as JSON written to the file named by its last argument (the
protocol of :mod:`dsguard.host.probe`). It never raises, and dsguard itself never imports it:
the supervisor stays torch-free.
"""

# ruff: noqa
# mypy: ignore-errors
import json, os, sys

out = {}
try:
    import torch

    out["torch_version"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    try:
        import torch.utils.cpp_extension as ce

        out["cuda_home"] = ce.CUDA_HOME
        root = os.environ.get("TORCH_EXTENSIONS_DIR")
        if root is None:
            if out["hip"] is not None:
                acc = "rocm" + str(out["hip"]).replace(".", "")
            elif out["cuda"] is not None:
                acc = "cu" + str(out["cuda"]).replace(".", "")
            else:
                acc = "cpu"
            v = sys.version_info
            py = "py%d%d%s" % (v[0], v[1], getattr(sys, "abiflags", ""))
            root = os.path.join(ce.get_default_build_root(), py + "_" + acc)
        out["torch_extensions_dir"] = root
    except Exception as exc:
        out["cpp_extension_error"] = "%s: %s" % (type(exc).__name__, exc)
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    from importlib.metadata import version

    out["deepspeed"] = version("deepspeed")
except Exception:
    out["deepspeed"] = None
tmp = sys.argv[-1] + ".tmp"
with open(tmp, "w") as fh:
    json.dump(out, fh)
os.replace(tmp, sys.argv[-1])

"""The `detconv` command: `demo` (the default), `bench` and `info`."""

import argparse
import importlib.util
import os
import sys

_USAGE = """detconv <command> [options]

commands:
  demo    tf.nn.conv2d and detconv side by side on the seeds' scenarios (default)
  bench   time detconv against tf.nn.conv2d on ResNet-50/MobileNet layers (source checkout only)
  info    versions, CPU kernel paths, CUDA architectures, GPUs

detconv --version   one line: version, order version, TensorFlow built for / running
"""


def _benchmark_script():
    """benchmarks/cpu.py of the source checkout this package was imported from, or None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "benchmarks", "cpu.py")
    return path if os.path.isfile(path) else None


def bench(argv):
    path = _benchmark_script()
    if path is None:
        print("detconv bench: benchmarks/cpu.py is not part of the installed package. Run it from a source "
              "checkout: `python benchmarks/cpu.py --help` (or `detconv bench` with the checkout on "
              "PYTHONPATH).", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("detconv_benchmark_cpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def info(argv):
    argparse.ArgumentParser(prog="detconv info", description="versions, CPU kernel paths, GPUs").parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import detconv
    from detconv._loader import ops_library_path

    from detconv import kernels
    from detconv._loader import build_info

    gpus = tf.config.list_physical_devices("GPU")
    built = build_info()
    rows = [
        ("detconv", detconv.__version__),
        ("order version", detconv.ORDER_VERSION),
        ("op library", ops_library_path()),
        ("TensorFlow built for", built.get("tensorflow") or "unknown"),
        ("TensorFlow running", f"{tf.__version__} (built with CUDA: {tf.test.is_built_with_cuda()})"),
        ("CPU paths built", ", ".join(built.get("cpu_isas", [])) or "unknown"),
        ("CPU paths here", ", ".join(detconv.cpu_isa(supported=True))),
        ("active CPU path", detconv.cpu_isa()),
        ("CUDA kernels", (f"CUDA {built.get('cuda_version')}, architectures " + ";".join(built.get("cuda_archs", [])))
                         if built.get("cuda") else "not built"),
        ("CUDA device visible", "yes" if kernels.cuda_available() else "no"),
        ("TensorFlow GPUs", ", ".join(g.name for g in gpus) if gpus else "none"),
        ("python", sys.version.split()[0]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    return 0


def version():
    """One line: detconv, its order version, and the TensorFlow it was built for and runs with."""
    import importlib.metadata

    import detconv
    from detconv._loader import build_info

    try:
        running = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        running = "not installed"
    built = build_info()
    cuda = ("CUDA " + ";".join(built.get("cuda_archs", []))) if built.get("cuda") else "CPU only"
    print(f"detconv {detconv.__version__} (order version {detconv.ORDER_VERSION}; built for TensorFlow "
          f"{built.get('tensorflow') or 'unknown'}, running {running}; {cuda})")
    return 0


def demo(argv):
    from detconv import demo as demo_module

    return demo_module.main(argv)


_COMMANDS = {"demo": demo, "bench": bench, "info": info}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0
    if argv and argv[0] in ("-V", "--version"):
        return version()
    command = argv.pop(0) if argv and not argv[0].startswith("-") else "demo"
    if command not in _COMMANDS:
        print(f"detconv: unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
        return 2
    return _COMMANDS[command](argv)


if __name__ == "__main__":
    sys.exit(main())

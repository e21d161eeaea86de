"""``python -m hitml.kernels warmup [GROUP ...] [--jobs N]``: compile hitml's CPU kernels ahead of use."""
import sys

from ._warmup import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or argv[0] != "warmup":
        print("usage: python -m hitml.kernels warmup [GROUP ...] [--jobs N]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(argv[1:]))

"""``python -m hitml.kernels warmup [GROUP ...] [--jobs N]``: compile hitml's CPU kernels ahead of use (into Numba's
cache, ``_warmup``); ``python -m hitml.kernels aot [OUT_DIR]``: build the Numba cache entries of the TreeSHAP kernels
that hitml ships (``_aot_build``). The top of the kernels package: these tools import the families; nothing imports them."""
import sys

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "aot":
        from ._aot_build import main as aot_main

        sys.exit(aot_main(argv[1:]))
    if not argv or argv[0] != "warmup":
        print("usage: python -m hitml.kernels warmup [GROUP ...] [--jobs N]\n"
              "       python -m hitml.kernels aot [OUT_DIR] [--check]", file=sys.stderr)
        sys.exit(2)
    from ._warmup import main

    sys.exit(main(argv[1:]))

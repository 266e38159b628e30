# Sourced by quickstart.sh and test.sh: creates .venv and installs odla-tvm into it with the
# extras named in $EXTRAS. Needs only Python 3.11 and pip.
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x .venv/bin/python ]; then
    # Debian's python3 lacks the venv module unless python3-venv is installed; fall back
    # to virtualenv from PyPI, which needs only pip.
    "$PYTHON" -m venv .venv 2>/dev/null || {
        rm -rf .venv
        "$PYTHON" -m pip install --quiet --user --break-system-packages virtualenv
        "$PYTHON" -m virtualenv --quiet .venv
    }
fi
.venv/bin/python -m pip install --quiet --upgrade "pip>=23.1"
.venv/bin/python -m pip install --quiet -e ".${EXTRAS:+[$EXTRAS]}"
# ODLA's C library (libodla/lib/libodla_tvm.so, headers in libodla/include): built with the
# system g++ against the installed TVM runtime, no network; `odla-tvm config` prints its flags.
if command -v g++ >/dev/null; then
    .venv/bin/python -c "import libodla; print('C library:', libodla.build())"
else
    echo "g++ not found: the C library (libodla_tvm.so) is not built; apt-get install g++" >&2
fi

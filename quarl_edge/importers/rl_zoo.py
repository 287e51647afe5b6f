"""The RL Baselines3 Zoo's run folders as one import (`quarl-edge import ppo/MountainCar-v0_1/`).

A zoo run (rl-trained-agents' ALGO/ENV_N/, or a user's logs/ALGO/ENV_N/) keeps beside the
SB3 zip what the zoo's enjoy.py needs to play it: ENV/vecnormalize.pkl (the observation
statistics), ENV/config.yml (the hyperparameters: normalize, env_wrapper, frame_stack, ...) and
ENV/args.yml (the command line: the env id, env_kwargs). All of it is read here, so that
nothing the policy depends on is silently dropped: what the board cannot reproduce (an env
wrapper, frame stacking, env kwargs) is refused by name.

The YAML files are untrusted like the zip. The zoo writes them with PyYAML's full dumper, as
`!!python/object/apply:collections.OrderedDict` of [key, value] pairs; they are read with
yaml.SafeLoader plus that one tag, built here as a plain dict; any other python tag is refused
by name and nothing is constructed from it.
"""
from __future__ import annotations

from pathlib import Path

from .bounded import MAX_NESTING, MAX_YAML_BYTES, MAX_YAML_NODES, read_file, short, text
from .common import PolicyImportError
from . import sb3

ORDERED_DICT_TAG = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"


def _loader():
    """yaml.SafeLoader that builds the zoo's OrderedDict tag as a dict, refusing other
    python tags by name (a python/object/apply tag would call its function on load)."""
    import yaml

    class ZooLoader(yaml.SafeLoader):
        pass

    def ordered_dict(loader, node):
        args = loader.construct_sequence(node, deep=True) if \
            isinstance(node, yaml.SequenceNode) else []
        pairs = args[0] if len(args) == 1 and isinstance(args[0], list) else None
        if pairs is None or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise PolicyImportError("an OrderedDict that is not a list of [key, value] pairs")
        return {str(k): v for k, v in pairs}

    def refuse(loader, suffix, node):
        raise PolicyImportError(f"refused: the YAML tag !!python/{suffix} (it would run code); "
                           "only the zoo's !!python/object/apply:collections.OrderedDict is read")

    ZooLoader.add_constructor(ORDERED_DICT_TAG, ordered_dict)
    ZooLoader.add_multi_constructor("tag:yaml.org,2002:python/", refuse)
    return ZooLoader


def read_yaml(path: Path) -> dict:
    """A zoo YAML file (config.yml, args.yml) as a plain dict, read safely (see above): within
    MAX_YAML_BYTES, and its events counted first (check_yaml) so that neither its nesting nor
    its aliases can make the loader or a reader of the result do unbounded work."""
    import yaml
    raw = read_file(path, MAX_YAML_BYTES, "a YAML file", PolicyImportError)
    try:
        text = raw.decode()
        check_yaml(text)
        data = yaml.load(text, Loader=_loader())   # noqa: S506 (safe loader)
    except PolicyImportError as e:
        raise PolicyImportError(f"{path}: {e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        why = short(str(e).splitlines()[0], 100) if str(e) else type(e).__name__
        raise PolicyImportError(f"{path}: not a readable YAML file ({why})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PolicyImportError(f"{path}: a YAML {type(data).__name__}, not a mapping")
    return data


def check_yaml(text: str) -> None:
    """Refuse YAML nested deeper than MAX_NESTING, with more than MAX_YAML_NODES nodes counting
    what each alias stands for as a copy (the size a reader that expands them would walk: a
    "billion laughs" file asks for 10^9 in a few hundred bytes), or with an alias to a node
    that encloses it (a cycle). Read from the parser's events, without building anything and
    without recursion (PyYAML's composer and constructor recurse)."""
    import yaml
    sizes: dict[str, int] = {}                # anchor -> its node's size, aliases expanded
    open_: list[list] = [[None, 0]]           # the enclosing collections: [anchor, size]
    where = "refused"                         # read_yaml names the file
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            open_.append([event.anchor, 1])
            if len(open_) > MAX_NESTING:
                raise PolicyImportError(f"{where}: YAML nested deeper than {MAX_NESTING} levels")
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = open_.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:
                raise PolicyImportError(f"{where}: a YAML alias *{short(event.anchor)[1:-1]} "
                                        "inside the node it names (a cycle)")
            anchor, size = None, sizes[event.anchor]
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        open_[-1][1] += size
        if open_[-1][1] > MAX_YAML_NODES:
            raise PolicyImportError(f"{where}: YAML whose aliases expand to more than "
                                    f"{MAX_YAML_NODES:,} nodes (an alias bomb?)")


def _env_dir(folder: Path) -> Path | None:
    """The ENV/ subfolder of a run (the one with config.yml or args.yml), if there is one."""
    dirs = [d for d in sorted(folder.iterdir()) if d.is_dir() and
            ((d / "config.yml").is_file() or (d / "args.yml").is_file())]
    return dirs[0] if len(dirs) == 1 else None


def is_run(folder: Path) -> bool:
    """A folder that looks like a zoo run: an SB3 zip and an ENV/ with the zoo's YAML."""
    return folder.is_dir() and _env_dir(folder) is not None and any(folder.glob("*.zip"))


def beside(zip_path: Path) -> bool:
    """An SB3 zip inside a zoo run (ENV.zip next to ENV/config.yml): imported as the run, so
    that its VecNormalize statistics and config are not left out."""
    d = zip_path.parent / zip_path.stem
    return (d / "config.yml").is_file() or (d / "args.yml").is_file()


def _find_zip(folder: Path, env_dir: Path) -> Path:
    """The run's model as the zoo's enjoy.py picks it: ENV.zip, else the only zip."""
    main = folder / f"{env_dir.name}.zip"
    if main.is_file():
        return main
    zips = sorted(folder.glob("*.zip"))
    if len(zips) == 1:
        return zips[0]
    raise PolicyImportError(f"{folder}: a zoo run without {main.name}; which of "
                       f"{', '.join(z.name for z in zips) or 'no zip'}? import that zip")


def _wrapper_names(value) -> list[str]:
    """The zoo's env_wrapper: a class path, a list of them, or of {class path: kwargs}."""
    items = value if isinstance(value, list) else [value]
    return [text(next(iter(i)) if isinstance(i, dict) and i else i) for i in items[:5]]


def _normalizes(value) -> bool:
    """config.yml's normalize: true, a dict or its repr ("dict(norm_obs=True, ...)"), false."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "none")
    return bool(value)


def check_config(config: dict, args: dict, where: Path) -> None:
    """Refuse, by name, what the zoo did to the env that the board cannot reproduce."""
    wrapper = config.get("env_wrapper")
    if wrapper:
        raise PolicyImportError(f"{where}: env_wrapper {', '.join(_wrapper_names(wrapper))} is not "
                           "modelled on the board (the policy acts on the wrapped env's "
                           "observations); not supported")
    if config.get("frame_stack"):
        raise PolicyImportError(f"{where}: frame_stack {short(config['frame_stack'])} "
                                "(VecFrameStack) is "
                           "not reproduced on the board; not supported")
    for source, key in ((args, "env_kwargs"), (config, "env_kwargs")):
        if source.get(key):
            raise PolicyImportError(f"{where}: env_kwargs {short(source[key])} (a non-default env) "
                               "are not supported")


def _plain(value):
    """A value of the zoo's YAML for run.json: a scalar as it is, anything else described."""
    return value if isinstance(value, (str, int, float, bool, type(None))) and \
        len(str(value)) <= 200 else short(value)


def load(folder: Path, env_id: str | None, vecnormalize: Path | None = None,
         zip_path: Path | None = None):
    """Import the zoo run `folder` (or `zip_path` inside it): the SB3 zip with ENV/'s
    VecNormalize statistics, after checking ENV/config.yml and ENV/args.yml."""

    folder = Path(folder)
    env_dir = _env_dir(folder)
    if env_dir is None:
        raise PolicyImportError(f"{folder}: not an RL Zoo run (no ENV/ folder with config.yml or "
                           "args.yml)")
    config = read_yaml(env_dir / "config.yml") if (env_dir / "config.yml").is_file() else {}
    args = read_yaml(env_dir / "args.yml") if (env_dir / "args.yml").is_file() else {}
    check_config(config, args, env_dir / "config.yml")
    zip_path = Path(zip_path) if zip_path else _find_zip(folder, env_dir)
    pkl = env_dir / "vecnormalize.pkl"
    if vecnormalize is None and pkl.is_file():
        vecnormalize = pkl
    if vecnormalize is None and _normalizes(config.get("normalize")):
        raise PolicyImportError(f"{env_dir / 'config.yml'}: normalize is "
                           f"{short(config['normalize'])} but {pkl} is missing (the policy needs "
                           "its observation statistics)")
    zoo_env = args.get("env") or env_dir.name
    if not isinstance(zoo_env, str):
        raise PolicyImportError(f"{env_dir / 'args.yml'}: env is {short(zoo_env)}, not an id")
    imp = sb3.load(zip_path, env_id or zoo_env, vecnormalize)
    imp.source["rl_zoo"] = {
        "run": folder.name, "env": zoo_env, "algo": _plain(args.get("algo")),
        "files": [p.relative_to(folder).as_posix() for p in
                  (zip_path, env_dir / "config.yml", env_dir / "args.yml", pkl)
                  if p.is_file() and folder in p.parents],
        "normalize": _plain(config.get("normalize")), "policy": _plain(config.get("policy"))}
    return imp

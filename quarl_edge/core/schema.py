"""A small schema checker for the TOML and JSON files users write or hand us (board files,
study configs, run.json): each key's type, range or choices, required keys, and unknown keys
refused with the nearest known one ("did you mean ...").

    from .schema import Key, check
    check(table, {"name": Key(str, required=True), "episodes": Key(int, min=1)},
          "study.toml [study]", QuarlError)

Messages read like the rest of quarl-edge's: `WHERE: 'KEY' must be int, got 'ten'`,
`WHERE: missing key 'env'`, `WHERE: unknown key(s) episodez (did you mean 'episodes'?); known:
...`. A foundation module: it imports nothing of quarl-edge but the errors."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from .errors import QuarlError


@dataclass(frozen=True)
class Key:
    """What one key may hold. `type` is int, float (an int is a number too), str, bool, list
    or dict (a TOML table); `items` the type of each item of a list; `min`/`max` bound a
    number, or each item of a list of numbers; `choices` the allowed values (of each item);
    `nonempty` refuses an empty list or string."""
    type: type
    required: bool = False
    items: type | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple = ()
    nonempty: bool = False


def _is(value, typ) -> bool:
    """isinstance for TOML/JSON values: a bool is not an int, an int is a float."""
    if isinstance(value, bool):
        return typ is bool
    if typ is float:
        return isinstance(value, (int, float))
    return isinstance(value, typ)


def _name(typ) -> str:
    return {float: "a number", dict: "a table"}.get(typ, typ.__name__)


def _names(typ) -> str:
    """The items of a list: 'a list of str', 'a list of numbers', 'a list of tables'."""
    return {float: "numbers", dict: "tables"}.get(typ, typ.__name__)


def _bounds(key: str, value, spec: Key, where: str, error) -> None:
    low, high = spec.min, spec.max
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            raise error(f"{where}: '{key}' must be in {low}..{high}, got {value!r}")
        if low is not None:
            raise error(f"{where}: '{key}' must be >= {low}, got {value!r}")
        raise error(f"{where}: '{key}' must be <= {high}, got {value!r}")


def _choice(key: str, value, spec: Key, where: str, error) -> None:
    if spec.choices and value not in spec.choices:
        raise error(f"{where}: '{key}' is {value!r}; expected one of "
                    f"{', '.join(map(str, spec.choices))}")


def check_value(key: str, value, spec: Key, where: str, error=QuarlError) -> None:
    """One value against its Key; `error` (a QuarlError subclass) names `where` and `key`."""
    if not _is(value, spec.type):
        raise error(f"{where}: '{key}' must be {_name(spec.type)}, got {value!r}")
    if spec.nonempty and not value:
        raise error(f"{where}: '{key}' must not be empty")
    if spec.type is list and spec.items is not None:
        if not all(_is(v, spec.items) for v in value):
            raise error(f"{where}: '{key}' must be a list of {_names(spec.items)}, got {value!r}")
        for v in value:
            if spec.items in (int, float):
                _bounds(key, v, spec, where, error)
            _choice(key, v, spec, where, error)
        return
    if spec.type in (int, float):
        _bounds(key, value, spec, where, error)
    _choice(key, value, spec, where, error)


def unknown_keys(given, known, where: str, error=QuarlError, what: str = "key") -> None:
    """Refuse keys of `given` not in `known`, suggesting the nearest known key of the first;
    `what` names them in the message ("unknown dqn option(s) ...")."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise error(f"{where}: unknown {what}(s) {', '.join(unknown)}{hint}; known: "
                f"{', '.join(sorted(known))}")


def check(table, keys: dict[str, Key], where: str, error=QuarlError,
          allow_unknown: bool = False) -> dict:
    """Check a TOML table or JSON object against `keys` (name -> Key) and return it: required
    keys present, every given key of its type and range, no unknown keys (unless
    `allow_unknown`). Keys not given are left out (the caller's default applies)."""
    if not isinstance(table, dict):
        raise error(f"{where}: must be a table of keys, got {table!r}")
    if not allow_unknown:
        unknown_keys(table, keys, where, error)
    for key, spec in keys.items():
        if key not in table:
            if spec.required:
                raise error(f"{where}: missing key '{key}'")
            continue
        check_value(key, table[key], spec, where, error)
    return table


def int_sizes(key: str, value) -> tuple[int, ...]:
    """A list of integers (layer sizes: hidden = [64, 64]) as a tuple; a string is refused
    (hidden = "64" is not the network (6, 4)), and so is any item that is not an integer."""
    import numbers
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        raise QuarlError(f"'{key}' must be a list of integers (e.g. [64, 64]), got {value!r}")
    return tuple(int(v) for v in value)

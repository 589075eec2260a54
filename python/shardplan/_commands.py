"""The typed functions estimate, simulate, plan, capacity, models and gpus, generated from the CLI's flag table
(`_core.flag_table()`, Note [Flag table] in cli/flag_table.h): each keyword is one flag of the command, with the
flag's type, help and default, so the signatures cannot drift from what the parser takes. Values are checked here
and errors name the Python keywords; the call itself runs the command line in-process (_core)."""
import difflib
import inspect
import os
import re
import typing

from . import _core
from . import results

InputError = _core.InputError

# Options that name a JSON document: a preset name, a path, or the document itself as a dict.
_DOCUMENTS = {"model", "cluster", "plan", "catalog", "profile"}
_SCALARS = {"int": int, "float": float, "str": str, "bool": bool}
_RESULTS = {"plan": results.PlanResult, "simulate": results.SimulateResult, "estimate": results.EstimateResult,
            "capacity": results.CapacityResult, "models": results.Listing, "gpus": results.Listing}
_ARTICLE = {"int": "an int", "float": "a float", "str": "a str", "bool": "True or False"}


def _annotation(option):
    scalar = _SCALARS[option["type"]]
    if option["name"] in _DOCUMENTS:
        return typing.Union[str, os.PathLike, dict]
    if option["type"] == "str" and option["multiple"]:
        return typing.Union[str, typing.Sequence[str]]
    if option["multiple"]:
        return typing.Union[scalar, typing.Sequence[scalar]]
    return scalar


def _type_error(option, value):
    expected = _ARTICLE[option["type"]]
    if option["name"] in _DOCUMENTS:
        expected = "a str, a path or a dict"
    elif option["multiple"]:
        expected += " or a list of them"
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise _input_error(f"{option['name']}: expected {expected}, got {type(value).__name__} {shown}")


def _input_error(message, cli_message=None):
    error = InputError(message)
    error.status = 2
    error.cli_message = cli_message
    return error


def _check_scalar(option, value):
    kind = option["type"]
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif option["name"] in _DOCUMENTS:
        ok = isinstance(value, (str, os.PathLike, dict))
    else:  # text the CLI parses itself (numbers written as text are its business: --lora-r 8)
        ok = isinstance(value, (str, os.PathLike, int, float)) and not isinstance(value, bool)
    if not ok:
        _type_error(option, value)


def _check(option, value):
    if value is None:
        return
    if option["multiple"] and isinstance(value, (list, tuple)):
        for item in value:
            _check_scalar(option, item)
    else:
        _check_scalar(option, value)


def _renamed(message, options):
    """The CLI's line with flags as keywords: "shardplan: error: --seq-len: ..." -> "seq_len: ..."."""
    names = {}
    for option in options:
        names[option["flag"]] = option["name"]
        if option["short"]:
            names[option["short"]] = option["name"]
    message = re.sub(r"^shardplan: (internal )?error: ", "", message)
    message = message.replace(" (see --help)", "")
    return re.sub(r"(?<![\w-])(--?[A-Za-z][\w-]*)(?![\w-])", lambda m: names.get(m.group(1), m.group(1)), message)


def _label(kwargs):
    """"llama3-8b on 8xH100-80GB": the model and cluster as given (a dict's "name" where it has one)."""
    def name(value):
        if isinstance(value, dict):
            return str(value.get("name", "custom"))
        return os.path.basename(os.fspath(value)) if value is not None else None
    parts = [name(kwargs.get("model")), name(kwargs.get("cluster"))]
    return " on ".join(p for p in parts if p) or "shardplan"


def _docstring(entry, signature_options):
    lines = [entry["description"][:1].upper() + entry["description"][1:] + ".", "",
             f"Runs `shardplan {entry['command']} --json` in-process; returns a "
             f"{_RESULTS[entry['command']].__name__} (fields with units in their names; .to_dict() is the JSON "
             "document). Bad input raises shardplan.InputError naming the keyword.", "", "Keywords (CLI flag):"]
    for option in signature_options:
        default = " (required)" if option["required"] else (
            f" (default {option['default']})" if option["default"] is not None else "")
        lines.append(f"  {option['name']}: {option['type']}{'...' if option['multiple'] else ''}{default}  "
                     f"[{option['flag']}]")
        lines.append(f"      {option['help']}")
    return "\n".join(lines)


def make_command(entry):
    """The function for one command of the flag table."""
    command = entry["command"]
    options = entry["options"]
    by_name = {option["name"]: option for option in options}
    result_type = _RESULTS[command]
    parameters = [inspect.Parameter(o["name"], inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(o),
                                    default=inspect.Parameter.empty if o["required"] else
                                    (False if o["type"] == "bool" else None)) for o in options]

    def function(**kwargs):
        for name, value in kwargs.items():
            if name not in by_name:
                close = difflib.get_close_matches(name, list(by_name), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise _input_error(f"{command}(): unknown keyword '{name}'{hint}")
            _check(by_name[name], value)
        missing = [o["name"] for o in options if o["required"] and kwargs.get(o["name"]) is None]
        if missing:
            raise _input_error(f"{command}(): missing required keyword '{missing[0]}'")
        try:
            document = getattr(_core, command)(**kwargs)
        except _core.Error as error:
            renamed = type(error)(_renamed(str(error), options))
            renamed.status = error.status
            renamed.cli_message = str(error)
            raise renamed from None
        return result_type.from_document(document, _label(kwargs) if command not in ("models", "gpus") else command)

    function.__name__ = function.__qualname__ = command
    function.__module__ = "shardplan"
    function.__signature__ = inspect.Signature(parameters, return_annotation=result_type)
    function.__doc__ = _docstring(entry, options)
    return function


def commands():
    """{name: function} for every command of the flag table that the module runs."""
    return {entry["command"]: make_command(entry) for entry in _core.flag_table() if entry["command"] in _RESULTS}

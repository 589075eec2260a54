// The extension module `shardplan._core`: estimate, simulate, plan, capacity (and the models and gpus listings) with
// the CLI's inputs as keyword arguments, returning the CLI's --json documents as dicts (errors raise with the CLI's
// one line), and the flag table the typed API in python/shardplan/ is generated from (Note [Flag table]).
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app.h"
#include "errors.h"
#include "flag_table.h"
#include "name_suggest.h"

namespace py = pybind11;

namespace {

using shardplan::cli::CommandLine;
using shardplan::cli::Outcome;
using shardplan::cli::Output;

// Note [Python calls]: a call is the command line it stands for — keyword `seq_len=4096` is `--seq-len 4096`, True
// is a flag given, False or None one left out, a dict is its JSON written inline (Note [Inline JSON] in
// costmodel/json_input.h), a list is the flag repeated where the CLI repeats it (`--profile`) and comma-joined
// where it takes a list (`--gpus`) — parsed and checked by the CLI's own option definitions and run by the same
// command code (cli/app.h). So every default, range check and message is the CLI's, and the dict is the --json
// document the CLI would print. --json is always given; an exit status 3 (`plan`: nothing fits) is a document with
// "feasible": false, not an error.
struct Exceptions {
  py::object input_error;     // shardplan.InputError: bad input (the CLI's exit status 2)
  py::object internal_error;  // shardplan.InternalError: a bug (status 1)
};

[[noreturn]] void raise(const py::object& type, const std::string& message, int status) {
  py::object error = type(message);
  error.attr("status") = status;
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

std::string text_of(const py::handle& value, const py::object& dumps) {
  if (py::isinstance<py::dict>(value)) return py::cast<std::string>(dumps(value));
  if (py::isinstance<py::bool_>(value)) return py::cast<bool>(value) ? "true" : "false";
  if (py::isinstance<py::float_>(value)) return py::cast<std::string>(py::repr(value));  // shortest round trip
  if (py::hasattr(value, "__fspath__")) return py::cast<std::string>(py::module_::import("os").attr("fspath")(value));
  return py::cast<std::string>(py::str(value));
}

// A keyword's name as UTF-8 for messages and flags: a lone surrogate (which UTF-8 cannot carry) as "\\udc80".
std::string name_of(const py::handle& key) {
  return py::cast<std::string>(py::bytes(key.attr("encode")("utf-8", "backslashreplace")));
}

// Note [Python values]: a value Python itself cannot turn into UTF-8 text or JSON — a lone surrogate, an int past
// Python's 4,300-digit str() limit (10**5000), a dict that contains itself or nests past the recursion limit — raised
// RuntimeError ("Unable to cast Python instance"), ValueError or RecursionError from inside the conversion (issue 37).
// It is bad input like any other: InputError naming the argument, with Python's reason, clipped.
template <typename Convert>
auto converted(const std::string& command, const std::string& name, const Exceptions& errors, Convert convert) {
  std::string reason;
  try {
    return convert();
  } catch (py::error_already_set& error) {
    reason = error.what();
    reason = reason.substr(0, reason.find('\n'));  // Python's line, not the traceback pybind11 appends
  } catch (const py::cast_error&) {
    reason = "not text that UTF-8 can carry (a lone surrogate?)";
  }
  raise(errors.input_error,
        shardplan::Error::one_line("shardplan: error: " + command + ": argument '" + name + "': cannot be passed (" +
                                   reason + ")"),
        2);
}

// The argument list (argv[0] included) a call stands for, checked against the command's options.
std::vector<std::string> command_arguments(CommandLine& line, const std::string& command, const py::kwargs& kwargs,
                                           const Exceptions& errors) {
  CLI::App* sub = line.app().get_subcommand(command);
  const py::object dumps = py::module_::import("json").attr("dumps");
  std::vector<std::string> args = {"shardplan", command, "--json"};
  for (const auto& [key, keyword_value] : kwargs) {
    const std::string name = name_of(key);
    const auto text_of = [&](const py::handle& value, const py::object& json_dumps) {
      return converted(command, name, errors, [&] { return ::text_of(value, json_dumps); });
    };
    const py::handle& value = keyword_value;
    std::string flag = "--" + name;
    for (char& c : flag) c = c == '_' ? '-' : c;
    CLI::Option* option = name == "json" || name == "help" ? nullptr : sub->get_option_no_throw(flag);
    if (option == nullptr) {
      std::vector<std::string> known;
      for (const CLI::Option* candidate : sub->get_options()) {
        std::string long_name = candidate->get_single_name();
        if (long_name == "json" || long_name == "help" || long_name.size() < 2) continue;
        for (char& c : long_name) c = c == '-' ? '_' : c;
        known.push_back(long_name);
      }
      raise(errors.input_error,
            shardplan::Error::one_line("shardplan: error: " + command + ": unknown argument '" + name + "'" +
                                       shardplan::did_you_mean(name, known)),
            2);
    }
    if (value.is_none()) continue;
    const bool is_flag = option->get_expected_max() == 0;  // add_flag: no value follows
    if (is_flag) {
      if (!py::isinstance<py::bool_>(value)) {
        raise(errors.input_error, "shardplan: error: " + command + ": argument '" + name + "': expected True or False",
              2);
      }
      if (py::cast<bool>(value)) args.push_back(flag);
      continue;
    }
    const bool is_sequence = py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value);
    if (!is_sequence) {
      args.insert(args.end(), {flag, text_of(value, dumps)});
    } else if (option->get_items_expected_max() > 1) {  // a repeatable option: the flag once per item
      for (const auto& item : value) args.insert(args.end(), {flag, text_of(item, dumps)});
    } else {  // a list the CLI writes comma-separated
      std::string joined;
      for (const auto& item : value) joined += (joined.empty() ? "" : ",") + text_of(item, dumps);
      args.insert(args.end(), {flag, joined});
    }
  }
  return args;
}

py::object call(const std::string& command, const py::kwargs& kwargs, const Exceptions& errors) {
  nlohmann::json document;
  bool produced = false;
  CommandLine line(shardplan::cli::planning_commands(), Output{[&](const nlohmann::json& value) {
                     document = value;
                     produced = true;
                   }});
  const std::vector<std::string> args = command_arguments(line, command, kwargs, errors);
  std::vector<const char*> argv;
  for (const auto& arg : args) argv.push_back(arg.c_str());
  Outcome outcome;
  {
    // The search takes seconds: let other Python threads run meanwhile. Nothing below touches Python objects.
    py::gil_scoped_release unlocked;
    outcome = line.run(static_cast<int>(argv.size()), argv.data());
  }
  if (outcome.status == 2) raise(errors.input_error, outcome.error_line, 2);
  if (outcome.status != 0 && !(outcome.status == 3 && produced)) {
    raise(errors.internal_error,
          outcome.error_line.empty() ? "shardplan: exit status " + std::to_string(outcome.status) : outcome.error_line,
          outcome.status);
  }
  const std::string text = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return py::module_::import("json").attr("loads")(text);
}

}  // namespace

PYBIND11_MODULE(_core, module) {
  module.doc() =
      "shardplan._core: the command line in-process. Each function takes the CLI's flags as keyword arguments "
      "(seq_len=4096 for --seq-len 4096) and returns the document `shardplan <command> --json` prints; bad input "
      "raises InputError with the CLI's one-line message. `import shardplan` wraps it with typed signatures.";
  module.attr("__version__") = SHARDPLAN_VERSION;
  module.def(
      "flag_table",
      [] {
        CommandLine line(shardplan::cli::planning_commands(), Output{[](const nlohmann::json&) {}});
        return py::module_::import("json").attr("loads")(shardplan::cli::flag_table(line.app()).dump());
      },
      "The planning commands' options as data: [{command, description, options: [{flag, name, type, ...}]}].");
  const py::object base = py::module_::import("builtins").attr("Exception");
  const py::object value_error = py::module_::import("builtins").attr("ValueError");
  const py::object runtime_error = py::module_::import("builtins").attr("RuntimeError");
  const py::object type = py::module_::import("builtins").attr("type");
  py::dict no_attributes;
  no_attributes["__module__"] = "shardplan";  // shown as shardplan.InputError
  const py::object error = type("Error", py::make_tuple(base), no_attributes);
  error.attr("__doc__") = "Any shardplan error; `status` is the CLI's exit status.";
  module.attr("Error") = error;
  const Exceptions errors{type("InputError", py::make_tuple(error, value_error), no_attributes),
                          type("InternalError", py::make_tuple(error, runtime_error), no_attributes)};
  errors.input_error.attr("__doc__") = "Bad input (the CLI's exit status 2): the message names the field.";
  errors.internal_error.attr("__doc__") = "An internal error (the CLI's exit status 1).";
  module.attr("InputError") = errors.input_error;
  module.attr("InternalError") = errors.internal_error;

  const auto bind = [&](const char* name, const char* help) {
    module.def(
        name, [name, errors](const py::kwargs& kwargs) { return call(name, kwargs, errors); }, help);
  };
  bind("estimate", "`shardplan estimate --json`: per-rank memory at the step's peak. Required: model, cluster.");
  bind("simulate", "`shardplan simulate --json`: one simulated step of a plan (plan: path or dict; default FSDP's).");
  bind("plan", "`shardplan plan --json`: the fastest plan that fits, with 'plan', 'predicted', 'baselines'.");
  bind("capacity", "`shardplan capacity --json`: GPU types x counts; gpus may be a list. Required: model.");
  bind("models", "`shardplan models --json`: the model presets.");
  bind("gpus", "`shardplan gpus --json`: the GPU and fabric catalog (catalog: path or dict).");
}

// flag_table: the commands' options read off the CLI11 app (Note [Flag table] in flag_table.h).
#include "flag_table.h"

namespace shardplan::cli {

namespace {

// CLI11's type name ("INT", "FLOAT:FLOAT in [0 - 100]", "TEXT:FILE", "UINT") as one of the table's four types.
std::string type_of(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return "bool";
  const std::string full = option.get_type_name();
  const std::string base = full.substr(0, full.find(':'));
  if (base == "INT" || base == "UINT") return "int";
  if (base == "FLOAT") return "float";
  return "str";
}

}  // namespace

std::string python_name(const std::string& flag) {
  std::string name = flag.substr(flag.find_first_not_of('-'));
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

nlohmann::json flag_table(const CLI::App& root) {
  nlohmann::json table = nlohmann::json::array();
  for (const CLI::App* command : root.get_subcommands({})) {
    if (command->get_group().empty()) continue;  // hidden: `completion`, `man`
    nlohmann::json options = nlohmann::json::array();
    for (const CLI::Option* option : command->get_options()) {
      if (option->get_lnames().empty()) continue;  // positional or short-only
      const std::string flag = "--" + option->get_lnames().front();
      if (flag == "--help" || flag == "--json") continue;
      const std::string help = option->get_description();
      const bool multiple = option->get_items_expected_max() > 1 || help.find("comma") != std::string::npos;
      const std::string default_text = option->get_default_str();
      options.push_back({{"flag", flag},
                         {"short", option->get_snames().empty() ? "" : "-" + option->get_snames().front()},
                         {"name", python_name(flag)},
                         {"type", type_of(*option)},
                         {"multiple", multiple},
                         {"required", option->get_required()},
                         {"default", default_text.empty() ? nlohmann::json() : nlohmann::json(default_text)},
                         {"help", help}});
    }
    table.push_back({{"command", command->get_name()}, {"description", command->get_description()},
                     {"options", options}});
  }
  return table;
}

}  // namespace shardplan::cli

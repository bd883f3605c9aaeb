#include "viewers/script.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/common/error.h"
#include "viewers/figure_size.h"

namespace kvscope::viewers {

namespace {

struct Arity {
  int min, max;  // max -1: the rest of the line is one argument
};

const std::map<std::string, Arity>& commands() {
  static const std::map<std::string, Arity> c = {
      {"load-default", {0, 0}}, {"prompt", {1, -1}}, {"sample", {1, 1}},     {"policy", {1, 1}},     {"budget", {1, 1}}, {"cache-type", {1, 1}},
      {"tokens", {1, 1}},       {"run", {0, 0}},     {"pin", {0, 0}},        {"open", {1, 1}},       {"save", {1, 1}},
      {"layer", {1, 1}},        {"head", {1, 1}},    {"token", {1, 1}},      {"step", {1, 1}},       {"view", {1, 1}},
      {"wait", {0, 1}},         {"frames", {1, 1}},  {"screenshot", {1, 1}}, {"export", {2, 3}},     {"quit", {0, 0}},
      {"mouse", {2, 2}},        {"click", {0, 0}},   {"layout", {1, 1}},     {"open-sweep", {1, 1}}, {"sweep", {2, 3}},
      {"metric", {1, 1}},       {"log-y", {1, 1}},   {"pick", {2, 3}},    {"save-file", {2, 2}},  {"minus", {1, 1}},
      {"zoom", {4, 4}},         {"show", {1, 1}},    {"decode", {1, 1}},     {"lock-range", {1, 1}},
      {"double-click", {0, 0}}, {"samples", {1, -1}},  {"select-sample", {1, 1}}, {"resize", {2, 2}},
      {"panel", {2, 2}},        {"samples-filter", {1, 1}}, {"samples-sort", {1, 2}}, {"device", {1, 1}},
      {"stat", {1, 1}},         {"quality-x", {1, 1}},     {"cache-page", {1, 1}}, {"points", {1, 1}},
      {"wait-file", {1, 2}},    {"status", {1, 1}},
  };
  return c;
}

bool is_integer(const std::string& s) {
  if (s.empty()) return false;
  std::size_t i = s[0] == '-' ? 1 : 0;
  return i < s.size() && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

void parse_size(const std::string& text, int& width, int& height) {
  const auto x = text.find('x');
  if (x == std::string::npos || !is_integer(text.substr(0, x)) || !is_integer(text.substr(x + 1)))
    throw UsageError("size '" + text + "': expected WIDTHxHEIGHT, e.g. 1200x800");
  width = std::stoi(text.substr(0, x));
  height = std::stoi(text.substr(x + 1));
  if (width < 64 || height < 64 || width > 16384 || height > 16384)
    throw UsageError("size '" + text + "' is out of range (64..16384 pixels per side)");
}

std::vector<ScriptStep> parse_script(const std::string& text, const std::string& origin) {
  std::vector<ScriptStep> steps;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const auto first = raw.find_first_not_of(" \t");
    if (first == std::string::npos || raw[first] == '#') continue;
    const std::string line = raw.substr(first);
    const auto where = [&] { return origin + ":" + std::to_string(line_no) + ": "; };
    ScriptStep step;
    step.line = line_no;
    const auto sp = line.find_first_of(" \t");
    step.command = line.substr(0, sp);
    auto it = commands().find(step.command);
    if (it == commands().end()) {
      std::string valid;
      for (const auto& [name, a] : commands()) valid += (valid.empty() ? "" : ", ") + name;
      throw UsageError(where() + "unknown command '" + step.command + "' (valid: " + valid + ")");
    }
    std::string rest;
    if (sp != std::string::npos) {
      const auto begin = line.find_first_not_of(" \t", sp);
      if (begin != std::string::npos) rest = line.substr(begin);
    }
    while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.pop_back();
    const Arity arity = it->second;
    if (arity.max == -1) {
      if (!rest.empty()) step.args.push_back(rest);
    } else {
      std::istringstream words(rest);
      std::string w;
      while (words >> w) step.args.push_back(w);
    }
    const int n = static_cast<int>(step.args.size());
    if (n < arity.min || (arity.max >= 0 && n > arity.max))
      throw UsageError(where() + "'" + step.command + "' takes " +
                       (arity.min == arity.max ? std::to_string(arity.min)
                                               : std::to_string(arity.min) + ".." + (arity.max < 0 ? "n" : std::to_string(arity.max))) +
                       " argument(s), got " + std::to_string(n));
    const std::string& c = step.command;
    if (c == "sweep" && n == 3 && !is_integer(step.args[2]))
      throw UsageError(where() + "'sweep' takes new tokens as an integer, got '" + step.args[2] + "'");
    if ((c == "tokens" || c == "frames" || c == "layer" || c == "head" || c == "token" || c == "step" || c == "show" ||
         c == "select-sample" || c == "cache-page") &&
        !is_integer(step.args[0]))
      throw UsageError(where() + "'" + c + "' needs an integer, got '" + step.args[0] + "'");
    if (c == "mouse" && (!is_integer(step.args[0]) || !is_integer(step.args[1])))
      throw UsageError(where() + "'mouse' needs two integer pixel coordinates, got '" + rest + "'");
    if (c == "zoom" && (!std::all_of(step.args.begin(), step.args.end(), is_integer) || std::stoi(step.args[0]) >= std::stoi(step.args[1]) ||
                        std::stoi(step.args[2]) >= std::stoi(step.args[3])))
      throw UsageError(where() + "'zoom' needs KEY0 KEY1 ROW0 ROW1, integers with KEY0 < KEY1 and ROW0 < ROW1, got '" + rest + "'");
    if (c == "lock-range" && step.args[0] != "on" && step.args[0] != "off")
      throw UsageError(where() + "'lock-range' takes on (keep the colour range of the map shown now) or off, got '" +
                       step.args[0] + "'");
    if (c == "decode" && step.args[0] != "on" && step.args[0] != "off")
      throw UsageError(where() + "'decode' takes on (the decode rows) or off (the prefill map), got '" + step.args[0] + "'");
    if (c == "wait" && n == 1 && !is_integer(step.args[0]))
      throw UsageError(where() + "'wait' takes whole seconds, got '" + step.args[0] + "'");
    if (c == "wait-file" && n == 2 && !is_integer(step.args[1]))
      throw UsageError(where() + "'wait-file' takes whole seconds after the path, got '" + step.args[1] + "'");
    if (c == "view" || c == "export" || (c == "layout" && step.args[0] != "default")) {
      const auto& names = kPanelNames;
      if (std::find(std::begin(names), std::end(names), step.args[0]) == std::end(names) ||
          (c == "layout" && step.args[0] == "setup")) {
        std::string valid;
        for (const char* v : names) valid += (valid.empty() ? "" : ", ") + std::string(v);
        throw UsageError(where() + "unknown view '" + step.args[0] + "' (valid: " + valid + ")");
      }
    }
    if (c == "export" && n == 3) {
      try {
        parse_figure_size(step.args[2], 300);  // as `kvscope figure --size` takes it
      } catch (const UsageError& e) {
        throw UsageError(where() + e.what());
      }
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<ScriptStep> load_script(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read script file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_script(ss.str(), path);
}

}  // namespace kvscope::viewers

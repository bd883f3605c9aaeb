#include "core/policy/params.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/common/error.h"

namespace kvscope::policy {

namespace {

// The shortest text that reads back as `v` (0.1, 1048576, 1e+300), so that what is printed or recorded is
// the value that ran.
std::string format_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::string text;
  for (int precision = 6; precision <= 17; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    text = os.str();
    if (std::strtod(text.c_str(), nullptr) == v) break;
  }
  return text;
}

// An Int parameter's number as the integer it is (1048576, not 1.04858e+06).
std::string format_integer(double v) { return std::to_string(static_cast<long long>(std::llround(v))); }

std::string valid_names(const std::vector<ParamSpec>& specs) {
  if (specs.empty()) return "(it takes no parameters)";
  std::string out;
  for (const auto& s : specs) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : "|") + s;
  return out;
}

// "0.1/0.25/0.5" -> its numbers, each checked against spec's range; `what` names the policy and parameter.
std::vector<double> parse_list(const std::string& what, const std::string& text, const ParamSpec& spec) {
  std::vector<std::string> items;
  std::string::size_type start = 0;
  for (auto slash = text.find('/'); ; slash = text.find('/', start)) {
    items.push_back(text.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::vector<double> values;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    const std::string which = what + " value " + std::to_string(i + 1) + " of " + std::to_string(items.size());
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(value))
      throw UsageError(which + ", '" + item + "', is not a number; expected " + spec.range_text());
    if (value < spec.min || value > spec.max || (spec.max_open && value == spec.max))
      throw UsageError(which + ", " + item + ", is out of range; expected " + spec.range_text());
    values.push_back(value);
  }
  return values;
}

}  // namespace

ParamSpec ParamSpec::integer(std::string name, int def, int lo, int hi, std::string doc) {
  ParamSpec s;
  s.name = std::move(name);
  s.kind = Kind::Int;
  s.default_number = def;
  s.min = lo;
  s.max = hi;
  s.doc = std::move(doc);
  return s;
}

ParamSpec ParamSpec::real(std::string name, double def, double lo, double hi, std::string doc) {
  ParamSpec s = integer(std::move(name), 0, 0, 0, std::move(doc));
  s.kind = Kind::Float;
  s.default_number = def;
  s.min = lo;
  s.max = hi;
  return s;
}

ParamSpec ParamSpec::choice(std::string name, std::string def, std::vector<std::string> options, std::string doc) {
  ParamSpec s;
  s.name = std::move(name);
  s.kind = Kind::Choice;
  s.choices = std::move(options);
  s.default_choice = std::move(def);
  s.doc = std::move(doc);
  return s;
}

ParamSpec ParamSpec::flag(std::string name, bool def, std::string doc) {
  ParamSpec s = integer(std::move(name), def ? 1 : 0, 0, 1, std::move(doc));
  s.kind = Kind::Bool;
  return s;
}

ParamSpec ParamSpec::real_list(std::string name, double lo, double hi, bool hi_open, std::string doc) {
  ParamSpec s = real(std::move(name), 0.0, lo, hi, std::move(doc));
  s.kind = Kind::RealList;
  s.max_open = hi_open;
  return s;
}

std::string ParamSpec::default_text() const {
  switch (kind) {
    case Kind::Choice: return default_choice;
    case Kind::RealList: return "none";
    case Kind::Bool: return default_number != 0.0 ? "true" : "false";
    case Kind::Int: return format_integer(default_number);
    default: return format_number(default_number);
  }
}

std::string ParamSpec::range_text() const {
  switch (kind) {
    case Kind::Choice: return join(choices);
    case Kind::Bool: return "true|false";
    case Kind::Int: return "integer in [" + format_integer(min) + ", " + format_integer(max) + "]";
    case Kind::RealList:
      return "numbers in [" + format_number(min) + ", " + format_number(max) + (max_open ? ")" : "]") +
             " separated by '/'";
    default: return "[" + format_number(min) + ", " + format_number(max) + (max_open ? ")" : "]");
  }
}

std::string default_range_problem(const ParamSpec& spec) {
  if (spec.kind != ParamSpec::Kind::Int && spec.kind != ParamSpec::Kind::Float) return "";
  if (!(spec.min <= spec.max))
    return "its range is empty: min " + format_number(spec.min) + " > max " + format_number(spec.max);
  if (!std::isfinite(spec.default_number)) return "default " + format_number(spec.default_number) + " is not finite";
  if (spec.default_number < spec.min || spec.default_number > spec.max)
    return "default " + format_number(spec.default_number) + " is outside its own range, " + spec.range_text();
  return "";
}

PolicyParams::PolicyParams(const std::string& policy, const std::vector<ParamSpec>& specs,
                           const std::vector<std::pair<std::string, std::string>>& assignments)
    : policy_(policy) {
  for (const auto& s : specs) {
    if (s.kind == ParamSpec::Kind::Choice)
      choices_[s.name] = s.default_choice;
    else if (s.kind == ParamSpec::Kind::RealList)
      lists_[s.name] = {};
    else
      numbers_[s.name] = s.default_number;
  }
  for (const auto& [key, text] : assignments) {
    const ParamSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == key) spec = &s;
    if (!spec)
      throw UsageError("policy '" + policy + "' has no parameter '" + key + "'; valid parameters: " + valid_names(specs));
    const std::string what = "policy '" + policy + "' parameter '" + key + "'";
    given_.insert(key);
    if (spec->kind == ParamSpec::Kind::Choice) {
      bool ok = false;
      for (const auto& c : spec->choices) ok = ok || c == text;
      if (!ok) throw UsageError(what + " = '" + text + "' is not one of " + join(spec->choices));
      choices_[key] = text;
      continue;
    }
    if (spec->kind == ParamSpec::Kind::Bool) {
      if (text == "true" || text == "1" || text == "on") numbers_[key] = 1;
      else if (text == "false" || text == "0" || text == "off") numbers_[key] = 0;
      else throw UsageError(what + " = '" + text + "' is not true or false");
      continue;
    }
    if (spec->kind == ParamSpec::Kind::RealList) {
      lists_[key] = parse_list(what, text, *spec);
      continue;
    }
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      throw UsageError(what + " = '" + text + "' is not a number; expected " + spec->range_text());
    if (spec->kind == ParamSpec::Kind::Int && value != std::floor(value))
      throw UsageError(what + " = '" + text + "' is not an integer; expected " + spec->range_text());
    if (value < spec->min || value > spec->max || (spec->max_open && value == spec->max))
      throw UsageError(what + " = " + text + " is out of range; expected " + spec->range_text());
    numbers_[key] = value;
  }
}

int PolicyParams::get_int(const std::string& name) const { return static_cast<int>(get_float(name)); }

double PolicyParams::get_float(const std::string& name) const {
  auto it = numbers_.find(name);
  if (it == numbers_.end()) throw Error("policy '" + policy_ + "' read undeclared parameter '" + name + "'");
  return it->second;
}

bool PolicyParams::get_bool(const std::string& name) const { return get_float(name) != 0.0; }

const std::string& PolicyParams::get_choice(const std::string& name) const {
  auto it = choices_.find(name);
  if (it == choices_.end()) throw Error("policy '" + policy_ + "' read undeclared parameter '" + name + "'");
  return it->second;
}

const std::vector<double>& PolicyParams::get_list(const std::string& name) const {
  auto it = lists_.find(name);
  if (it == lists_.end()) throw Error("policy '" + policy_ + "' read undeclared parameter '" + name + "'");
  return it->second;
}

std::map<std::string, std::string> PolicyParams::as_text() const {
  std::map<std::string, std::string> out = choices_;
  for (const auto& [k, values] : lists_) {
    std::string text;
    for (double v : values) text += (text.empty() ? "" : "/") + format_number(v);
    out[k] = text;
  }
  for (const auto& [k, v] : numbers_) out[k] = format_number(v);
  return out;
}

PolicySpecText split_policy_spec(const std::string& text) {
  PolicySpecText out;
  const auto colon = text.find(':');
  out.name = text.substr(0, colon);
  if (out.name.empty()) throw UsageError("policy spec '" + text + "' has no policy name");
  if (colon == std::string::npos) return out;
  std::stringstream rest(text.substr(colon + 1));
  std::string item;
  while (std::getline(rest, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UsageError("policy spec '" + text + "': '" + item + "' is not of the form key=value");
    out.assignments.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return out;
}

}  // namespace kvscope::policy

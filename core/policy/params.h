#pragma once
// Policy parameters: each policy declares its parameters (paper default, range, doc); the command line
// "snapkv:window=32,kernel=7,pooling=avg" is parsed and checked against that declaration.
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kvscope::policy {

struct ParamSpec {
  // RealList: numbers separated by '/' ("0.1/0.25/0.5"), each in [min, max] (max excluded when max_open), e.g.
  // one compression ratio per layer; its default is the empty list, which a user of the parameter must refuse
  // where it needs values, naming how many it needs.
  enum class Kind { Int, Float, Choice, Bool, RealList };
  std::string name;
  Kind kind = Kind::Int;
  double default_number = 0.0;        // Int, Float, Bool (0/1)
  double min = 0.0, max = 0.0;        // inclusive range for Int, Float and RealList's values
  bool max_open = false;              // RealList, Float: max itself is out of range
  std::vector<std::string> choices;   // Choice
  std::string default_choice;         // Choice
  std::string doc;                    // one line, citing the paper's equation or section

  static ParamSpec integer(std::string name, int def, int lo, int hi, std::string doc);
  static ParamSpec real(std::string name, double def, double lo, double hi, std::string doc);
  static ParamSpec choice(std::string name, std::string def, std::vector<std::string> options, std::string doc);
  static ParamSpec flag(std::string name, bool def, std::string doc);
  // Values in [lo, hi], or [lo, hi) when hi_open; the default is the empty list.
  static ParamSpec real_list(std::string name, double lo, double hi, bool hi_open, std::string doc);
  std::string default_text() const;
  std::string range_text() const;
};

// "" when a number parameter's default is finite and within its own range (and the range is not empty);
// otherwise what is wrong, for the file that declared it: "default 5 is outside its own range, [0, 1]".
std::string default_range_problem(const ParamSpec& spec);

class PolicyParams {
 public:
  PolicyParams() = default;
  // Every spec's default, then the given "key=value" pairs checked against the specs.
  PolicyParams(const std::string& policy, const std::vector<ParamSpec>& specs,
               const std::vector<std::pair<std::string, std::string>>& assignments);

  int get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_choice(const std::string& name) const;
  const std::vector<double>& get_list(const std::string& name) const;
  bool has(const std::string& name) const { return numbers_.count(name) || choices_.count(name) || lists_.count(name); }
  // Whether the spec text set `name` (rather than its default).
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  // Removes a parameter that does not apply (another allocation's): reading it then fails, traces omit it.
  void erase(const std::string& name) {
    numbers_.erase(name);
    choices_.erase(name);
    lists_.erase(name);
    given_.erase(name);
  }
  // Every parameter as text, for traces and reports (a list as its values joined by '/').
  std::map<std::string, std::string> as_text() const;
  void set_number(const std::string& name, double value) { numbers_[name] = value; }
  void set_choice(const std::string& name, const std::string& value) { choices_[name] = value; }

 private:
  std::string policy_;
  std::map<std::string, double> numbers_;
  std::map<std::string, std::string> choices_;
  std::map<std::string, std::vector<double>> lists_;
  std::set<std::string> given_;
};

// "name:key=value,key=value" -> name and the pairs. Throws UsageError on malformed text.
struct PolicySpecText {
  std::string name;
  std::vector<std::pair<std::string, std::string>> assignments;
};
PolicySpecText split_policy_spec(const std::string& text);

}  // namespace kvscope::policy

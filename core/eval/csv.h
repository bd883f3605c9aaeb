#pragma once
// One line of a sweep's rows.csv: fields separated by commas, quoted (RFC 4180) when they hold a comma, a
// quote or a newline. Policy specs carry commas ("snapkv:window=32,kernel=7"), so quoting matters.
#include <string>
#include <vector>

namespace kvscope::eval {

// The field as written: quoted only when it must be.
std::string csv_field(const std::string& s);
// A number as written: shortest form that reads back to the same double (%.17g).
std::string csv_number(double v);
// The fields of one line; "" quotes inside a quoted field are one quote.
std::vector<std::string> parse_csv_line(const std::string& line);

}  // namespace kvscope::eval

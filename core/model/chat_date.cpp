#include "core/model/chat_date.h"

#include <array>
#include <cstdio>

#include "core/common/error.h"

namespace kvscope::model {
namespace {

// English abbreviations whatever the locale: Python's %b in the C locale, which transformers never changes.
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

int days_in_month(int month, int year) {
  static constexpr std::array<int, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 1 && leap ? 29 : kDays[month];
}

bool all_digits(std::string_view text) {
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return !text.empty();
}

}  // namespace

std::string checked_chat_date(std::string_view date) {
  const auto refuse = [&](const std::string& why) {
    return UsageError("--chat-date '" + std::string(date) + "': " + why +
                      " (expected DD Mon YYYY, as the Llama 3.1 template writes it, e.g. 26 Jul 2024)");
  };
  if (date.size() != 11 || date[2] != ' ' || date[6] != ' ') throw refuse("not of the form DD Mon YYYY");
  const std::string_view day_text = date.substr(0, 2), month_text = date.substr(3, 3), year_text = date.substr(7, 4);
  if (!all_digits(day_text) || !all_digits(year_text)) throw refuse("the day and year must be digits");
  int month = -1;
  for (std::size_t i = 0; i < kMonths.size(); ++i)
    if (kMonths[i] == month_text) month = static_cast<int>(i);
  if (month < 0) throw refuse("month '" + std::string(month_text) + "' is not one of Jan, Feb, ..., Dec");
  const int day = (day_text[0] - '0') * 10 + (day_text[1] - '0');
  const int year = std::stoi(std::string(year_text));
  if (day < 1 || day > days_in_month(month, year)) throw refuse("the month has no day " + std::string(day_text));
  return std::string(date);
}

std::string chat_date_of(std::time_t when) {
  std::tm local{};
  localtime_r(&when, &local);
  char text[16];
  std::snprintf(text, sizeof text, "%02d %s %04d", local.tm_mday, std::string(kMonths[local.tm_mon]).c_str(),
                local.tm_year + 1900);
  return text;
}

std::string today_chat_date() { return chat_date_of(std::time(nullptr)); }

}  // namespace kvscope::model

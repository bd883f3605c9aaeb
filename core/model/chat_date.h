#pragma once
// The date Llama 3.1+ chat templates write in their system block ("Today Date: 26 Jul 2024"), in the form
// Python's strftime("%d %b %Y") gives in the C locale, which is what the templates' strftime_now produces.
#include <ctime>
#include <string>
#include <string_view>

namespace kvscope::model {

// `date` when it reads "DD Mon YYYY" (two-digit day 01..31 valid for the month, English month abbreviation,
// four-digit year); else throws UsageError naming the value and the expected form.
std::string checked_chat_date(std::string_view date);

// The local calendar date of `when` as "DD Mon YYYY" (what transformers' strftime_now("%d %b %Y") writes: it
// reads the local clock).
std::string chat_date_of(std::time_t when);
std::string today_chat_date();

}  // namespace kvscope::model

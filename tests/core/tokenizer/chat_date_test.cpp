// The "DD Mon YYYY" dates of Llama 3.1+ system blocks: --chat-date's checks, and today's date against the C
// library's strftime("%d %b %Y") (what Python's strftime_now writes in the C locale).
#include "core/model/chat_date.h"

#include <catch2/catch.hpp>
#include <ctime>

#include "core/common/error.h"

using namespace kvscope;

TEST_CASE("--chat-date takes DD Mon YYYY dates that exist", "[tokenizer][chat]") {
  for (const char* good : {"26 Jul 2024", "01 Jan 0001", "29 Feb 2024", "29 Feb 2000", "31 Dec 9999"})
    CHECK(model::checked_chat_date(good) == good);
  for (const char* bad : {"", "5 Nov 2026", "26 jul 2024", "26 July 2024", "26 Jul 24", "2024-07-26", "00 Jan 2024",
                          "32 Jan 2024", "31 Apr 2024", "29 Feb 2025", "29 Feb 1900", "2x Jan 2024", "26 Jul 2024 "}) {
    INFO(bad);
    CHECK_THROWS_AS(model::checked_chat_date(bad), UsageError);
    CHECK_THROWS_WITH(model::checked_chat_date(bad), Catch::Contains("DD Mon YYYY"));
  }
}

TEST_CASE("today's chat date is the local date strftime writes", "[tokenizer][chat]") {
  std::tm leap{};
  leap.tm_year = 2024 - 1900;
  leap.tm_mon = 1;
  leap.tm_mday = 29;
  leap.tm_hour = 12;
  leap.tm_isdst = -1;
  CHECK(model::chat_date_of(std::mktime(&leap)) == "29 Feb 2024");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char expected[32];
  REQUIRE(std::strftime(expected, sizeof expected, "%d %b %Y", &local) > 0);  // the program's locale is "C"
  CHECK(model::chat_date_of(now) == expected);
}

#include "viewers/series_style.h"

#include <algorithm>

namespace kvscope::viewers {

SeriesStyle default_series_style(int position) {
  const int round = position / kPaletteColors;  // how often the palette has been gone through
  return {position % kPaletteColors, (position + round) % kMarkerShapes, round % kDashPatterns};
}

std::vector<double> dash_lengths(int dash) {
  switch (dash % kDashPatterns) {
    case 1: return {4.0, 2.5};
    case 2: return {1.2, 2.0};
    case 3: return {4.0, 2.0, 1.2, 2.0};
    default: return {};
  }
}

namespace {

std::size_t index_of(std::vector<std::string>& seen, const std::string& name) {
  const auto it = std::find(seen.begin(), seen.end(), name);
  if (it != seen.end()) return static_cast<std::size_t>(it - seen.begin());
  seen.push_back(name);
  return seen.size() - 1;
}

}  // namespace

std::vector<SeriesStyle> sweep_series_styles(const std::vector<std::string>& names) {
  std::vector<std::string> policies, cache_types;
  std::vector<std::pair<std::size_t, std::size_t>> cells;
  for (const auto& name : names) {
    const std::size_t at = name.rfind(" @");  // eval::SweepRow::series_label
    const std::string policy = at == std::string::npos ? name : name.substr(0, at);
    const std::string type = at == std::string::npos ? std::string() : name.substr(at + 2);
    cells.emplace_back(index_of(policies, policy), index_of(cache_types, type));
  }
  std::vector<SeriesStyle> out;
  if (cache_types.size() <= 1) {
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back(default_series_style(static_cast<int>(i)));
    return out;
  }
  for (const auto& [policy, type] : cells) {
    // Past ten policies the colours come round again: those policies shift their cache types' markers and dashes
    // by one, as default_series_style does.
    const int round = static_cast<int>(policy) / kPaletteColors, t = static_cast<int>(type) + round;
    out.push_back({static_cast<int>(policy) % kPaletteColors, t % kMarkerShapes, t % kDashPatterns});
  }
  return out;
}

}  // namespace kvscope::viewers

#pragma once
// The prompt and the generated text as tokens, each tinted by how many (layer, KV head) caches still
// hold it at the selected step (dark: dropped almost everywhere, bright: kept everywhere). Clicking a
// token selects it in every panel.
#include "viewers/panel.h"

namespace kvscope::viewers {

class TokenStrip final : public Panel {
 public:
  TokenStrip() : Panel("tokens", "Tokens") {}
  void draw(AppState& state) override;

 private:
  std::string signature_;
  std::vector<float> retention_;
  // A token selected elsewhere (a click on a map, a sample's evidence) is scrolled into view: the token followed
  // and the frames left to try (the scroll limit follows the content of the frame before, which may be another run's).
  int followed_token_ = -1;
  int scroll_frames_ = 0;
};

// Where each token box goes when wrapping boxes of the given widths into lines of `avail` width.
struct TokenLayout {
  std::vector<float> x;
  std::vector<int> line;
  int n_lines = 0;
};
TokenLayout layout_tokens(const std::vector<float>& widths, float avail, float gap);

}  // namespace kvscope::viewers

// The status line of a prefill in progress (viewers/session.h, prefill_task): a one-pass prefill of a long prompt
// said "starting" for up to a minute; now the share done, the layer and the tokens, from the engine's per-layer report.
#include <catch2/catch.hpp>

#include "viewers/session.h"

using namespace kvscope;
using namespace kvscope::viewers;

TEST_CASE("a prefill in progress names its share, layer and tokens", "[session]") {
  // One pass over 2,897 tokens, 12 of 30 layers done.
  engine::LayerProgress one_pass{12, 30, 0, 2897, 2897};
  CHECK(one_pass.fraction() == Approx(0.4));
  CHECK(prefill_task("snapkv_b25pct", one_pass) == "snapkv_b25pct: prefill 40% (layer 13 of 30, 2897 tokens)");
  // Block-wise: the second 128-token block of 512, half its layers done: (128 + 64) / 512.
  engine::LayerProgress blocks{15, 30, 128, 128, 512};
  CHECK(blocks.fraction() == Approx(0.375));
  CHECK(prefill_task("caote_b64", blocks) == "caote_b64: prefill 37% (layer 16 of 30, block at token 128 of 512)");
  CHECK(engine::LayerProgress{}.fraction() == 0.0);
}

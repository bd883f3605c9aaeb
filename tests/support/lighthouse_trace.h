#pragma once
// A recorded run of the default model on a short lighthouse story (about 90 tokens), held in memory as the
// window holds a live run: the viewer tests' common real trace.
#include <chrono>
#include <memory>
#include <string>

#include "core/trace/live_trace.h"
#include "core/trace/recorder.h"
#include "tests/support/default_model.h"
#include "tests/support/recorder_run.h"

namespace kvscope::test {

// `policy` at `budget`, 8 generated tokens, everything recorded.
inline std::shared_ptr<const trace::RunTrace> record_lighthouse_run(const std::string& policy, const std::string& budget) {
  const model::Model& model = *default_model();
  const std::vector<int> prompt = model.tokenizer->encode(
      "The lighthouse keeper climbed the stairs every evening to light the lamp. Ships passed in the night, and "
      "the keeper wrote their names in a book: the Mary Ann, the Northern Star, the Good Hope, the Albatross. "
      "Some nights the fog was so thick that the keeper rang the bell until morning, counting the strokes so as "
      "not to fall asleep. One winter a storm broke the glass of the lamp room, the wind put out the flame, and "
      "the keeper",
      false);
  const trace::RecordOptions options = trace::RecordOptions::parse("");
  trace::LiveTrace live(std::chrono::milliseconds(0));
  run_with_recorder(model, prompt, policy, budget, 8, &options, {&live});
  return live.snapshot();
}

}  // namespace kvscope::test

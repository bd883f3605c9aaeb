#pragma once
// Prompts whose one-pass prefill was captured (engine/prefill_capture.h), with the prefill part of their
// trace (attention maps, statistics, similarity maps), so that another run of the same prompt — another
// budget, another policy that compresses after a layer's attention — replays it instead of running the
// model over the prompt again. Keyed by everything upstream of selection: model file, prompt tokens, and
// the recording options that shaped the maps. Not thread-safe: one owner (the window's worker, a sweep).
#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/block_prefix.h"
#include "core/engine/prefill_capture.h"
#include "core/trace/trace_view.h"

namespace kvscope::run {

struct PrefillKey {
  std::string model;           // path and size of the model file, and the compute device
  std::vector<int> prompt;
  std::string record;          // RecordOptions as JSON; empty for runs that record nothing
  bool operator==(const PrefillKey& o) const { return model == o.model && prompt == o.prompt && record == o.record; }
};

struct PrefillEntry {
  PrefillKey key;
  engine::PrefillCapture capture;
  std::shared_ptr<const trace::RunTrace> products;  // the capturing run's trace (its prefill part is reused); may be null
};

class PrefillStore {
 public:
  // capacity: prompts kept (least recently used goes first). keep_products: also keep the prefill maps
  // of runs that have no live trace of their own (a CLI trace of several policies), at their memory cost.
  explicit PrefillStore(std::size_t capacity = 2, bool keep_products = false)
      : capacity_(capacity), keep_products_(keep_products) {}

  // The entry for `key`, or null. With `need_products`, an entry without a prefill trace does not count. A
  // key without recording options (a run that records nothing) matches a capture recorded with any.
  const PrefillEntry* find(const PrefillKey& key, bool need_products);
  // A fresh entry for `key` to capture into (replacing an older one of the same key).
  PrefillEntry& start(const PrefillKey& key);
  // Drops an entry whose capture did not complete (a cancelled or block-wise run).
  void discard(const PrefillEntry& entry);
  // The unedited blocks of `prompt` prefilled in blocks of `block` on `model` (a PrefillKey's model),
  // for a block-wise run to read and extend (engine/block_prefix.h); empty the first time. The same
  // number of prompts is kept as for one-pass captures.
  engine::BlockPrefixCapture& block_prefix(const std::string& model, const std::vector<int>& prompt, int block);
  bool keep_products() const { return keep_products_; }
  std::size_t size() const { return entries_.size(); }
  std::size_t hits() const { return hits_; }

 private:
  std::size_t capacity_;
  bool keep_products_;
  std::list<PrefillEntry> entries_;  // most recent first
  std::list<std::pair<std::string, engine::BlockPrefixCapture>> block_prefixes_;  // by model; most recent first
  std::size_t hits_ = 0;
};

}  // namespace kvscope::run

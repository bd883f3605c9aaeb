#include "core/run/prefill_store.h"

namespace kvscope::run {

const PrefillEntry* PrefillStore::find(const PrefillKey& key, bool need_products) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    // A run that records nothing needs no maps, so the recording options that shaped them do not matter.
    const bool same = key.record.empty() ? it->key.model == key.model && it->key.prompt == key.prompt : it->key == key;
    if (!same || !it->capture.complete || (need_products && !it->products)) continue;
    entries_.splice(entries_.begin(), entries_, it);
    ++hits_;
    return &entries_.front();
  }
  return nullptr;
}

PrefillEntry& PrefillStore::start(const PrefillKey& key) {
  entries_.remove_if([&](const PrefillEntry& e) { return e.key == key; });
  while (!entries_.empty() && entries_.size() >= capacity_) entries_.pop_back();
  entries_.emplace_front();
  entries_.front().key = key;
  return entries_.front();
}

void PrefillStore::discard(const PrefillEntry& entry) {
  entries_.remove_if([&](const PrefillEntry& e) { return &e == &entry; });
}

engine::BlockPrefixCapture& PrefillStore::block_prefix(const std::string& model, const std::vector<int>& prompt, int block) {
  for (auto it = block_prefixes_.begin(); it != block_prefixes_.end(); ++it)
    if (it->first == model && it->second.prompt == prompt && it->second.block == block) {
      block_prefixes_.splice(block_prefixes_.begin(), block_prefixes_, it);
      return block_prefixes_.front().second;
    }
  while (!block_prefixes_.empty() && block_prefixes_.size() >= capacity_) block_prefixes_.pop_back();
  block_prefixes_.emplace_front(model, engine::BlockPrefixCapture{});
  return block_prefixes_.front().second;
}

}  // namespace kvscope::run

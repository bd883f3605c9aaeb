#pragma once
// A growing list (a run's events and step rows) that copies in O(1): copies share one storage and each
// sees its own length. The one that appended last may append in place; any other copy that appends moves
// to storage of its own first, so what a copy has seen never changes under it. A live run's snapshots
// therefore share the history instead of copying it (append_only_rows.h does the same for fixed-width
// rows). Reads look like std::vector's.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <vector>

namespace kvscope::trace {

template <class T>
class AppendOnlyLog {
 public:
  AppendOnlyLog() = default;
  AppendOnlyLog(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  AppendOnlyLog(const std::vector<T>& items) { assign(items.begin(), items.end()); }  // NOLINT: reads as a vector

  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const T* data() const { return storage_ ? storage_->items.get() : nullptr; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  const T& front() const { return data()[0]; }
  const T& back() const { return data()[n_ - 1]; }
  const T& at(std::size_t i) const {
    if (i >= n_) throw std::out_of_range("AppendOnlyLog::at");
    return data()[i];
  }

  void push_back(T item) { *grow(1) = std::move(item); }
  template <class It>
  void append(It first, It last) {
    T* out = grow(static_cast<std::size_t>(std::distance(first, last)));
    std::copy(first, last, out);
  }
  template <class It>
  void assign(It first, It last) {
    storage_.reset();
    n_ = 0;
    append(first, last);
  }
  void clear() {
    storage_.reset();
    n_ = 0;
  }
  friend bool operator==(const AppendOnlyLog& a, const AppendOnlyLog& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

  // Elements copied because storage moved during the last push_back/append (tests bound publishing).
  std::size_t moved_by_last_append() const { return moved_; }

 private:
  struct Storage {
    std::unique_ptr<T[]> items;
    std::size_t capacity = 0;
    // Slots claimed by any copy. A copy may write in place only by claiming the slots right after its own
    // end, so two copies never write the same slot and a snapshot's items are never written again.
    std::atomic<std::size_t> used{0};
  };

  // Room for k more items at the end, returned for writing; n_ grows by k.
  T* grow(std::size_t k) {
    moved_ = 0;
    std::size_t expected = n_;
    const bool in_place =
        storage_ && n_ + k <= storage_->capacity && storage_->used.compare_exchange_strong(expected, n_ + k);
    if (!in_place) {
      auto next = std::make_shared<Storage>();
      next->capacity = std::max<std::size_t>({16, n_ + k, storage_ ? storage_->capacity * 2 : 0});
      next->items.reset(new T[next->capacity]());
      if (n_ > 0) std::copy_n(storage_->items.get(), n_, next->items.get());
      moved_ = n_;
      next->used = n_ + k;
      storage_ = std::move(next);
    }
    T* out = storage_->items.get() + n_;
    n_ += k;
    return out;
  }

  std::shared_ptr<Storage> storage_;
  std::size_t n_ = 0, moved_ = 0;
};

}  // namespace kvscope::trace

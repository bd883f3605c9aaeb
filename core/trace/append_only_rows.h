#pragma once
// Rows of a fixed width that one writer appends and many readers share. A reader holds a RowsView: the
// storage and how many rows it may read. Appended rows never move or change, so handing a live run's
// history to a viewer copies a pointer and a count, never the rows; publishing after step s costs what
// step s added, not the whole history. When the storage is full the writer moves to a larger one (views
// already handed out keep the old one alive), so appends stay amortised O(row).
#include <algorithm>
#include <cstddef>
#include <memory>

namespace kvscope::trace {

template <class T>
struct RowsView {
  std::shared_ptr<const T[]> storage;
  std::size_t n_rows = 0, row_size = 0;

  const T* row(std::size_t r) const { return storage.get() + r * row_size; }
  bool empty() const { return n_rows == 0; }
};

template <class T>
class AppendOnlyRows {
 public:
  explicit AppendOnlyRows(std::size_t row_size = 0, std::size_t expected_rows = 16)
      : row_size_(row_size), capacity_(std::max<std::size_t>(expected_rows, 1)) {}

  std::size_t row_size() const { return row_size_; }
  std::size_t rows() const { return n_rows_; }
  // Bytes the last append copied besides its own row (storage moves), for tests that bound publishing.
  std::size_t bytes_moved_by_last_append() const { return moved_bytes_; }

  // The new row, zero-filled; it becomes visible to views taken after this call.
  T* append() {
    moved_bytes_ = 0;
    if (!storage_ || n_rows_ == capacity_) {
      const std::size_t capacity = storage_ ? capacity_ * 2 : capacity_;
      std::shared_ptr<T[]> grown(new T[capacity * row_size_]());
      if (storage_) {
        std::copy_n(storage_.get(), n_rows_ * row_size_, grown.get());
        moved_bytes_ = n_rows_ * row_size_ * sizeof(T);
      }
      storage_ = std::move(grown);
      capacity_ = capacity;
    }
    return storage_.get() + (n_rows_++) * row_size_;
  }

  RowsView<T> view() const { return {storage_, n_rows_, row_size_}; }

 private:
  std::size_t row_size_ = 0, capacity_ = 0, n_rows_ = 0, moved_bytes_ = 0;
  std::shared_ptr<T[]> storage_;
};

}  // namespace kvscope::trace

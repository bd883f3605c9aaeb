#pragma once
// How many threads each decode step gets. A step is ~150 short parallel regions, each ending in a barrier;
// when another process takes a core, a thread of the team is descheduled for whole time slices and every
// barrier waits for it (measured on 2 cores beside one CPU hog: 2 threads 16 decode tok/s, 1 thread 76, 2
// threads on an idle machine 140). No wait policy is right for both cases (passive waiting costs a quiet
// machine more than half its speed), so the steps themselves decide: decode steps of one run cost the same,
// and the thread count whose steps are fastest is used, with the others retried now and then so that the
// choice follows the machine's load both ways. Thread counts do not change results: every kernel gives each
// output element to exactly one thread.
#include <vector>

namespace kvscope::engine {

class DecodeThreads {
 public:
  // Candidates: max_threads, then halvings down to 1.
  explicit DecodeThreads(int max_threads);

  // The count for the next step.
  int next() const;
  // The wall time of a step that ran with `threads` (the count next() returned).
  void record(int threads, double ms);

  int chosen() const { return candidates_[chosen_]; }
  const std::vector<int>& candidates() const { return candidates_; }

  // Steps between trials of another count: the first trial comes early, and each trial that confirms the
  // choice doubles the wait (quadruples it when the trial was kSlowdown times slower) up to kMaxInterval: a
  // trial costs one step at a worse count.
  static constexpr int kFirstInterval = 4;
  static constexpr int kMaxInterval = 64;
  // A trial replaces the choice when its step is this much faster than the choice's recent steps.
  static constexpr double kSwitchGain = 0.9;
  // A step this much slower than the choice's recent ones means the machine changed: try another count next.
  static constexpr double kSlowdown = 1.5;

 private:
  struct Estimate {
    std::vector<double> recent;  // the last few step times, newest last
    double typical() const;      // their median (a single preempted step does not decide)
  };
  int trial_candidate() const;

  std::vector<int> candidates_;
  std::vector<Estimate> estimates_;
  int chosen_ = 0;
  int steps_since_trial_ = 0;
  int interval_ = kFirstInterval;
  int trials_ = 0;  // alternates trials between the counts below and above the choice
  bool trial_due_ = false;
};

}  // namespace kvscope::engine
